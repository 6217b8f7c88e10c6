package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// A refused commit, through a chain of three, carries the class of the
// member that refused it and no other, names it once and first, says
// whether running it again can help, and is marked refused for certain
// (errs.IsRefused): the client must not take it for a lost answer.
func TestRefusedCommitsNameOneClass(t *testing.T) {
	tc := startCluster(t, 3, 0, 1)
	ctx := context.Background()
	res, err := tc.commit(ctx, 2, txn.Op{Key: "a", Kind: txn.OpCreate})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		via       int
		ops       []txn.Op
		class     error
		retryable bool
		dead      []ring.NodeID // members to declare dead first
	}{
		{"write of a missing blob", 1, []txn.Op{{Key: "b", Kind: txn.OpWrite, Data: []byte("x")}}, errs.ErrNotFound, false, nil},
		{"second create", 0, []txn.Op{{Key: "a", Kind: txn.OpCreate}}, errs.ErrExists, false, nil},
		{"stale read check", 1, []txn.Op{{Key: "a", Kind: txn.OpReadCheck, Version: res[0].Version - 1},
			{Key: "c", Kind: txn.OpCreate}}, errs.ErrConflict, true, nil},
		{"atomic of width 3", 0, []txn.Op{{Key: "a", Kind: txn.OpAtomic, Width: 3, Func: txn.FuncAdd, Operand: 1}},
			errs.ErrInvalidArgument, false, nil},
		{"every replica dead", 0, []txn.Op{{Key: "a", Kind: txn.OpCreate}}, errs.ErrUnavailable, true,
			[]ring.NodeID{"n1", "n2", "n3"}},
	} {
		for _, id := range c.dead {
			tc.dead.Store(id, true)
		}
		_, err := tc.commit(ctx, c.via, c.ops...)
		if err == nil {
			t.Errorf("%s: committed", c.name)
			continue
		}
		if got := errs.Classes(err); len(got) != 1 || got[0] != c.class {
			t.Errorf("%s: %v: classes %v, want %v alone", c.name, err, got, c.class)
		}
		if text := errs.Text(err); !strings.HasPrefix(text, c.class.Error()+": ") || errs.ClassWordPrefixes(text) != 1 {
			t.Errorf("%s: %q: want the class %q named once, first", c.name, text, c.class)
		}
		if text := err.Error(); errs.ClassWordPrefixes(text) > 1 {
			t.Errorf("%s: %q names several classes", c.name, text)
		}
		if errs.Retryable(err) != c.retryable {
			t.Errorf("%s: %v: retryable %t, want %t", c.name, err, errs.Retryable(err), c.retryable)
		}
		if !errs.IsRefused(err) {
			t.Errorf("%s: %v: not marked refused", c.name, err)
		}
		if errors.Is(err, errs.ErrOutcomeUnknown) {
			t.Errorf("%s: %v: outcome unknown", c.name, err)
		}
	}
}
