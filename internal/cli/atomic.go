package cli

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/txn"
)

func init() { commandAdders = append(commandAdders, addAtomicCommands) }

func addAtomicCommands(root *cobra.Command, e *env) {
	root.AddCommand(newAtomic(e), newCAS(e), newTxn(e))
}

// exitCASUnequal is the exit code of a cas refused with a conflict: the
// blob's bytes differed from EXPECTED or, rarely, concurrent commits kept
// the blob busy past the server's retries. Either way nothing changed.
// Every other failure exits 1.
const exitCASUnequal = 2

// errCASUnequal marks the error of a cas refused with a conflict.
var errCASUnequal = errors.New("compared unequal")

// exitCode returns the exit code for the error a command failed with.
func exitCode(err error) int {
	if errors.Is(err, errCASUnequal) {
		return exitCASUnequal
	}
	return 1
}

// atomicFunc is an atomic function as the command line names it.
type atomicFunc struct {
	fn client.AtomicFunc
	// signed: the function reads values as two's complement of the width,
	// so it takes negative operands and its new value prints signed.
	signed bool
	// negative: the operand may be given as a negative decimal, stored as
	// two's complement of the width.
	negative bool
}

// name is the function's name on the command line: the server's
// (txn.AtomicFunc.String), so error messages and the command line agree.
func (f atomicFunc) name() string { return txn.AtomicFunc(f.fn).String() }

// atomicFuncs are the functions of `tyr atomic` and of the "atomic" op of
// `tyr txn`.
var atomicFuncs = []atomicFunc{
	{fn: client.FuncAdd, negative: true},
	{fn: client.FuncSub, negative: true},
	{fn: client.FuncMul},
	{fn: client.FuncAnd},
	{fn: client.FuncOr},
	{fn: client.FuncXor},
	{fn: client.FuncMinSigned, signed: true, negative: true},
	{fn: client.FuncMaxSigned, signed: true, negative: true},
	{fn: client.FuncMinUnsigned},
	{fn: client.FuncMaxUnsigned},
	{fn: client.FuncSet},
}

// atomicFuncNames lists the names for error messages.
func atomicFuncNames() string {
	names := make([]string, len(atomicFuncs))
	for i, f := range atomicFuncs {
		names[i] = f.name()
	}
	return strings.Join(names, ", ")
}

func parseAtomicFunc(name string) (atomicFunc, error) {
	for _, f := range atomicFuncs {
		if f.name() == name {
			return f, nil
		}
	}
	return atomicFunc{}, fmt.Errorf("unknown atomic function %q: want one of %s", name, atomicFuncNames())
}

// checkWidth checks the width of an atomic, given as what: the server
// takes 1, 2, 4 or 8 bytes.
func checkWidth(what string, width int64) error {
	switch width {
	case 1, 2, 4, 8:
		return nil
	}
	return fmt.Errorf("invalid %s %d: want 1, 2, 4 or 8", what, width)
}

// parseOperand parses the operand of f at width bytes (already checked):
// hex with a 0x prefix gives the bits and must fit in width bytes; a decimal
// must fit the range f reads it in. For the signed functions that is
// [-2^(8w-1), 2^(8w-1)-1]; for add and sub, whose wrapping arithmetic is the
// same signed or not, [-2^(8w-1), 2^(8w)-1]; for the others [0, 2^(8w)-1].
// A negative operand becomes its two's complement of width bytes.
func parseOperand(f atomicFunc, width int, s string) (uint64, error) {
	bits := uint(8 * width)
	mask := ^uint64(0) >> (64 - bits)
	if digits, ok := cutHexPrefix(s); ok {
		v, err := strconv.ParseUint(digits, 16, 64)
		if err != nil || v > mask {
			return 0, fmt.Errorf("invalid value %q: want at most %d hex digits after 0x for width %d", s, 2*width, width)
		}
		return v, nil
	}
	if strings.HasPrefix(s, "-") {
		if !f.negative {
			return 0, fmt.Errorf("invalid value %q: %s takes no negative value; give the bits in hex (0x...)", s, f.name())
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if lo := -int64(1) << (bits - 1); err != nil || v < lo {
			return 0, fmt.Errorf("invalid value %q: want a decimal of at least %d for width %d", s, lo, width)
		}
		return uint64(v) & mask, nil
	}
	hi := mask
	if f.signed {
		hi = mask >> 1
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > hi {
		return 0, fmt.Errorf("invalid value %q: want a decimal of at most %d, or hex with 0x, for %s of width %d",
			s, hi, f.name(), width)
	}
	return v, nil
}

// cutHexPrefix returns s without a leading 0x or 0X, and whether it had one.
func cutHexPrefix(s string) (string, bool) {
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		return s[2:], true
	}
	return s, false
}

// formatValue renders the new value of an atomic of f at width bytes: signed
// for the signed functions, unsigned for the others.
func formatValue(f atomicFunc, width int, v uint64) string {
	if f.signed {
		shift := uint(64 - 8*width)
		return strconv.FormatInt(int64(v<<shift)>>shift, 10)
	}
	return strconv.FormatUint(v, 10)
}

// negativeValueError rewrites the flag parser's complaint about a positional
// argument that starts with '-', like "-5": the flag parser takes it for a
// shorthand flag, so say how to pass it instead.
func negativeValueError(_ *cobra.Command, err error) error {
	msg := err.Error()
	i := strings.LastIndex(msg, " in -")
	if !strings.HasPrefix(msg, "unknown shorthand flag: ") || i < 0 {
		return err
	}
	return fmt.Errorf("%s; to pass %q as an argument, put -- before it", msg, msg[i+len(" in "):])
}

func newAtomic(e *env) *cobra.Command {
	var offset, width int64
	cmd := &cobra.Command{
		Use:   "atomic FN KS/KEY VALUE",
		Short: "Apply an atomic function to an integer in a blob and print its new value",
		Long: "Apply an atomic function to the little-endian integer of --width bytes (1, 2, 4\n" +
			"or 8) at --offset of an existing blob, in one commit: value = FN(value, VALUE).\n" +
			"Bytes past the end read as zeros and the blob grows to cover the integer.\n" +
			"Prints the new value in decimal.\n\n" +
			"FN is one of add, sub, mul, and, or, xor, min-signed, max-signed,\n" +
			"min-unsigned, max-unsigned and set.\n" +
			"Arithmetic wraps at the width; sub computes value - VALUE. min-signed and\n" +
			"max-signed compare two's complement integers and print the new value signed;\n" +
			"the other functions print it unsigned.\n\n" +
			"VALUE is hex with a 0x prefix (the bits, at most 2*width digits) or decimal.\n" +
			"A negative decimal, stored as two's complement of the width, is taken by add,\n" +
			"sub, min-signed and max-signed; put -- before it: tyr atomic add KS/KEY -- -1.",
		Args: exactArgs(3, "FN KS/KEY VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := parseAtomicFunc(args[0])
			if err != nil {
				return err
			}
			ks, key, err := splitPath(args[1])
			if err != nil {
				return err
			}
			if err := nonNegative("offset", offset); err != nil {
				return err
			}
			if err := checkWidth("--width", width); err != nil {
				return err
			}
			operand, err := parseOperand(f, int(width), args[2])
			if err != nil {
				return err
			}
			return e.withClient(func(c *client.Client) error {
				v, err := c.Atomic(cmd.Context(), ks, key, uint64(offset), int(width), f.fn, operand)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(e.stdout, formatValue(f, int(width), v))
				return err
			})
		},
	}
	cmd.Flags().Int64Var(&offset, "offset", 0, "where the integer starts")
	cmd.Flags().Int64Var(&width, "width", 8, "the integer's size in bytes: 1, 2, 4 or 8")
	cmd.SetFlagErrorFunc(negativeValueError)
	return cmd
}

// parseBytes parses a byte string of cas: hex with a 0x prefix, else the
// text itself.
func parseBytes(what, s string) ([]byte, error) {
	digits, ok := cutHexPrefix(s)
	if !ok {
		return []byte(s), nil
	}
	b, err := hex.DecodeString(digits)
	if err != nil {
		return nil, fmt.Errorf("invalid %s %q: want an even number of hex digits after 0x", what, s)
	}
	return b, nil
}

// casBytes parses EXPECTED and NEW and checks them (see checkCAS).
func casBytes(expectedArg, dataArg string) (expected, data []byte, err error) {
	if expected, err = parseBytes("EXPECTED", expectedArg); err != nil {
		return nil, nil, err
	}
	if data, err = parseBytes("NEW", dataArg); err != nil {
		return nil, nil, err
	}
	if err := checkCAS(expected, data); err != nil {
		return nil, nil, err
	}
	return expected, data, nil
}

// checkCAS checks the byte strings of a compare-and-swap as the server
// would, so that the mistake is reported before anything is sent.
func checkCAS(expected, data []byte) error {
	if len(expected) != len(data) {
		return fmt.Errorf("compare-and-swap of %d expected bytes and %d new bytes: want equal lengths", len(expected), len(data))
	}
	if len(data) == 0 || len(data) > client.CASBytesMax {
		return fmt.Errorf("compare-and-swap of %d bytes: want 1 to %d", len(data), client.CASBytesMax)
	}
	return nil
}

func newCAS(e *env) *cobra.Command {
	var offset int64
	cmd := blobCommand(e, "cas KS/KEY EXPECTED NEW",
		"Replace bytes of a blob with NEW if they equal EXPECTED", 3, 3,
		func(ctx context.Context, c *client.Client, ks, key string, args []string) error {
			if err := nonNegative("offset", offset); err != nil {
				return err
			}
			expected, data, err := casBytes(args[0], args[1])
			if err != nil {
				return err
			}
			err = c.CompareAndSwap(ctx, ks, key, uint64(offset), expected, data)
			if errors.Is(err, client.ErrConflict) {
				return fmt.Errorf("%w: %w", errCASUnequal, err)
			}
			return err
		})
	cmd.Long = "Replace the bytes at --offset of an existing blob with NEW if they equal\n" +
		"EXPECTED, in one commit; bytes past the end compare as zeros. EXPECTED and NEW\n" +
		"are hex with a 0x prefix (0x00ff) or else the text itself, of equal length,\n" +
		fmt.Sprintf("1 to %d bytes. Put -- before an argument that starts with '-'.\n\n", client.CASBytesMax) +
		"Exits 0 when swapped. When nothing was swapped because of a conflict (the\n" +
		"bytes differ from EXPECTED, or, rarely, concurrent commits kept the blob busy)\n" +
		"it exits 2, and the blob is unchanged; any other failure exits 1."
	cmd.Flags().Int64Var(&offset, "offset", 0, "where the bytes start")
	cmd.SetFlagErrorFunc(negativeValueError)
	return cmd
}
