package errs

import (
	"context"
	"errors"
	"strings"
)

// One class per error. An error reaches the user as "<class>: <detail>":
// its class word first, once, so that the user can tell which class it is
// and whether trying again can help. Layers that pass an error on keep the
// class of the layer that raised it (a member's refusal keeps the member's
// class); only an outcome that is not known is reported as ErrUnavailable
// by the layer that lost it.

// ErrOutcomeUnknown is wrapped by the error of a commit whose answer was
// lost and whose outcome could not be learnt: it may or may not have taken
// effect. It is not a class: such an error is of class ErrUnavailable.
var ErrOutcomeUnknown = errors.New("commit outcome unknown")

// Of returns err's class, or nil if it has none. An error that wraps
// several classes (which no layer should build) has the first of them in
// the order of classCodes, as on the wire.
func Of(err error) error {
	for _, cc := range classCodes {
		if errors.Is(err, cc.class) {
			return cc.class
		}
	}
	return nil
}

// Classes returns every class err wraps, in the order of classCodes.
func Classes(err error) []error {
	var out []error
	for _, cc := range classCodes {
		if errors.Is(err, cc.class) {
			out = append(out, cc.class)
		}
	}
	return out
}

// definite are the classes of errors decided before anything applies: a
// commit that fails with one of them changed nothing.
var definite = []error{ErrConflict, ErrInvalidArgument, ErrNotFound, ErrExists, ErrOutOfRange, ErrTooLarge, ErrNoSpace}

// RefusedTrailer is the gRPC trailer key by which a server marks a failed
// commit as refused for certain (IsRefused), so that the client does not
// take it for a lost answer whatever its class.
const RefusedTrailer = "tyr-refused"

// refusedError marks an error after which the request certainly changed
// nothing, whatever its class (see Refused).
type refusedError struct{ err error }

func (e refusedError) Error() string { return e.err.Error() }
func (e refusedError) Unwrap() error { return e.err }
func (e refusedError) Refused() bool { return true }

// refuser is an error that says itself whether it is a definite refusal
// (refusedError, and the Go client's Error).
type refuser interface{ Refused() bool }

// Refused marks err as a definite refusal: the request changed nothing
// and never will. A commit refused as ErrUnavailable (a member catching
// up, no live replica) is one; a commit whose answer was lost is not. The
// text and class of err are kept. Refused(nil) is nil.
func Refused(err error) error {
	if err == nil || IsRefused(err) {
		return err
	}
	return refusedError{err}
}

// IsRefused reports whether err says that the request changed nothing:
// it was marked by Refused, or its class is one decided before anything
// applies (conflict, invalid argument, not found, already exists, out of
// range, too large). An error that wraps ErrOutcomeUnknown never is.
func IsRefused(err error) bool {
	if err == nil || errors.Is(err, ErrOutcomeUnknown) {
		return false
	}
	var r refuser
	if errors.As(err, &r) {
		return r.Refused()
	}
	for _, class := range definite {
		if errors.Is(err, class) {
			return true
		}
	}
	return false
}

// Retryable reports whether sending the same request again can succeed:
// after a conflict (another transaction won a race; run the transaction
// again) or while something is unavailable (later). It is false for the
// other classes, which the same request meets again, for errors of no
// class, and for a commit whose outcome is unknown (ErrOutcomeUnknown):
// sending it again may apply it twice.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, ErrOutcomeUnknown) {
		return false
	}
	class := Of(err)
	return class == ErrConflict || class == ErrUnavailable
}

// Hint says in words whether retrying can help (see Retryable), or ""
// for an error of no class.
func Hint(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrOutcomeUnknown):
		return "the commit may have taken effect: check before retrying"
	case Retryable(err):
		return "retrying can help"
	case Of(err) == ErrNoSpace:
		return "retrying can help once space is freed (delete data, or add nodes)"
	case Of(err) != nil:
		return "retrying cannot help"
	case errors.Is(err, context.DeadlineExceeded):
		return "the deadline passed: retrying with a longer one can help"
	}
	return ""
}

// Text renders err for the user: Message of its class and its text.
func Text(err error) string {
	return Message(Of(err), err.Error())
}

// Message renders msg, the text of an error of class, with the class word
// first and no other class word as a part of its own: the parts of msg
// (separated by ": ", outside quoted strings) that are a class word are
// dropped, and class's word is put first. So
// "unavailable: conflict: blob \"a\": locked" of class ErrConflict becomes
// "conflict: blob \"a\": locked", and "blob \"a\": not found" becomes
// "not found: blob \"a\"". A nil class only drops the class words.
func Message(class error, msg string) string {
	parts := splitParts(msg)
	kept := parts[:0]
	for _, p := range parts {
		if !isClassWord(p) {
			kept = append(kept, p)
		}
	}
	if class != nil {
		kept = append([]string{class.Error()}, kept...)
	}
	return strings.Join(kept, ": ")
}

func isClassWord(s string) bool {
	for _, cc := range classCodes {
		if s == cc.class.Error() {
			return true
		}
	}
	return false
}

// splitParts splits msg at every ": " that is not inside a double-quoted
// string (as %q prints one: a backslash escapes the next byte).
func splitParts(msg string) []string {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(msg); i++ {
		switch c := msg[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ':' && i+1 < len(msg) && msg[i+1] == ' ':
			parts = append(parts, msg[start:i])
			start = i + 2
			i++
		}
	}
	return append(parts, msg[start:])
}

// ClassWordPrefixes counts the class words in msg followed by ": "
// (outside quoted strings), the form in which a class names an error: a
// message built by Message for a class has exactly one, at its start.
func ClassWordPrefixes(msg string) int {
	parts := splitParts(msg)
	n := 0
	for _, p := range parts[:len(parts)-1] {
		if isClassWord(p) {
			n++
		}
	}
	return n
}
