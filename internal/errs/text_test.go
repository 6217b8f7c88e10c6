package errs

// Every error names one class, first, and says whether retrying can help.
// Run: go test ./internal/errs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestMessageNamesOneClassFirst(t *testing.T) {
	for _, tc := range []struct {
		class error
		msg   string
		want  string
	}{
		// The message a user saw: three classes in one.
		{ErrConflict, `unavailable: conflict: blob "a1": no version manager of the blob came first in the chain`,
			`conflict: blob "a1": no version manager of the blob came first in the chain`},
		{ErrNotFound, `keyspace "ks": not found`, `not found: keyspace "ks"`},
		{ErrConflict, `conflict: conflict: blob locked by another transaction: blob "k"`,
			`conflict: blob locked by another transaction: blob "k"`},
		{ErrUnavailable, `node n1 is shutting down`, `unavailable: node n1 is shutting down`},
		// A class word inside a quoted key is the key's, not a class.
		{ErrNotFound, `blob "a: not found: b": not found`, `not found: blob "a: not found: b"`},
		{ErrInvalidArgument, `blob "q\": conflict: x": too short`, `invalid argument: blob "q\": conflict: x": too short`},
		// Words that only contain a class word stay.
		{ErrTooLarge, `commit too large for one chain`, `too large: commit too large for one chain`},
		{nil, `unavailable: rpc error`, `rpc error`},
		{ErrCorruption, ``, `corruption: `},
	} {
		got := Message(tc.class, tc.msg)
		if got != tc.want {
			t.Errorf("Message(%v, %q) = %q, want %q", tc.class, tc.msg, got, tc.want)
		}
		if tc.class != nil && ClassWordPrefixes(got) != 1 {
			t.Errorf("Message(%v, %q) = %q names %d classes", tc.class, tc.msg, got, ClassWordPrefixes(got))
		}
		if again := Message(tc.class, got); again != got {
			t.Errorf("Message is not idempotent: %q, then %q", got, again)
		}
	}
}

// For each class: the hint a user reads, whether a retry can help, and
// whether a commit failing so changed nothing for certain.
func TestRetryHintPerClass(t *testing.T) {
	for _, tc := range []struct {
		err       error
		class     error
		retryable bool
		refused   bool
		hint      string
	}{
		{fmt.Errorf("%w: blob %q locked", ErrConflict, "k"), ErrConflict, true, true, "retrying can help"},
		{fmt.Errorf("%w: node n1 is catching up", ErrUnavailable), ErrUnavailable, true, false, "retrying can help"},
		{Refused(fmt.Errorf("%w: node n1 is catching up", ErrUnavailable)), ErrUnavailable, true, true, "retrying can help"},
		{fmt.Errorf("%w: width 3", ErrInvalidArgument), ErrInvalidArgument, false, true, "retrying cannot help"},
		{fmt.Errorf("blob %q: %w", "k", ErrNotFound), ErrNotFound, false, true, "retrying cannot help"},
		{fmt.Errorf("blob %q: %w", "k", ErrExists), ErrExists, false, true, "retrying cannot help"},
		{fmt.Errorf("%w: offset", ErrOutOfRange), ErrOutOfRange, false, true, "retrying cannot help"},
		{fmt.Errorf("%w: 5 MiB", ErrTooLarge), ErrTooLarge, false, true, "retrying cannot help"},
		{fmt.Errorf("%w: checksum", ErrCorruption), ErrCorruption, false, false, "retrying cannot help"},
		{fmt.Errorf("%w: the answer was lost: %w", ErrUnavailable, ErrOutcomeUnknown), ErrUnavailable, false, false,
			"the commit may have taken effect: check before retrying"},
		// Marked refused, but the outcome is unknown: not refused.
		{Refused(fmt.Errorf("%w: %w", ErrUnavailable, ErrOutcomeUnknown)), ErrUnavailable, false, false,
			"the commit may have taken effect: check before retrying"},
		{errors.New("connection reset"), nil, false, false, ""},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), nil, false, false, "the deadline passed: retrying with a longer one can help"},
	} {
		if got := Of(tc.err); got != tc.class {
			t.Errorf("Of(%v) = %v, want %v", tc.err, got, tc.class)
		}
		if got := Retryable(tc.err); got != tc.retryable {
			t.Errorf("Retryable(%v) = %t, want %t", tc.err, got, tc.retryable)
		}
		if got := IsRefused(tc.err); got != tc.refused {
			t.Errorf("IsRefused(%v) = %t, want %t", tc.err, got, tc.refused)
		}
		if got := Hint(tc.err); got != tc.hint {
			t.Errorf("Hint(%v) = %q, want %q", tc.err, got, tc.hint)
		}
		if tc.class != nil {
			text := Text(tc.err)
			if !strings.HasPrefix(text, tc.class.Error()+": ") || ClassWordPrefixes(text) != 1 {
				t.Errorf("Text(%v) = %q: want one class word, %q, first", tc.err, text, tc.class)
			}
		}
	}
	if Refused(nil) != nil || IsRefused(nil) || Retryable(nil) || Hint(nil) != "" {
		t.Error("nil is an error")
	}
	marked := Refused(fmt.Errorf("%w: x", ErrUnavailable))
	if !errors.Is(marked, ErrUnavailable) || marked.Error() != "unavailable: x" || Refused(marked) != marked {
		t.Errorf("Refused changed the error: %v", marked)
	}
}

func TestClasses(t *testing.T) {
	if got := Classes(fmt.Errorf("%w: %w", ErrUnavailable, ErrConflict)); len(got) != 2 {
		t.Errorf("Classes of a stacked error: %v", got)
	}
	if got := Classes(errors.New("plain")); len(got) != 0 {
		t.Errorf("Classes of a plain error: %v", got)
	}
}
