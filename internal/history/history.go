// Package history records the operations clients run against a store as a
// history of events, in the JSON-lines format Jepsen's Elle reads, and loads
// such histories back for the checkers in internal/checker.
//
// Each line is one event:
//
//	{"type":"invoke","f":"write","process":3,"time":1200,"index":7,"value":["k1","3-41"]}
//	{"type":"ok","f":"write","process":3,"time":5400,"index":9,"value":["k1","3-41"]}
//
// An operation is an "invoke" event followed by one completion of the same
// process: "ok" (it took effect), "fail" (it certainly did not) or "info" (its
// outcome is unknown: a timeout, a crash). A process runs one operation at a
// time; after an "info" the caller must continue under a new process number,
// because the old operation may still take effect at any later time.
//
// The format is append-only: fields may be added, never renamed or retyped.
package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Type is an event's type.
type Type string

// Event types, as Elle names them.
const (
	Invoke Type = "invoke"
	OK     Type = "ok"
	Fail   Type = "fail"
	Info   Type = "info"
)

// Operation functions. Register operations carry [key, value] (value null
// for a read that found nothing, or at its invocation); txn operations carry
// a list of micro-ops (see MicroOp).
const (
	FRead   = "read"
	FWrite  = "write"
	FAppend = "append"
	FTxn    = "txn"
)

// Event is one line of a history.
type Event struct {
	Type    Type            `json:"type"`
	F       string          `json:"f"`
	Process int             `json:"process"`
	Time    int64           `json:"time"`  // nanoseconds since the recorder started
	Index   int             `json:"index"` // position in the history, from 0
	Value   json.RawMessage `json:"value"`
	Error   string          `json:"error,omitempty"` // why an op failed or is unknown
}

// Recorder appends events to a writer as JSON lines. It keeps no events in
// memory, so a long run's history is bounded by the disk, not the heap. It is
// safe for concurrent use; index and time increase together because both are
// taken under one lock.
type Recorder struct {
	mu     sync.Mutex
	w      *bufio.Writer
	closer io.Closer
	start  time.Time
	next   int
	err    error // the first write error; later events are dropped
}

// NewRecorder records to w. The caller must Close the recorder to flush it;
// closing does not close w.
func NewRecorder(w io.Writer) *Recorder {
	return &Recorder{w: bufio.NewWriterSize(w, 1<<20), start: time.Now()}
}

// Create records to a new file at path, which Close closes.
func Create(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	r := NewRecorder(f)
	r.closer = f
	return r, nil
}

// Op identifies an invoked operation so its completion can be recorded.
type Op struct {
	Process int
	F       string
	Index   int // index of the invoke event
}

// Invoke records the start of an operation by process and returns it.
// value is marshalled to JSON; a value that does not marshal is a bug in
// the caller and panics.
func (r *Recorder) Invoke(process int, f string, value any) Op {
	idx := r.record(Invoke, f, process, value, nil)
	return Op{Process: process, F: f, Index: idx}
}

// Ok records that op took effect; value is its result (the read data).
func (r *Recorder) Ok(op Op, value any) { r.record(OK, op.F, op.Process, value, nil) }

// Fail records that op certainly did not take effect.
func (r *Recorder) Fail(op Op, value any, err error) { r.record(Fail, op.F, op.Process, value, err) }

// Info records that op's outcome is unknown: it may take effect at any
// later time. The process must not be used again.
func (r *Recorder) Info(op Op, value any, err error) { r.record(Info, op.F, op.Process, value, err) }

func (r *Recorder) record(typ Type, f string, process int, value any, opErr error) int {
	raw, err := json.Marshal(value)
	if err != nil {
		panic(fmt.Sprintf("history: value %#v does not marshal: %v", value, err))
	}
	e := Event{Type: typ, F: f, Process: process, Value: raw}
	if opErr != nil {
		e.Error = opErr.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Index = r.next
	e.Time = time.Since(r.start).Nanoseconds()
	r.next++
	if r.err != nil {
		return e.Index
	}
	line, err := json.Marshal(e)
	if err == nil {
		line = append(line, '\n')
		_, err = r.w.Write(line)
	}
	r.err = err
	return e.Index
}

// Len returns how many events were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next
}

// Close flushes the history and closes the file Create opened. It returns
// the first error met while recording, so a truncated history is never
// mistaken for a complete one.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.err
	if ferr := r.w.Flush(); err == nil {
		err = ferr
	}
	if r.closer != nil {
		if cerr := r.closer.Close(); err == nil {
			err = cerr
		}
		r.closer = nil
	}
	if err == nil {
		r.err = errors.New("history: recorder closed")
	}
	return err
}

// Load reads a history written by a Recorder (or any JSON-lines history in
// the same format).
func Load(rd io.Reader) ([]Event, error) {
	dec := json.NewDecoder(bufio.NewReader(rd))
	var out []Event
	for {
		var e Event
		if err := dec.Decode(&e); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, fmt.Errorf("history: event %d: %w", len(out), err)
		}
		switch e.Type {
		case Invoke, OK, Fail, Info:
		default:
			return out, fmt.Errorf("history: event %d: unknown type %q", len(out), e.Type)
		}
		out = append(out, e)
	}
}

// LoadFile loads the history at path.
func LoadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Load(f)
}
