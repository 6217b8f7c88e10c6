package txn

import (
	"testing"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
)

// TestNewOpValidate covers the validation of atomics, compare-and-swap and
// read checks, each limit at its boundary from both sides.
func TestNewOpValidate(t *testing.T) {
	blobMax := limits.BlobBytesMax
	cas := func(exp, data int) Op {
		return Op{Key: "a", Kind: OpCompareAndSwap, Expected: make([]byte, exp), Data: make([]byte, data)}
	}
	tests := []struct {
		name string
		op   Op
		want error
	}{
		{"atomic", Op{Key: "a", Kind: OpAtomic, Width: 8, Func: FuncAdd, Operand: 1}, nil},
		{"atomic widths 1", Op{Key: "a", Kind: OpAtomic, Width: 1, Func: FuncSet}, nil},
		{"atomic widths 2", Op{Key: "a", Kind: OpAtomic, Width: 2, Func: FuncMaxSigned}, nil},
		{"atomic widths 4", Op{Key: "a", Kind: OpAtomic, Width: 4, Func: FuncMinUnsigned}, nil},
		{"atomic width 0", Op{Key: "a", Kind: OpAtomic, Width: 0, Func: FuncAdd}, errs.ErrInvalidArgument},
		{"atomic width 3", Op{Key: "a", Kind: OpAtomic, Width: 3, Func: FuncAdd}, errs.ErrInvalidArgument},
		{"atomic width 16", Op{Key: "a", Kind: OpAtomic, Width: 16, Func: FuncAdd}, errs.ErrInvalidArgument},
		{"atomic no func", Op{Key: "a", Kind: OpAtomic, Width: 8}, errs.ErrInvalidArgument},
		{"atomic unknown func", Op{Key: "a", Kind: OpAtomic, Width: 8, Func: funcEnd}, errs.ErrInvalidArgument},
		{"atomic with data", Op{Key: "a", Kind: OpAtomic, Width: 8, Func: FuncAdd, Data: []byte{1}}, errs.ErrInvalidArgument},
		{"atomic ends at blob max", Op{Key: "a", Kind: OpAtomic, Offset: blobMax - 8, Width: 8, Func: FuncAdd}, nil},
		{"atomic ends past blob max", Op{Key: "a", Kind: OpAtomic, Offset: blobMax - 7, Width: 8, Func: FuncAdd}, errs.ErrOutOfRange},
		{"atomic huge offset", Op{Key: "a", Kind: OpAtomic, Offset: ^uint64(0), Width: 1, Func: FuncAdd}, errs.ErrOutOfRange},
		{"atomic fields on write", Op{Key: "a", Kind: OpWrite, Width: 8}, errs.ErrInvalidArgument},
		{"operand on create", Op{Key: "a", Kind: OpCreate, Operand: 1}, errs.ErrInvalidArgument},

		{"cas", cas(4, 4), nil},
		{"cas max", cas(limits.CASBytesMax, limits.CASBytesMax), nil},
		{"cas over max", cas(limits.CASBytesMax+1, limits.CASBytesMax+1), errs.ErrInvalidArgument},
		{"cas empty", cas(0, 0), errs.ErrInvalidArgument},
		{"cas length mismatch", cas(4, 3), errs.ErrInvalidArgument},
		{"cas ends past blob max", Op{Key: "a", Kind: OpCompareAndSwap, Offset: blobMax - 1, Expected: []byte{0, 0}, Data: []byte{1, 1}}, errs.ErrOutOfRange},
		{"cas ends at blob max", Op{Key: "a", Kind: OpCompareAndSwap, Offset: blobMax - 2, Expected: []byte{0, 0}, Data: []byte{1, 1}}, nil},
		{"expected on write", Op{Key: "a", Kind: OpWrite, Expected: []byte{1}}, errs.ErrInvalidArgument},

		{"read check", Op{Key: "a", Kind: OpReadCheck, Version: 5}, nil},
		{"read check absent", Op{Key: "a", Kind: OpReadCheck}, nil},
		{"read check with data", Op{Key: "a", Kind: OpReadCheck, Data: []byte{1}}, errs.ErrInvalidArgument},
		{"read check with offset", Op{Key: "a", Kind: OpReadCheck, Offset: 1}, errs.ErrInvalidArgument},
		{"read check bad key", Op{Key: "", Kind: OpReadCheck}, errs.ErrInvalidArgument},
		{"version on write", Op{Key: "a", Kind: OpWrite, Version: 1}, errs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		checkClass(t, tt.name, tt.op.Validate(), tt.want)
	}
}

func TestValidateReadChecks(t *testing.T) {
	checks := func(n int) []Op {
		ops := make([]Op, n)
		for i := range ops {
			ops[i] = Op{Key: "a", Kind: OpReadCheck}
		}
		return ops
	}
	checkClass(t, "only checks", Validate(checks(1)), nil)
	checkClass(t, "max checks", Validate(checks(limits.ReadChecksMax)), nil)
	checkClass(t, "too many checks", Validate(checks(limits.ReadChecksMax+1)), errs.ErrTooLarge)
	ops := make([]Op, limits.OpsPerCommitMax)
	for i := range ops {
		ops[i] = Op{Key: "a", Kind: OpCreate}
	}
	checkClass(t, "max ops and max checks", Validate(append(ops, checks(limits.ReadChecksMax)...)), nil)
	checkClass(t, "too many ops", Validate(append(ops, Op{Key: "a", Kind: OpCreate})), errs.ErrTooLarge)
	checkClass(t, "cas bytes count", Validate([]Op{{Key: "a", Kind: OpCompareAndSwap, Expected: []byte{1}, Data: []byte{2}}}), nil)
}
