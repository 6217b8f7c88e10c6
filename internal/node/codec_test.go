package node

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/mvcc"
)

// A stager's error survives the trip up the chain as text: the class for
// the client, and whether (and above which version) to try again.
func TestRefusalRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		err      error
		class    error
		locked   bool
		floor    uint64
		untagged bool // a refusal of the chain itself, not of a stager
	}{
		{fmt.Errorf("blob %q: %w", "k", errs.ErrNotFound), errs.ErrNotFound, false, 0, false},
		{fmt.Errorf("op 0: %w", errs.ErrOutOfRange), errs.ErrOutOfRange, false, 0, false},
		{fmt.Errorf("%w: %w: blob %q", errs.ErrConflict, mvcc.ErrLocked, "k"), errs.ErrConflict, true, 0, false},
		{&mvcc.StaleVersionError{Key: "k", Version: 5, Floor: 9}, errs.ErrConflict, false, 9, false},
		{fmt.Errorf("node n1: %w", errCatchingUp), errs.ErrUnavailable, true, 0, false},
		{errors.New("chain: busy"), errs.ErrUnavailable, false, 0, true},
		{chain.ErrRestarted, errs.ErrUnavailable, true, 0, true},
		{errors.New("no class"), errs.ErrUnavailable, false, 0, false},
	} {
		text := taggedError{tc.err}.Error()
		if tc.untagged {
			text = tc.err.Error()
		}
		r := decodeRefusal(text)
		if !errors.Is(r.err, tc.class) || r.locked != tc.locked || r.floor != tc.floor {
			t.Errorf("%q decoded to %v (locked %t, floor %d); want class %v, locked %t, floor %d",
				text, r.err, r.locked, r.floor, tc.class, tc.locked, tc.floor)
		}
	}
}
