// Package txn defines the unit of commit: a list of operations on blobs of
// one keyspace that take effect all together or not at all. A plain write is
// a transaction of one op. The chain commit protocol carries these.
package txn

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/limits"
)

// OpKind is the kind of an operation. Zero is invalid.
type OpKind uint8

const (
	// OpCreate creates an empty blob; it fails if the blob exists.
	OpCreate OpKind = 1 + iota
	// OpWrite writes Data at Offset, extending the blob if needed.
	OpWrite
	// OpAppend writes Data at the blob's end, decided at commit.
	OpAppend
	// OpTruncate sets the size to Size: shrinking drops data, extending reads
	// as zeros.
	OpTruncate
	// OpDelete removes the blob.
	OpDelete
	// OpAtomic is a read-modify-write of the unsigned little-endian integer
	// of Width bytes (1, 2, 4 or 8) at Offset: value = Func(value, Operand),
	// with wrapping arithmetic; Operand is truncated to Width bytes, and the
	// signed functions read both as two's complement of Width bytes. Bytes
	// past the blob's end read as zeros and the op extends the blob to
	// Offset+Width. Result.Value is the new value. The blob must exist.
	OpAtomic
	// OpCompareAndSwap replaces the bytes at Offset with Data if they equal
	// Expected (same length, 1 to limits.CASBytesMax bytes). Bytes past the
	// end compare as zeros; a successful swap extends the blob. On a
	// mismatch the whole commit fails with errs.ErrConflict.
	OpCompareAndSwap
	// OpReadCheck makes the commit conditional: it fails with
	// errs.ErrConflict unless the blob's current version is Version (0: the
	// blob does not exist). Every read check of a commit is evaluated, with
	// all blobs locked, before any op applies, wherever it sits in the list.
	// It changes nothing; its Result is empty.
	OpReadCheck
)

var opKindNames = [...]string{"", "create", "write", "append", "truncate", "delete", "atomic", "compare-and-swap", "read-check"}

// AtomicFunc is the function of an OpAtomic. Zero is invalid. The values
// equal those of the wire enum tyrpb.AtomicFunc.
type AtomicFunc uint8

const (
	FuncAdd AtomicFunc = 1 + iota
	FuncSub            // current - operand
	FuncMul
	FuncAnd
	FuncOr
	FuncXor
	FuncMinSigned
	FuncMaxSigned
	FuncMinUnsigned
	FuncMaxUnsigned
	FuncSet
	funcEnd
)

var funcNames = [...]string{"", "add", "sub", "mul", "and", "or", "xor", "min-signed", "max-signed",
	"min-unsigned", "max-unsigned", "set"}

func (f AtomicFunc) String() string {
	if f != 0 && f < funcEnd {
		return funcNames[f]
	}
	return fmt.Sprintf("AtomicFunc(%d)", uint8(f))
}

// Apply returns f(cur, operand) on integers of width bytes; both inputs are
// truncated to width bytes and so is the result.
func (f AtomicFunc) Apply(width int, cur, operand uint64) uint64 {
	mask := ^uint64(0)
	if width < 8 {
		mask = 1<<(8*width) - 1
	}
	cur, operand = cur&mask, operand&mask
	shift := uint(64 - 8*width)
	signed := func(v uint64) int64 { return int64(v<<shift) >> shift }
	var v uint64
	switch f {
	case FuncAdd:
		v = cur + operand
	case FuncSub:
		v = cur - operand
	case FuncMul:
		v = cur * operand
	case FuncAnd:
		v = cur & operand
	case FuncOr:
		v = cur | operand
	case FuncXor:
		v = cur ^ operand
	case FuncMinSigned:
		v = cur
		if signed(operand) < signed(cur) {
			v = operand
		}
	case FuncMaxSigned:
		v = cur
		if signed(operand) > signed(cur) {
			v = operand
		}
	case FuncMinUnsigned:
		v = min(cur, operand)
	case FuncMaxUnsigned:
		v = max(cur, operand)
	case FuncSet:
		v = operand
	default:
		v = cur
	}
	return v & mask
}

func (k OpKind) String() string {
	if int(k) < len(opKindNames) && k != 0 {
		return opKindNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one operation of a transaction. Data is owned by the Op once it is
// handed to a commit; callers must not change it afterwards.
type Op struct {
	Key    string
	Kind   OpKind
	Offset uint64 // OpWrite
	Size   uint64 // OpTruncate
	Data   []byte // OpWrite, OpAppend, OpCompareAndSwap (the new bytes)
	// Create makes OpWrite and OpAppend create a missing blob rather than
	// fail with errs.ErrNotFound.
	Create bool

	Width    int        // OpAtomic: 1, 2, 4 or 8
	Func     AtomicFunc // OpAtomic
	Operand  uint64     // OpAtomic
	Expected []byte     // OpCompareAndSwap
	Version  uint64     // OpReadCheck
}

// Result is what one committed op reports.
type Result struct {
	Offset  uint64 // where Data landed (OpWrite, OpAppend)
	Size    uint64 // blob size after the commit
	Version uint64 // blob version after the commit; 0 after OpDelete
	Value   uint64 // OpAtomic: the new value
	// Unheld marks a Value computed by a chain member that does not hold
	// the op's chunk, so it is not the value (see MergeResults).
	Unheld bool
}

// Keys returns the keys ops touch, each once, in the order they first
// appear.
func Keys(ops []Op) []string {
	var keys []string
	for _, op := range ops {
		if !slices.Contains(keys, op.Key) {
			keys = append(keys, op.Key)
		}
	}
	return keys
}

// MergeResults returns a member's results with the values it could not
// compute taken from the member after it in the chain, which passed them
// on from a holder of the chunk. It changes neither argument: when it
// takes a value, it returns a copy of own.
func MergeResults(own, downstream []Result) []Result {
	if len(own) != len(downstream) {
		return own
	}
	var out []Result
	for i := range own {
		if own[i].Unheld && !downstream[i].Unheld {
			if out == nil {
				out = slices.Clone(own)
			}
			out[i] = downstream[i]
		}
	}
	if out == nil {
		return own
	}
	return out
}

// Validate checks one op against the limits that do not depend on stored
// state. It does not look at the blob.
func (op Op) Validate() error {
	if err := keyspace.ValidateKey(op.Key); err != nil {
		return err
	}
	if op.Kind != OpAtomic && (op.Width != 0 || op.Func != 0 || op.Operand != 0) {
		return fmt.Errorf("%w: %s carries atomic fields", errs.ErrInvalidArgument, op.Kind)
	}
	if op.Kind != OpCompareAndSwap && len(op.Expected) != 0 {
		return fmt.Errorf("%w: %s carries expected bytes", errs.ErrInvalidArgument, op.Kind)
	}
	if op.Kind != OpReadCheck && op.Version != 0 {
		return fmt.Errorf("%w: %s carries a version", errs.ErrInvalidArgument, op.Kind)
	}
	switch op.Kind {
	case OpAtomic:
		if len(op.Data) != 0 {
			return fmt.Errorf("%w: %s carries no data", errs.ErrInvalidArgument, op.Kind)
		}
		if op.Width != 1 && op.Width != 2 && op.Width != 4 && op.Width != 8 {
			return fmt.Errorf("%w: atomic width %d, want 1, 2, 4 or 8", errs.ErrInvalidArgument, op.Width)
		}
		if op.Func == 0 || op.Func >= funcEnd {
			return fmt.Errorf("%w: unknown atomic function %d", errs.ErrInvalidArgument, op.Func)
		}
		if op.Offset > limits.BlobBytesMax-uint64(op.Width) {
			return fmt.Errorf("%w: atomic at offset %d of %d bytes ends past the blob size limit of %d",
				errs.ErrOutOfRange, op.Offset, op.Width, limits.BlobBytesMax)
		}
	case OpCompareAndSwap:
		if len(op.Data) != len(op.Expected) {
			return fmt.Errorf("%w: compare-and-swap of %d expected bytes and %d new bytes, want equal lengths",
				errs.ErrInvalidArgument, len(op.Expected), len(op.Data))
		}
		if len(op.Data) == 0 || len(op.Data) > limits.CASBytesMax {
			return fmt.Errorf("%w: compare-and-swap of %d bytes, want 1 to %d",
				errs.ErrInvalidArgument, len(op.Data), limits.CASBytesMax)
		}
		if op.Offset > limits.BlobBytesMax-uint64(len(op.Data)) {
			return fmt.Errorf("%w: compare-and-swap at offset %d of %d bytes ends past the blob size limit of %d",
				errs.ErrOutOfRange, op.Offset, len(op.Data), limits.BlobBytesMax)
		}
	case OpReadCheck:
		if len(op.Data) != 0 || op.Offset != 0 || op.Size != 0 || op.Create {
			return fmt.Errorf("%w: %s carries only a key and a version", errs.ErrInvalidArgument, op.Kind)
		}
	case OpCreate, OpDelete:
		if len(op.Data) != 0 {
			return fmt.Errorf("%w: %s carries no data", errs.ErrInvalidArgument, op.Kind)
		}
	case OpWrite, OpAppend:
		if len(op.Data) > limits.PayloadBytesMax {
			return fmt.Errorf("%w: %s of %d bytes, above the per-request limit of %d",
				errs.ErrTooLarge, op.Kind, len(op.Data), limits.PayloadBytesMax)
		}
		if op.Kind == OpWrite && (op.Offset > limits.BlobBytesMax ||
			uint64(len(op.Data)) > limits.BlobBytesMax-op.Offset) {
			return fmt.Errorf("%w: write at offset %d of %d bytes ends past the blob size limit of %d",
				errs.ErrOutOfRange, op.Offset, len(op.Data), limits.BlobBytesMax)
		}
	case OpTruncate:
		if len(op.Data) != 0 {
			return fmt.Errorf("%w: %s carries no data", errs.ErrInvalidArgument, op.Kind)
		}
		if op.Size > limits.BlobBytesMax {
			return fmt.Errorf("%w: truncate to %d, past the blob size limit of %d",
				errs.ErrOutOfRange, op.Size, limits.BlobBytesMax)
		}
	default:
		return fmt.Errorf("%w: unknown op kind %d", errs.ErrInvalidArgument, op.Kind)
	}
	return nil
}

// Validate checks a whole list of ops: count, total payload and each op.
// Read checks count against limits.ReadChecksMax, the other ops against
// limits.OpsPerCommitMax; a commit of only read checks is valid.
func Validate(ops []Op) error {
	if len(ops) == 0 {
		return fmt.Errorf("%w: commit with no ops", errs.ErrInvalidArgument)
	}
	checks := 0
	for _, op := range ops {
		if op.Kind == OpReadCheck {
			checks++
		}
	}
	if n := len(ops) - checks; n > limits.OpsPerCommitMax {
		return fmt.Errorf("%w: commit of %d ops, above the limit of %d",
			errs.ErrTooLarge, n, limits.OpsPerCommitMax)
	}
	if checks > limits.ReadChecksMax {
		return fmt.Errorf("%w: commit of %d read checks, above the limit of %d",
			errs.ErrTooLarge, checks, limits.ReadChecksMax)
	}
	total := 0
	for i, op := range ops {
		if err := op.Validate(); err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
		total += len(op.Data) + len(op.Expected)
	}
	if total > limits.CommitBytesMax {
		return fmt.Errorf("%w: commit of %d bytes, above the limit of %d",
			errs.ErrTooLarge, total, limits.CommitBytesMax)
	}
	return nil
}

// resultBytes is the encoded size of one Result (see EncodeResults).
const resultBytes = 4*8 + 1

// EncodeResults encodes results for storage: per result, Offset, Size,
// Version and Value big-endian, then Unheld as one byte.
func EncodeResults(results []Result) []byte {
	b := make([]byte, 0, len(results)*resultBytes)
	for _, r := range results {
		b = binary.BigEndian.AppendUint64(b, r.Offset)
		b = binary.BigEndian.AppendUint64(b, r.Size)
		b = binary.BigEndian.AppendUint64(b, r.Version)
		b = binary.BigEndian.AppendUint64(b, r.Value)
		unheld := byte(0)
		if r.Unheld {
			unheld = 1
		}
		b = append(b, unheld)
	}
	return b
}

// DecodeResults decodes what EncodeResults encoded.
func DecodeResults(b []byte) ([]Result, error) {
	if len(b)%resultBytes != 0 {
		return nil, fmt.Errorf("%w: encoded results of %d bytes", errs.ErrCorruption, len(b))
	}
	out := make([]Result, 0, len(b)/resultBytes)
	for ; len(b) > 0; b = b[resultBytes:] {
		if b[32] > 1 {
			return nil, fmt.Errorf("%w: encoded result flag %d", errs.ErrCorruption, b[32])
		}
		out = append(out, Result{
			Offset: binary.BigEndian.Uint64(b), Size: binary.BigEndian.Uint64(b[8:]),
			Version: binary.BigEndian.Uint64(b[16:]), Value: binary.BigEndian.Uint64(b[24:]), Unheld: b[32] == 1,
		})
	}
	return out, nil
}
