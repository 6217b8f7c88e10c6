package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/errs"
)

// Limits of `tyr txn`.
const (
	// txnLineBytesMax bounds one input line: the base64 of a commit's
	// payload (at most 16 MiB) with room for the JSON around it. A longer
	// line is reported as malformed and skipped.
	txnLineBytesMax = 32 << 20
	// txnReadBytesMax bounds the bytes the reads of one transaction
	// return, and so the size of one output line. A transaction that reads
	// more is aborted.
	txnReadBytesMax = 16 << 20
	// txnRetriesMax bounds --retries.
	txnRetriesMax = 100
	// txnBackoffMin and txnBackoffMax bound the jittered, doubling pause
	// before a transaction is run again after a conflict.
	txnBackoffMin = time.Millisecond
	txnBackoffMax = 200 * time.Millisecond
)

// The status of a transaction in the output.
const (
	txnCommitted = "committed"
	// txnAborted: the transaction certainly changed nothing.
	txnAborted = "aborted"
	// txnUnknown: the commit was sent, its answer was lost, and asking
	// the cluster for it (client.Commit resolves a lost outcome for up to
	// client.ResolveTimeout) did not tell; it may or may not have taken
	// effect.
	txnUnknown = "unknown"
)

// txnInput is one input line: a transaction. The format is append-only:
// fields may be added, never renamed or given another meaning.
type txnInput struct {
	Ops []txnOpInput `json:"ops"`
}

// txnOpInput is one op as given. Pointers tell an absent field from a zero
// one, so that a field an op does not take is refused, not ignored.
type txnOpInput struct {
	Op       string          `json:"op"`
	Key      string          `json:"key"`
	Offset   *int64          `json:"offset"`
	Length   *int64          `json:"length"`
	Size     *int64          `json:"size"`
	Width    *int64          `json:"width"`
	Fn       *string         `json:"fn"`
	Value    json.RawMessage `json:"value"`
	Data     *[]byte         `json:"data"` // base64
	Expected *[]byte         `json:"expected"`
}

// txnOpFields lists the ops, each with its required and its optional
// fields besides "op" and "key".
var txnOpFields = []struct {
	op                 string
	required, optional []string
}{
	{op: "read", optional: []string{"offset", "length"}},
	{op: "write", required: []string{"offset", "data"}},
	{op: "append", required: []string{"data"}},
	{op: "truncate", required: []string{"size"}},
	{op: "create"},
	{op: "delete"},
	{op: "atomic", required: []string{"fn", "value"}, optional: []string{"offset", "width"}},
	{op: "cas", required: []string{"expected", "data"}, optional: []string{"offset"}},
}

// fields returns the names of the fields given, besides "op" and "key".
func (in *txnOpInput) fields() []string {
	var names []string
	for _, f := range []struct {
		name  string
		given bool
	}{
		{"offset", in.Offset != nil}, {"length", in.Length != nil}, {"size", in.Size != nil},
		{"width", in.Width != nil}, {"fn", in.Fn != nil}, {"value", in.Value != nil},
		{"data", in.Data != nil}, {"expected", in.Expected != nil},
	} {
		if f.given {
			names = append(names, f.name)
		}
	}
	return names
}

// checkFields checks that the op is known and given exactly the fields it
// takes.
func (in *txnOpInput) checkFields() error {
	for _, spec := range txnOpFields {
		if spec.op != in.Op {
			continue
		}
		for _, name := range in.fields() {
			if !containsString(spec.required, name) && !containsString(spec.optional, name) {
				return fmt.Errorf("%s takes no %q", in.Op, name)
			}
		}
		for _, name := range spec.required {
			if !containsString(in.fields(), name) {
				return fmt.Errorf("%s needs %q", in.Op, name)
			}
		}
		return nil
	}
	names := make([]string, len(txnOpFields))
	for i, spec := range txnOpFields {
		names[i] = spec.op
	}
	return fmt.Errorf("unknown op %q: want one of %s", in.Op, strings.Join(names, ", "))
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// txnStep is one checked op of a transaction.
type txnStep struct {
	op       string
	ks, key  string
	offset   uint64
	length   int64 // read: the bytes to read; -1: to the end
	size     uint64
	width    int
	fn       atomicFunc
	operand  uint64
	data     []byte
	expected []byte
}

// step checks the op and returns it as a step.
func (in *txnOpInput) step() (txnStep, error) {
	if err := in.checkFields(); err != nil {
		return txnStep{}, err
	}
	ks, key, err := splitPath(in.Key)
	if err != nil {
		return txnStep{}, err
	}
	s := txnStep{op: in.Op, ks: ks, key: key, length: -1, width: 8}
	if in.Offset != nil {
		if *in.Offset < 0 {
			return txnStep{}, fmt.Errorf("invalid offset %d: must not be negative", *in.Offset)
		}
		s.offset = uint64(*in.Offset)
	}
	if in.Length != nil {
		if *in.Length < -1 {
			return txnStep{}, fmt.Errorf("invalid length %d: want -1 (to the end) or more", *in.Length)
		}
		s.length = *in.Length
	}
	if in.Size != nil {
		if *in.Size < 0 {
			return txnStep{}, fmt.Errorf("invalid size %d: must not be negative", *in.Size)
		}
		s.size = uint64(*in.Size)
	}
	if in.Width != nil {
		if err := checkWidth("width", *in.Width); err != nil {
			return txnStep{}, err
		}
		s.width = int(*in.Width)
	}
	if in.Data != nil {
		s.data = *in.Data
	}
	if in.Expected != nil {
		s.expected = *in.Expected
		if err := checkCAS(s.expected, s.data); err != nil {
			return txnStep{}, err
		}
	}
	if in.Fn != nil {
		if s.fn, err = parseAtomicFunc(*in.Fn); err != nil {
			return txnStep{}, err
		}
		if s.operand, err = parseValueJSON(s.fn, s.width, in.Value); err != nil {
			return txnStep{}, err
		}
	}
	return s, nil
}

// parseValueJSON parses the "value" of an atomic op: a JSON number, or a
// string holding a decimal or 0x hex, read as parseOperand reads VALUE.
func parseValueJSON(f atomicFunc, width int, raw json.RawMessage) (uint64, error) {
	text := string(raw)
	if strings.HasPrefix(text, `"`) {
		if err := json.Unmarshal(raw, &text); err != nil {
			return 0, err
		}
	}
	return parseOperand(f, width, text)
}

// parseTxnLine decodes and checks one input line. Unknown fields and
// anything after the object are refused. All ops must name blobs of one
// keyspace, which it returns.
func parseTxnLine(line []byte) (string, []txnStep, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var in txnInput
	if err := dec.Decode(&in); err != nil {
		return "", nil, fmt.Errorf("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", nil, errors.New("unexpected data after the transaction object")
	}
	if len(in.Ops) == 0 {
		return "", nil, errors.New(`no ops: want {"ops":[...]} with at least one op`)
	}
	steps := make([]txnStep, len(in.Ops))
	for i := range in.Ops {
		s, err := in.Ops[i].step()
		if err != nil {
			return "", nil, fmt.Errorf("ops[%d]: %w", i, err)
		}
		if i > 0 && s.ks != steps[0].ks {
			return "", nil, fmt.Errorf("ops[%d]: keyspace %q, but ops[0] is on %q: a transaction runs on one keyspace",
				i, s.ks, steps[0].ks)
		}
		steps[i] = s
	}
	return steps[0].ks, steps, nil
}

// txnOutcome is one output line. The format is append-only, like
// txnInput's.
type txnOutcome struct {
	Status  string      `json:"status"`
	Results []txnResult `json:"results,omitempty"`
	Error   string      `json:"error,omitempty"`
	// Class is the error's class ("conflict", "unavailable", "invalid
	// argument", ...), empty for an error of no class.
	Class string `json:"class,omitempty"`
	// Retryable says, for a transaction that did not commit, whether
	// running it again can succeed (errs.Retryable).
	Retryable *bool `json:"retryable,omitempty"`
}

// txnFailed is the outcome of a transaction that failed with err, text
// being its message.
func txnFailed(status string, err error, text string) txnOutcome {
	o := txnOutcome{Status: status, Error: text}
	if class := errs.Of(err); class != nil {
		o.Class = class.Error()
	}
	retry := errs.Retryable(err) && status != txnUnknown // it may have taken effect
	o.Retryable = &retry
	return o
}

// txnResult is the result of one op of a committed transaction: the bytes
// of a read (Missing when the blob did not exist), the offset of an append,
// the new value of an atomic, and nothing for the other ops.
type txnResult struct {
	Data    *[]byte     `json:"data,omitempty"`
	Missing bool        `json:"missing,omitempty"`
	Offset  *uint64     `json:"offset,omitempty"`
	Value   json.Number `json:"value,omitempty"`
}

// txnRead reads s.length bytes (-1: to the end) of s.key from s.offset as
// tx sees them. The blob's size comes first, from the read that fixes the
// version every later read of the blob in tx sees, so that the bytes are
// then read in parts of at most PayloadBytesMax without holding more than
// the result. A missing blob is a result, not an error. budget holds the
// bytes the transaction's reads may still return.
func txnRead(ctx context.Context, tx *client.Tx, s txnStep, budget *int64) (data []byte, missing bool, err error) {
	size, err := tx.Size(ctx, s.key)
	if errors.Is(err, client.ErrNotFound) {
		return []byte{}, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	end := size
	if s.length >= 0 {
		end = min(end, s.offset+uint64(s.length))
	}
	if s.offset >= end {
		return []byte{}, false, nil
	}
	if end-s.offset > uint64(*budget) {
		return nil, false, fmt.Errorf("%w: the reads of the transaction return more than %d bytes: read smaller ranges",
			client.ErrTooLarge, txnReadBytesMax)
	}
	out := make([]byte, 0, end-s.offset)
	for off := s.offset; off < end; {
		part, err := tx.Read(ctx, s.key, off, min(end-off, client.PayloadBytesMax))
		if err != nil {
			return nil, false, err
		}
		if len(part) == 0 {
			return nil, false, fmt.Errorf("blob %q ends at %d in the transaction, before its size %d", s.key, off, size)
		}
		out = append(out, part...)
		off += uint64(len(part))
	}
	*budget -= int64(len(out))
	return out, false, nil
}

// txnAttempt runs the steps once in a new transaction on ks and commits
// it: reads go out at once, the other ops are buffered for the commit.
// committing reports whether err, if any, is the commit's.
func txnAttempt(ctx context.Context, c *client.Client, ks string, steps []txnStep) (results []txnResult, committing bool, err error) {
	tx := c.Begin(ks)
	results = make([]txnResult, len(steps))
	budget := int64(txnReadBytesMax)
	for i, s := range steps {
		switch s.op {
		case "read":
			data, missing, err := txnRead(ctx, tx, s, &budget)
			if err != nil {
				tx.Rollback()
				return nil, false, err
			}
			results[i] = txnResult{Data: &data, Missing: missing}
		case "write":
			tx.Write(s.key, s.offset, s.data)
		case "append":
			tx.Append(s.key, s.data)
		case "truncate":
			tx.Truncate(s.key, s.size)
		case "create":
			tx.Create(s.key)
		case "delete":
			tx.Delete(s.key)
		case "atomic":
			tx.Atomic(s.key, s.offset, s.width, s.fn.fn, s.operand)
		case "cas":
			tx.CAS(s.key, s.offset, s.expected, s.data)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, true, err
	}
	// Results has one entry per buffered op: every step but the reads.
	opResults := tx.Results()
	for i, s := range steps {
		if s.op == "read" {
			continue
		}
		r := opResults[0]
		opResults = opResults[1:]
		switch s.op {
		case "append":
			results[i].Offset = &r.Offset
		case "atomic":
			results[i].Value = json.Number(formatValue(s.fn, s.width, r.Value))
		}
	}
	return results, true, nil
}

// commitRefused reports whether a failed commit certainly changed nothing
// (client.Refused): the server answered with a class of error it decides
// before anything applies (a conflict, a failed compare-and-swap, bad or
// oversized input, a missing or existing blob), or marked it refused (a
// commit refused as unavailable before anything applied). For any other
// error, such as a lost connection, a deadline or ErrOutcomeUnknown, the
// commit may have taken effect.
func commitRefused(err error) bool { return client.Refused(err) }

// txnStatus is the status of a transaction that failed with err: aborted
// when nothing was committed for certain, else unknown.
func txnStatus(err error, committing bool) string {
	if !committing || commitRefused(err) {
		return txnAborted
	}
	return txnUnknown
}

// runTxn runs one transaction, running it again after a conflict (which
// changed nothing) up to retries times.
func runTxn(ctx context.Context, c *client.Client, ks string, steps []txnStep, retries int) txnOutcome {
	backoff := txnBackoffMin
	for attempt := 0; ; attempt++ {
		results, committing, err := txnAttempt(ctx, c, ks, steps)
		if err == nil {
			return txnOutcome{Status: txnCommitted, Results: results}
		}
		if !errors.Is(err, client.ErrConflict) || attempt >= retries {
			text := errorText(err)
			if attempt > 0 {
				text = errs.Message(errs.Of(err), fmt.Sprintf("gave up after %d attempts: %s", attempt+1, text))
			}
			return txnFailed(txnStatus(err, committing), err, text)
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		backoff = min(2*backoff, txnBackoffMax)
		select {
		case <-ctx.Done():
			t.Stop()
			// The last attempt failed with a conflict: nothing applied.
			return txnFailed(txnAborted, ctx.Err(), errorText(ctx.Err()))
		case <-t.C:
		}
	}
}

// errLineTooLong is readLine's error for a line above its limit. The line
// is consumed, so reading can go on with the next one.
var errLineTooLong = errors.New("line too long")

// readLine returns the next line of r without its newline, holding at most
// bytesMax bytes of it in memory. It returns io.EOF at the end of input;
// the last line may lack a newline.
func readLine(r *bufio.Reader, bytesMax int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > bytesMax+1 {
			tooLong, line = true, nil
		}
		if !tooLong {
			line = append(line, chunk...)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(chunk) == 0 && len(line) == 0 && !tooLong:
			return nil, io.EOF
		case err != nil && !errors.Is(err, io.EOF):
			return nil, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		if tooLong || len(line) > bytesMax {
			return nil, errLineTooLong
		}
		return line, nil
	}
}

// runTxns runs the transactions of in, one per line, and writes one
// outcome line each to out. Blank lines are skipped. Only a failure to read
// in or write out ends it early.
func runTxns(ctx context.Context, c *client.Client, in io.Reader, out io.Writer, retries int) error {
	r := bufio.NewReaderSize(in, 64<<10)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for n := 1; ; n++ {
		line, err := readLine(r, txnLineBytesMax)
		if errors.Is(err, io.EOF) {
			return nil
		}
		var o txnOutcome
		switch {
		case errors.Is(err, errLineTooLong):
			err := fmt.Errorf("%w: longer than %d bytes", errs.ErrTooLarge, txnLineBytesMax)
			o = txnFailed(txnAborted, err, errs.Text(err))
		case err != nil:
			return err
		case len(bytes.TrimSpace(line)) == 0:
			continue
		default:
			ks, steps, err := parseTxnLine(line)
			if err != nil {
				err = fmt.Errorf("%w: %w", errs.ErrInvalidArgument, err)
				o = txnFailed(txnAborted, err, errs.Text(err))
			} else {
				o = runTxn(ctx, c, ks, steps, retries)
			}
		}
		if o.Status != txnCommitted {
			o.Error = fmt.Sprintf("line %d: %s", n, o.Error)
		}
		if err := enc.Encode(o); err != nil {
			return err
		}
	}
}

func newTxn(e *env) *cobra.Command {
	var retries int
	cmd := &cobra.Command{
		Use:   "txn [FILE|-]",
		Short: "Run transactions read as JSON lines from FILE or stdin; print one outcome line each",
		Long: `Run transactions read as JSON lines from FILE or stdin, one transaction a line,
each on the blobs of one keyspace, and print one JSON line per transaction.

  {"ops":[{"op":"read","key":"ks/a","offset":0,"length":-1},
          {"op":"write","key":"ks/a","offset":8,"data":"aGVsbG8="}]}

Ops, run in order; reads see the transaction's earlier ops, "data" and
"expected" are base64:
  read      offset (default 0), length (default -1: to the end)
  write     offset, data; creates a missing blob
  append    data; creates a missing blob; result: the offset it landed at
  truncate  size
  create    fails the transaction if the blob exists
  delete
  atomic    fn, value, offset (default 0), width (default 8); as tyr atomic,
            with value a number, or a string of decimal or 0x hex;
            result: the new value, signed for min-signed and max-signed
  cas       expected, data, offset (default 0); fails the transaction
            (a conflict) if the bytes differ

Output, results in op order:
  {"status":"committed","results":[{"data":"..."},{}]}
  {"status":"aborted","error":"line N: CLASS: ...",
   "class":"CLASS","retryable":B}               certainly changed nothing
  {"status":"unknown","error":"line N: CLASS: ...",
   "class":"CLASS","retryable":false}           the commit was sent, its
                                                answer was lost and the
                                                cluster could not tell
                                                its outcome within 30s
CLASS is the error's class (conflict, unavailable, invalid argument, not
found, already exists, out of range, too large, corruption), named once;
"class" is left out for an error of no class (a lost connection). B says
whether running the transaction again can succeed: true after a conflict
or while something is unavailable.
A read of a missing blob gives {"data":"","missing":true}. A line that is
not a valid transaction, or names blobs of two keyspaces, is aborted before
anything runs. Blank lines are skipped. A line holds at most 32 MiB, and the
reads of a transaction return at most 16 MiB.

A transaction runs once; with --retries N it runs again, up to N times,
after a conflict. Exits 0 once every line is processed, whatever the
outcomes; 1 if the input cannot be read.`,
		Args: rangeArgs(0, 1, "[FILE|-]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if retries < 0 || retries > txnRetriesMax {
				return fmt.Errorf("invalid --retries %d: want 0 to %d", retries, txnRetriesMax)
			}
			in, closeIn, err := openInput(e, args)
			if err != nil {
				return err
			}
			defer closeIn()
			return e.withClient(func(c *client.Client) error {
				return runTxns(cmd.Context(), c, in, e.stdout, retries)
			})
		},
	}
	cmd.Flags().IntVar(&retries, "retries", 0, "run a transaction again up to N times after a conflict")
	return cmd
}
