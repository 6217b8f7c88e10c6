package node

import (
	"errors"
	"fmt"
	"strings"
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
		{fmt.Errorf("%w: node n1 is %w", errs.ErrUnavailable, errCatchingUp), errs.ErrUnavailable, true, 0, false},
		// A member's conflict it asks to retry stays a conflict.
		{fmt.Errorf("%w: blob %q: %w", errs.ErrConflict, "a1", mvcc.ErrNoBase), errs.ErrConflict, true, 0, false},
		{fmt.Errorf("%w: %w: %w: blob %q", errs.ErrConflict, mvcc.ErrLocked, mvcc.ErrAheadUnseen, "k"), errs.ErrConflict, true, 0, false},
		{chain.ErrBehind, errs.ErrUnavailable, true, 0, true},
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
		// One class, named once, first.
		if got := errs.Classes(r.err); len(got) != 1 {
			t.Errorf("%q decoded to an error of classes %v", text, got)
		}
		msg := r.err.Error()
		if !strings.HasPrefix(msg, tc.class.Error()+": ") || errs.ClassWordPrefixes(msg) != 1 {
			t.Errorf("%q decoded to %q: want the class %q named once, first", text, msg, tc.class)
		}
	}
}

// The refusal a user once saw read "unavailable: conflict: blob "a1": no
// version manager of the blob came first in the chain": a member's
// conflict, which the coordinator retries, came back as unavailable with
// the conflict inside, and the client took it for a lost answer. It is the
// member's conflict, named once, and worth running again.
func TestRefusalKeepsTheMembersClass(t *testing.T) {
	member := fmt.Errorf("%w: blob %q: %w", errs.ErrConflict, "a1", mvcc.ErrNoBase)
	r := decodeRefusal(taggedError{member}.Error())
	if !r.locked {
		t.Error("the coordinator does not retry it")
	}
	const want = `conflict: blob "a1": no version manager of the blob came first in the chain`
	if got := r.err.Error(); got != want {
		t.Errorf("refusal %q, want %q", got, want)
	}
	if errors.Is(r.err, errs.ErrUnavailable) || !errors.Is(r.err, errs.ErrConflict) {
		t.Errorf("refusal of classes %v, want conflict only", errs.Classes(r.err))
	}
	if !errs.Retryable(r.err) || !errs.IsRefused(r.err) {
		t.Errorf("retryable %t, refused %t; want both", errs.Retryable(r.err), errs.IsRefused(r.err))
	}
	// A refusal in the text an older member sends keeps one class too.
	old := decodeRefusal("retry: " + member.Error())
	if got := old.err.Error(); errs.ClassWordPrefixes(got) != 1 || !strings.HasPrefix(got, "unavailable: ") {
		t.Errorf("older refusal decoded to %q", got)
	}
}
