// Tests for op validation: every limit that txn.Op.Validate and txn.Validate
// enforce (key rules, data on data-less ops, payload, offset and size limits,
// op count, commit bytes, unknown kinds), each at its boundary from both
// sides, and the error class each violation is reported as (which decides
// the gRPC code the client sees).
//
// Reproduce a failure with:
//
//	go test -race -count=1 -run 'TestOp|TestValidate' -v ./internal/txn/
package txn

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
)

// checkClass fails unless err is nil when want is nil, or is of class want.
func checkClass(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Errorf("%s: unexpected error %v", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Errorf("%s: got error %v, want class %q", what, err, want)
	}
}

func TestOpValidate(t *testing.T) {
	blobMax := limits.BlobBytesMax
	payload := make([]byte, limits.PayloadBytesMax)
	over := make([]byte, limits.PayloadBytesMax+1)
	one := []byte{1}
	tests := []struct {
		name string
		op   Op
		want error
	}{
		{"create", Op{Key: "a", Kind: OpCreate}, nil},
		{"create empty data", Op{Key: "a", Kind: OpCreate, Data: []byte{}}, nil},
		{"create with data", Op{Key: "a", Kind: OpCreate, Data: one}, errs.ErrInvalidArgument},
		{"delete", Op{Key: "a", Kind: OpDelete}, nil},
		{"delete with data", Op{Key: "a", Kind: OpDelete, Data: one}, errs.ErrInvalidArgument},

		{"write", Op{Key: "a", Kind: OpWrite, Offset: 10, Data: one}, nil},
		{"write no data", Op{Key: "a", Kind: OpWrite}, nil},
		{"write create", Op{Key: "a", Kind: OpWrite, Data: one, Create: true}, nil},
		{"write max payload", Op{Key: "a", Kind: OpWrite, Data: payload}, nil},
		{"write over payload", Op{Key: "a", Kind: OpWrite, Data: over}, errs.ErrTooLarge},
		{"write ends at blob max", Op{Key: "a", Kind: OpWrite, Offset: blobMax - 1, Data: one}, nil},
		{"write payload ends at blob max", Op{Key: "a", Kind: OpWrite, Offset: blobMax - uint64(len(payload)), Data: payload}, nil},
		{"write ends past blob max", Op{Key: "a", Kind: OpWrite, Offset: blobMax, Data: one}, errs.ErrOutOfRange},
		{"write payload ends past blob max", Op{Key: "a", Kind: OpWrite, Offset: blobMax - uint64(len(payload)) + 1, Data: payload}, errs.ErrOutOfRange},
		{"empty write at blob max", Op{Key: "a", Kind: OpWrite, Offset: blobMax}, nil},
		{"empty write past blob max", Op{Key: "a", Kind: OpWrite, Offset: blobMax + 1}, errs.ErrOutOfRange},
		{"write at huge offset", Op{Key: "a", Kind: OpWrite, Offset: ^uint64(0), Data: one}, errs.ErrOutOfRange},
		{"write wrapping offset", Op{Key: "a", Kind: OpWrite, Offset: ^uint64(0) - 1, Data: []byte{1, 2, 3}}, errs.ErrOutOfRange},

		{"append", Op{Key: "a", Kind: OpAppend, Data: one}, nil},
		{"append create", Op{Key: "a", Kind: OpAppend, Data: one, Create: true}, nil},
		{"append max payload", Op{Key: "a", Kind: OpAppend, Data: payload}, nil},
		{"append over payload", Op{Key: "a", Kind: OpAppend, Data: over}, errs.ErrTooLarge},
		// Offset is not an append's field; the blob's end is decided at commit.
		{"append ignores offset", Op{Key: "a", Kind: OpAppend, Offset: ^uint64(0), Data: one}, nil},

		{"truncate to 0", Op{Key: "a", Kind: OpTruncate}, nil},
		{"truncate to blob max", Op{Key: "a", Kind: OpTruncate, Size: blobMax}, nil},
		{"truncate past blob max", Op{Key: "a", Kind: OpTruncate, Size: blobMax + 1}, errs.ErrOutOfRange},
		{"truncate to huge", Op{Key: "a", Kind: OpTruncate, Size: ^uint64(0)}, errs.ErrOutOfRange},

		{"kind 0", Op{Key: "a"}, errs.ErrInvalidArgument},
		{"kind past delete", Op{Key: "a", Kind: OpDelete + 1}, errs.ErrInvalidArgument},
		{"kind 255", Op{Key: "a", Kind: 255}, errs.ErrInvalidArgument},

		{"empty key", Op{Kind: OpCreate}, errs.ErrInvalidArgument},
		{"key at limit", Op{Key: strings.Repeat("k", limits.KeyBytesMax), Kind: OpCreate}, nil},
		{"key over limit", Op{Key: strings.Repeat("k", limits.KeyBytesMax+1), Kind: OpCreate}, errs.ErrInvalidArgument},
		{"key with NUL", Op{Key: "a\x00", Kind: OpWrite, Data: one}, errs.ErrInvalidArgument},
		{"key not UTF-8", Op{Key: "\xfe", Kind: OpDelete}, errs.ErrInvalidArgument},
		{"unicode key", Op{Key: "日本/語 🙂", Kind: OpTruncate, Size: 7}, nil},
	}
	for _, tt := range tests {
		checkClass(t, tt.name, tt.op.Validate(), tt.want)
	}
}

func TestValidate(t *testing.T) {
	payload := make([]byte, limits.PayloadBytesMax)
	n := func(count int, op Op) []Op {
		ops := make([]Op, count)
		for i := range ops {
			ops[i] = op
		}
		return ops
	}
	create := Op{Key: "a", Kind: OpCreate}
	write := Op{Key: "a", Kind: OpWrite, Data: payload}
	perCommit := limits.CommitBytesMax / limits.PayloadBytesMax
	tests := []struct {
		name string
		ops  []Op
		want error
	}{
		{"nil", nil, errs.ErrInvalidArgument},
		{"empty", []Op{}, errs.ErrInvalidArgument},
		{"one", []Op{create}, nil},
		{"max ops", n(limits.OpsPerCommitMax, create), nil},
		{"too many ops", n(limits.OpsPerCommitMax+1, create), errs.ErrTooLarge},
		{"max commit bytes", n(perCommit, write), nil},
		{"commit bytes over", append(n(perCommit, write), Op{Key: "b", Kind: OpAppend, Data: []byte{1}}), errs.ErrTooLarge},
		{"bad op among good", []Op{create, create, {Key: "", Kind: OpCreate}, create}, errs.ErrInvalidArgument},
		{"out-of-range op", []Op{create, {Key: "a", Kind: OpTruncate, Size: limits.BlobBytesMax + 1}}, errs.ErrOutOfRange},
		{"mixed kinds, same key", []Op{create, write, {Key: "a", Kind: OpAppend, Data: []byte("x")},
			{Key: "a", Kind: OpTruncate, Size: 3}, {Key: "a", Kind: OpDelete}}, nil},
	}
	for _, tt := range tests {
		checkClass(t, tt.name, Validate(tt.ops), tt.want)
	}

	// A bad op is named by its index so the client can find it.
	err := Validate([]Op{create, create, {Key: "a", Kind: OpCreate, Data: []byte{1}}})
	if err == nil || !strings.Contains(err.Error(), "op 2:") {
		t.Errorf("error %v does not name op 2", err)
	}
	// Limits are checked before ops: an oversized list reports its size.
	err = Validate(n(limits.OpsPerCommitMax+1, Op{}))
	if !errors.Is(err, errs.ErrTooLarge) {
		t.Errorf("oversized list of bad ops: got %v, want ErrTooLarge", err)
	}
}

func TestOpKindString(t *testing.T) {
	want := map[OpKind]string{OpCreate: "create", OpWrite: "write", OpAppend: "append",
		OpTruncate: "truncate", OpDelete: "delete", OpAtomic: "atomic", OpCompareAndSwap: "compare-and-swap",
		OpReadCheck: "read-check", 0: "OpKind(0)", 10: "OpKind(10)", 255: "OpKind(255)"}
	for k, w := range want {
		if got := k.String(); got != w {
			t.Errorf("OpKind(%d).String() = %q, want %q", uint8(k), got, w)
		}
		if got := fmt.Sprint(k); got != w {
			t.Errorf("fmt of OpKind(%d) = %q, want %q", uint8(k), got, w)
		}
	}
}

// TestMergeResults: a member's unheld values are taken from downstream,
// held ones kept, and neither argument changes.
func TestMergeResults(t *testing.T) {
	own := []Result{{Value: 1}, {Value: 2, Unheld: true}, {Value: 3, Unheld: true}}
	down := []Result{{Value: 10}, {Value: 20}, {Value: 30, Unheld: true}}
	ownBefore, downBefore := slices.Clone(own), slices.Clone(down)
	got := MergeResults(own, down)
	want := []Result{{Value: 1}, {Value: 20}, {Value: 3, Unheld: true}}
	if !slices.Equal(got, want) {
		t.Fatalf("MergeResults = %v, want %v", got, want)
	}
	if !slices.Equal(own, ownBefore) || !slices.Equal(down, downBefore) {
		t.Fatalf("MergeResults changed its arguments: own %v, downstream %v", own, down)
	}
	if got := MergeResults(own, down[:2]); !slices.Equal(got, own) {
		t.Fatalf("MergeResults of unequal lengths = %v, want own %v", got, own)
	}
}
