package cli

// These tests cover the parsing of the operands and byte strings of
// `tyr atomic`, `tyr cas` and the atomic and cas ops of `tyr txn`, each range
// at its boundary from both sides, without a server. Run:
// go test -run CLI ./internal/cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/client"
)

// TestCLIAtomicFuncNames checks that the command line has every atomic
// function, once, each with a name the server knows.
func TestCLIAtomicFuncNames(t *testing.T) {
	seen := map[client.AtomicFunc]bool{}
	for _, f := range atomicFuncs {
		if strings.HasPrefix(f.name(), "AtomicFunc(") {
			t.Errorf("%d: the server has no name for it", f.fn)
		}
		if f.signed && !f.negative {
			t.Errorf("%s: signed but takes no negative operand", f.name())
		}
		seen[f.fn] = true
	}
	if len(seen) != len(atomicFuncs) || len(seen) != int(client.FuncSet) {
		t.Errorf("%d functions named, %d distinct; the client has %d", len(atomicFuncs), len(seen), client.FuncSet)
	}
	help := newAtomic(&env{}).Long
	for _, f := range atomicFuncs {
		if !strings.Contains(help, f.name()) {
			t.Errorf("the help of tyr atomic does not name %s", f.name())
		}
	}
	if _, err := parseAtomicFunc("min"); err == nil || !strings.Contains(err.Error(), "min-signed") {
		t.Errorf("parseAtomicFunc(min): %v, want an error listing the names", err)
	}
}

func TestCLIParseOperand(t *testing.T) {
	fn := func(name string) atomicFunc {
		f, err := parseAtomicFunc(name)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	add, set, minSigned, and := fn("add"), fn("set"), fn("min-signed"), fn("and")
	for _, tc := range []struct {
		f     atomicFunc
		width int
		in    string
		want  uint64
		err   string // a part of the error; "" for none
	}{
		{add, 8, "5", 5, ""},
		{add, 8, "0", 0, ""},
		{add, 8, "18446744073709551615", 1<<64 - 1, ""},
		{add, 8, "18446744073709551616", 0, "at most 18446744073709551615"},
		{add, 8, "-1", 1<<64 - 1, ""},
		{add, 8, "-9223372036854775808", 1 << 63, ""},
		{add, 8, "-9223372036854775809", 0, "at least -9223372036854775808"},
		{add, 1, "255", 255, ""},
		{add, 1, "256", 0, "at most 255"},
		{add, 1, "-1", 0xff, ""},
		{add, 1, "-128", 0x80, ""},
		{add, 1, "-129", 0, "at least -128"},
		{add, 2, "-2", 0xfffe, ""},
		{add, 4, "-1", 0xffffffff, ""},
		{fn("sub"), 4, "-7", 0xfffffff9, ""},
		{add, 1, "0xff", 0xff, ""},
		{add, 1, "0x0ff", 0xff, ""},
		{add, 1, "0x100", 0, "at most 2 hex digits"},
		{add, 2, "0XBEEF", 0xbeef, ""},
		{add, 8, "0xffffffffffffffff", 1<<64 - 1, ""},
		{add, 8, "0x1ffffffffffffffff", 0, "at most 16 hex digits"},
		{add, 8, "0x", 0, "hex digits"},
		{add, 8, "0xg", 0, "hex digits"},
		{add, 8, "-0x1", 0, "at least"},
		{minSigned, 1, "127", 127, ""},
		{minSigned, 1, "128", 0, "at most 127"},
		{minSigned, 1, "-128", 0x80, ""},
		{minSigned, 1, "-129", 0, "at least -128"},
		{minSigned, 1, "0x80", 0x80, ""},
		{fn("max-signed"), 8, "-3", 1<<64 - 3, ""},
		{fn("max-signed"), 8, "9223372036854775808", 0, "at most 9223372036854775807"},
		{set, 2, "65535", 65535, ""},
		{set, 2, "-1", 0, "set takes no negative value"},
		{and, 8, "-1", 0, "and takes no negative value"},
		{fn("min-unsigned"), 4, "-1", 0, "takes no negative value"},
		{fn("mul"), 8, "-2", 0, "takes no negative value"},
		{add, 8, "", 0, "invalid value"},
		{add, 8, "+5", 0, "invalid value"},
		{add, 8, "1.5", 0, "invalid value"},
		{add, 8, "five", 0, "invalid value"},
	} {
		got, err := parseOperand(tc.f, tc.width, tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s width %d %q: %v", tc.f.name(), tc.width, tc.in, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%s width %d %q = %#x, want %#x", tc.f.name(), tc.width, tc.in, got, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s width %d %q: %#x, %v; want an error with %q", tc.f.name(), tc.width, tc.in, got, err, tc.err)
		}
	}
}

func TestCLIFormatValue(t *testing.T) {
	minSigned, _ := parseAtomicFunc("min-signed")
	add, _ := parseAtomicFunc("add")
	for _, tc := range []struct {
		f     atomicFunc
		width int
		v     uint64
		want  string
	}{
		{minSigned, 1, 0xff, "-1"},
		{minSigned, 1, 0x7f, "127"},
		{minSigned, 2, 0x8000, "-32768"},
		{minSigned, 8, 1<<64 - 3, "-3"},
		{add, 1, 0xff, "255"},
		{add, 8, 1<<64 - 1, "18446744073709551615"},
	} {
		if got := formatValue(tc.f, tc.width, tc.v); got != tc.want {
			t.Errorf("formatValue(%s, %d, %#x) = %s, want %s", tc.f.name(), tc.width, tc.v, got, tc.want)
		}
	}
}

func TestCLIWidth(t *testing.T) {
	for w := int64(-1); w <= 9; w++ {
		err := checkWidth("--width", w)
		if valid := w == 1 || w == 2 || w == 4 || w == 8; valid != (err == nil) {
			t.Errorf("checkWidth(%d): %v", w, err)
		}
	}
}

func TestCLICASBytes(t *testing.T) {
	for _, tc := range []struct {
		expected, data         string
		wantExpected, wantData []byte
		err                    string
	}{
		{"hello", "jello", []byte("hello"), []byte("jello"), ""},
		{"0x00ff", "0xFF00", []byte{0, 0xff}, []byte{0xff, 0}, ""},
		{"0x00ff", "ab", []byte{0, 0xff}, []byte("ab"), ""},
		{"x0ff", "abcd", []byte("x0ff"), []byte("abcd"), ""},
		{"0x0", "a", nil, nil, "even number of hex digits"},
		{"0xzz", "a", nil, nil, "even number of hex digits"},
		{"ab", "abc", nil, nil, "want equal lengths"},
		{"", "", nil, nil, "want 1 to 4096"},
		{"0x", "0x", nil, nil, "want 1 to 4096"},
		{strings.Repeat("a", client.CASBytesMax), strings.Repeat("b", client.CASBytesMax),
			bytes.Repeat([]byte("a"), client.CASBytesMax), bytes.Repeat([]byte("b"), client.CASBytesMax), ""},
		{strings.Repeat("a", client.CASBytesMax+1), strings.Repeat("b", client.CASBytesMax+1), nil, nil, "want 1 to 4096"},
	} {
		expected, data, err := casBytes(tc.expected, tc.data)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("casBytes(%q, %q): %v", tc.expected, tc.data, err)
		case tc.err == "" && (!bytes.Equal(expected, tc.wantExpected) || !bytes.Equal(data, tc.wantData)):
			t.Errorf("casBytes(%q, %q) = %x, %x; want %x, %x", tc.expected, tc.data, expected, data, tc.wantExpected, tc.wantData)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("casBytes(%q, %q): %v; want an error with %q", tc.expected, tc.data, err, tc.err)
		}
	}
}

// TestCLIExitCode checks that only a cas that compared unequal exits 2.
func TestCLIExitCode(t *testing.T) {
	conflict := &client.Error{Class: client.ErrConflict, Message: "differ"}
	if got := exitCode(fmt.Errorf("%w: %w", errCASUnequal, conflict)); got != exitCASUnequal {
		t.Errorf("exit code of a cas that compared unequal: %d", got)
	}
	if got := exitCode(conflict); got != 1 {
		t.Errorf("exit code of a plain conflict: %d, want 1", got)
	}
	if line := errorLine(fmt.Errorf("%w: %w", errCASUnequal, conflict)); line != "tyr: conflict: differ; retrying can help" {
		t.Errorf("error line %q, want the server's message", line)
	}
}
