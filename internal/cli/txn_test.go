package cli

// These tests cover the parts of `tyr txn` that need no server: the input
// line format, the line reader's limit, and which failures are reported as
// "aborted" and which as "unknown". Run: go test -run Txn ./internal/cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/errs"
)

func TestTxnParseLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string // the steps as "op key offset length width operand data expected", or the error part
		err  bool
	}{
		{line: `{"ops":[{"op":"read","key":"ks/k"}]}`, want: "read k 0 -1 8 0 [] []"},
		{line: `{"ops":[{"op":"read","key":"ks/a/b","offset":3,"length":0}]}`, want: "read a/b 3 0 8 0 [] []"},
		{line: `{"ops":[{"op":"write","key":"ks/k","offset":8,"data":"aGk="},{"op":"append","key":"ks/k","data":""}]}`,
			want: "write k 8 -1 8 0 [104 105] []; append k 0 -1 8 0 [] []"},
		{line: `{"ops":[{"op":"atomic","key":"ks/k","fn":"add","value":-1,"width":2}]}`, want: "atomic k 0 -1 2 65535 [] []"},
		{line: `{"ops":[{"op":"atomic","key":"ks/k","fn":"set","value":"0xff","offset":4}]}`, want: "atomic k 4 -1 8 255 [] []"},
		{line: `{"ops":[{"op":"atomic","key":"ks/k","fn":"or","value":"12"}]}`, want: "atomic k 0 -1 8 12 [] []"},
		{line: `{"ops":[{"op":"cas","key":"ks/k","expected":"YQ==","data":"Yg=="}]}`, want: "cas k 0 -1 8 0 [98] [97]"},
		{line: `{"ops":[{"op":"truncate","key":"ks/k","size":0},{"op":"delete","key":"ks/k"},{"op":"create","key":"ks/k"}]}`,
			want: "truncate k 0 -1 8 0 [] []; delete k 0 -1 8 0 [] []; create k 0 -1 8 0 [] []"},
		{line: `  {"ops":[{"op":"create","key":"ks/k"}]}  `, want: "create k 0 -1 8 0 [] []"},

		{line: `{"ops":[]}`, want: "no ops", err: true},
		{line: `null`, want: "no ops", err: true},
		{line: `not json`, want: "invalid JSON: invalid character", err: true},
		{line: `{"ops":[{"op":"read","key":"ks/k"}]} {}`, want: "unexpected data after", err: true},
		{line: `{"ops":[{"op":"read","key":"ks/k"}]} x`, want: "unexpected data after", err: true},
		{line: `{"ops":[{"op":"read","key":"ks/k"}],"extra":1}`, want: `unknown field "extra"`, err: true},
		{line: `{"ops":[{"op":"read","key":"ks/k","frob":1}]}`, want: `unknown field "frob"`, err: true},
		{line: `{"ops":[{"op":"frob","key":"ks/k"}]}`, want: `ops[0]: unknown op "frob"`, err: true},
		{line: `{"ops":[{"op":"read","key":"ks"}]}`, want: "want KEYSPACE/KEY", err: true},
		{line: `{"ops":[{"op":"read","key":"ks/k","size":3}]}`, want: `read takes no "size"`, err: true},
		{line: `{"ops":[{"op":"write","key":"ks/k","data":"aGk="}]}`, want: `write needs "offset"`, err: true},
		{line: `{"ops":[{"op":"append","key":"ks/k"}]}`, want: `append needs "data"`, err: true},
		{line: `{"ops":[{"op":"append","key":"ks/k","data":"!!"}]}`, want: "illegal base64", err: true},
		{line: `{"ops":[{"op":"read","key":"ks/k","offset":-1}]}`, want: "invalid offset -1", err: true},
		{line: `{"ops":[{"op":"read","key":"ks/k","length":-2}]}`, want: "invalid length -2", err: true},
		{line: `{"ops":[{"op":"truncate","key":"ks/k","size":-2}]}`, want: "invalid size -2", err: true},
		{line: `{"ops":[{"op":"read","key":"ks/k","offset":"1"}]}`, want: "cannot unmarshal string", err: true},
		{line: `{"ops":[{"op":"atomic","key":"ks/k","fn":"add","value":1,"width":3}]}`, want: "invalid width 3", err: true},
		{line: `{"ops":[{"op":"atomic","key":"ks/k","fn":"add","value":256,"width":1}]}`, want: "at most 255", err: true},
		{line: `{"ops":[{"op":"atomic","key":"ks/k","fn":"and","value":-1}]}`, want: "takes no negative value", err: true},
		{line: `{"ops":[{"op":"atomic","key":"ks/k","fn":"add","value":1.5}]}`, want: `invalid value "1.5"`, err: true},
		{line: `{"ops":[{"op":"atomic","key":"ks/k","fn":"add","value":null}]}`, want: `invalid value "null"`, err: true},
		{line: `{"ops":[{"op":"atomic","key":"ks/k","fn":"min","value":1}]}`, want: `unknown atomic function "min"`, err: true},
		{line: `{"ops":[{"op":"atomic","key":"ks/k","value":1}]}`, want: `atomic needs "fn"`, err: true},
		{line: `{"ops":[{"op":"cas","key":"ks/k","expected":"YQ==","data":"YmI="}]}`, want: "want equal lengths", err: true},
		{line: `{"ops":[{"op":"read","key":"ks/k"},{"op":"read","key":"ks/k"},{"op":"write","key":"other/k","offset":0,"data":""}]}`,
			want: `ops[2]: keyspace "other", but ops[0] is on "ks": a transaction runs on one keyspace`, err: true},
	} {
		ks, steps, err := parseTxnLine([]byte(tc.line))
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want an error with %q", tc.line, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.line, err)
			continue
		}
		if ks != "ks" {
			t.Errorf("%s: keyspace %q", tc.line, ks)
		}
		var got []string
		for _, s := range steps {
			got = append(got, fmt.Sprintf("%s %s %d %d %d %d %v %v", s.op, s.key, s.offset, s.length, s.width, s.operand,
				[]byte(s.data), []byte(s.expected)))
		}
		if g := strings.Join(got, "; "); g != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.line, g, tc.want)
		}
	}
}

// TestTxnStatus checks the promise of the statuses: "aborted" only when
// nothing can have applied, "unknown" whenever a sent commit may have.
func TestTxnStatus(t *testing.T) {
	class := func(c error) error { return &client.Error{Class: c, Message: "m"} }
	for _, tc := range []struct {
		name       string
		err        error
		committing bool
		want       string
	}{
		{"read conflict", class(client.ErrConflict), false, txnAborted},
		{"read unavailable", class(client.ErrUnavailable), false, txnAborted},
		{"read deadline", context.DeadlineExceeded, false, txnAborted},
		{"commit conflict", class(client.ErrConflict), true, txnAborted},
		{"commit wrapped conflict", fmt.Errorf("x: %w", class(client.ErrConflict)), true, txnAborted},
		{"commit invalid", class(client.ErrInvalidArgument), true, txnAborted},
		{"commit not found", class(client.ErrNotFound), true, txnAborted},
		{"commit exists", class(client.ErrExists), true, txnAborted},
		{"commit out of range", class(client.ErrOutOfRange), true, txnAborted},
		{"commit too large", class(client.ErrTooLarge), true, txnAborted},
		{"commit unavailable", class(client.ErrUnavailable), true, txnUnknown},
		{"commit unavailable, refused", errs.Refused(class(client.ErrUnavailable)), true, txnAborted},
		{"commit outcome unknown", fmt.Errorf("%w: %w", class(client.ErrUnavailable), client.ErrOutcomeUnknown), true, txnUnknown},
		{"commit corruption", class(client.ErrCorruption), true, txnUnknown},
		{"commit unclassified", class(nil), true, txnUnknown},
		{"commit deadline", fmt.Errorf("tyr: commit outcome unknown: %w", context.DeadlineExceeded), true, txnUnknown},
		{"commit canceled", context.Canceled, true, txnUnknown},
		{"commit transport", errors.New("connection reset"), true, txnUnknown},
	} {
		if got := txnStatus(tc.err, tc.committing); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestTxnReadLine checks that lines up to the limit are returned whole,
// longer ones are skipped and reported, and reading goes on after them,
// whatever the reader's buffer size.
func TestTxnReadLine(t *testing.T) {
	const bytesMax = 40
	input := strings.Join([]string{
		"short",
		strings.Repeat("a", bytesMax),
		strings.Repeat("b", bytesMax+1),
		"",
		strings.Repeat("c", 100),
		"last without newline",
	}, "\n")
	want := []string{"short", strings.Repeat("a", bytesMax), "too long", "", "too long", "last without newline", "EOF"}
	for _, size := range []int{16, 64, 4096} {
		r := bufio.NewReaderSize(strings.NewReader(input), size)
		var got []string
		for len(got) < 10 {
			line, err := readLine(r, bytesMax)
			switch {
			case errors.Is(err, io.EOF):
				got = append(got, "EOF")
			case errors.Is(err, errLineTooLong):
				got = append(got, "too long")
			case err != nil:
				t.Fatal(err)
			default:
				got = append(got, string(line))
			}
			if errors.Is(err, io.EOF) {
				break
			}
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("buffer %d: lines %q, want %q", size, got, want)
		}
	}
	// Without a newline, a last line at the limit is a line, and one byte
	// more is too long.
	r := bufio.NewReaderSize(strings.NewReader(strings.Repeat("d", bytesMax)), 16)
	if line, err := readLine(r, bytesMax); err != nil || len(line) != bytesMax {
		t.Errorf("a last line of %d bytes: %d bytes, %v", bytesMax, len(line), err)
	}
	r = bufio.NewReaderSize(strings.NewReader(strings.Repeat("d", bytesMax+1)), 16)
	if _, err := readLine(r, bytesMax); !errors.Is(err, errLineTooLong) {
		t.Errorf("a last line of %d bytes: %v, want too long", bytesMax+1, err)
	}
}

// A failed transaction's line names its class once, first after the line
// number, and says whether running it again can help; an unknown outcome
// never says so, since the commit may have taken effect.
func TestTxnOutcomeClassAndRetry(t *testing.T) {
	srv := func(c error, msg string) error { return &client.Error{Class: c, Message: msg} }
	for _, tc := range []struct {
		name   string
		status string
		err    error
		want   string
	}{
		{"conflict", txnAborted, srv(client.ErrConflict, `conflict: blob "a1": no version manager of the blob came first in the chain`),
			`{"status":"aborted","error":"conflict: blob \"a1\": no version manager of the blob came first in the chain","class":"conflict","retryable":true}`},
		// The text a user once saw, stacked: one class is left.
		{"stacked", txnAborted, srv(client.ErrConflict, `unavailable: conflict: blob "a1": locked`),
			`{"status":"aborted","error":"conflict: blob \"a1\": locked","class":"conflict","retryable":true}`},
		{"not found", txnAborted, srv(client.ErrNotFound, `blob "k": not found`),
			`{"status":"aborted","error":"not found: blob \"k\"","class":"not found","retryable":false}`},
		{"invalid", txnAborted, srv(client.ErrInvalidArgument, "atomic width 3"),
			`{"status":"aborted","error":"invalid argument: atomic width 3","class":"invalid argument","retryable":false}`},
		{"unavailable refused", txnAborted, errs.Refused(srv(client.ErrUnavailable, "unavailable: node n1 is catching up")),
			`{"status":"aborted","error":"unavailable: node n1 is catching up","class":"unavailable","retryable":true}`},
		{"unknown", txnUnknown, fmt.Errorf("%w: %w", srv(client.ErrUnavailable, "commit outcome unknown: lost"), client.ErrOutcomeUnknown),
			`{"status":"unknown","error":"unavailable: commit outcome unknown: lost","class":"unavailable","retryable":false}`},
		{"no class", txnUnknown, errors.New("connection reset"),
			`{"status":"unknown","error":"connection reset","retryable":false}`},
	} {
		o := txnFailed(tc.status, tc.err, errorText(tc.err))
		var sb strings.Builder
		enc := json.NewEncoder(&sb)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(o); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(sb.String()); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
		if o.Class != "" && errs.ClassWordPrefixes(o.Error) != 1 {
			t.Errorf("%s: %q names %d classes", tc.name, o.Error, errs.ClassWordPrefixes(o.Error))
		}
	}
}

// The line a failing command prints: one class, first, and the hint.
func TestErrorLine(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&client.Error{Class: client.ErrConflict, Message: `unavailable: conflict: blob "a1": locked`},
			`tyr: conflict: blob "a1": locked; retrying can help`},
		{&client.Error{Class: client.ErrNotFound, Message: `keyspace "ks": not found`},
			`tyr: not found: keyspace "ks"; retrying cannot help`},
		{fmt.Errorf("%w: %w", client.ErrUnavailable, client.ErrOutcomeUnknown),
			"tyr: unavailable: commit outcome unknown; the commit may have taken effect: check before retrying"},
		{errors.New("invalid --retries 200: want 0 to 100"), "tyr: invalid --retries 200: want 0 to 100"},
		{errors.Join(errors.New("a"), errors.New("b")), "tyr: a; b"},
	} {
		if got := errorLine(tc.err); got != tc.want {
			t.Errorf("errorLine(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
