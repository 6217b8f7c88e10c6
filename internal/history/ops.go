package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Completed is an operation: an invocation and its completion.
type Completed struct {
	Process int
	F       string
	Type    Type            // OK, Fail or Info; Info when the history ends before the completion
	Index   int             // index of the invoke event
	Call    int64           // invocation time
	Return  int64           // completion time; math.MaxInt64 when the outcome is unknown
	Input   json.RawMessage // the invocation's value
	Output  json.RawMessage // the completion's value; nil when there is none
	Error   string
}

// LoadPairs reads the history file at path and pairs its events (Pair).
func LoadPairs(path string) ([]Completed, error) {
	events, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	return Pair(events)
}

// Pair matches each invocation with the next completion of its process, as
// Elle does. An invocation that never completes counts as Info. The result
// is in invocation order.
func Pair(events []Event) ([]Completed, error) {
	var out []Completed
	open := map[int]int{} // process -> position in out of its open op
	for _, e := range events {
		if e.Type == Invoke {
			if _, busy := open[e.Process]; busy {
				return nil, fmt.Errorf("history: event %d: process %d invoked %s while an op is open", e.Index, e.Process, e.F)
			}
			open[e.Process] = len(out)
			out = append(out, Completed{Process: e.Process, F: e.F, Type: Info, Index: e.Index,
				Call: e.Time, Return: math.MaxInt64, Input: e.Value})
			continue
		}
		i, ok := open[e.Process]
		if !ok {
			return nil, fmt.Errorf("history: event %d: %s of process %d without an invocation", e.Index, e.Type, e.Process)
		}
		delete(open, e.Process)
		op := &out[i]
		if op.F != e.F {
			return nil, fmt.Errorf("history: event %d: %s completes %s of process %d", e.Index, e.F, op.F, e.Process)
		}
		op.Type, op.Output, op.Error = e.Type, e.Value, e.Error
		if e.Type != Info {
			op.Return = e.Time
		}
	}
	return out, nil
}

// Register is the value of a register read or write: [key, value], where a
// nil Value is a read that found nothing (or has not returned yet).
type Register struct {
	Key   string
	Value *string
}

// MarshalJSON encodes [key, value].
func (r Register) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{r.Key, r.Value})
}

// UnmarshalJSON decodes [key, value].
func (r *Register) UnmarshalJSON(b []byte) error {
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil {
		return err
	}
	if len(parts) != 2 {
		return fmt.Errorf("history: register value %s: want [key, value]", b)
	}
	key, err := decodeKey(parts[0])
	if err != nil {
		return err
	}
	r.Key, r.Value = key, nil
	if !bytes.Equal(bytes.TrimSpace(parts[1]), []byte("null")) {
		var v string
		if err := json.Unmarshal(parts[1], &v); err != nil {
			return fmt.Errorf("history: register value %s: %w", b, err)
		}
		r.Value = &v
	}
	return nil
}

// Str returns a pointer to s, for building Register values.
func Str(s string) *string { return &s }

// MicroOp is one operation of a list-append transaction, encoded as Elle
// encodes it: ["append", key, value] or ["r", key, [values...]], where a read
// whose result is not known (at invocation, or in a failed txn) is
// ["r", key, null].
type MicroOp struct {
	F     string // "append" or "r"
	Key   string
	Value int   // the appended value; unique per key across the history
	Read  []int // the list read; nil when unknown, empty when the key is empty
}

// Append returns the micro-op appending v to key.
func Append(key string, v int) MicroOp { return MicroOp{F: FAppend, Key: key, Value: v} }

// Read returns the micro-op reading key, with its result when known.
func Read(key string, list []int) MicroOp { return MicroOp{F: "r", Key: key, Read: list} }

// MarshalJSON encodes the micro-op as a JSON list.
func (m MicroOp) MarshalJSON() ([]byte, error) {
	switch m.F {
	case FAppend:
		return json.Marshal([]any{m.F, m.Key, m.Value})
	case "r":
		return json.Marshal([]any{m.F, m.Key, m.Read})
	}
	return nil, fmt.Errorf("history: micro-op %q", m.F)
}

// UnmarshalJSON decodes the micro-op from a JSON list.
func (m *MicroOp) UnmarshalJSON(b []byte) error {
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil {
		return err
	}
	if len(parts) != 3 {
		return fmt.Errorf("history: micro-op %s: want [f, key, value]", b)
	}
	*m = MicroOp{}
	if err := json.Unmarshal(parts[0], &m.F); err != nil {
		return err
	}
	key, err := decodeKey(parts[1])
	if err != nil {
		return err
	}
	m.Key = key
	switch m.F {
	case FAppend:
		return json.Unmarshal(parts[2], &m.Value)
	case "r":
		if err := json.Unmarshal(parts[2], &m.Read); err != nil {
			return err
		}
		if m.Read == nil && !bytes.Equal(bytes.TrimSpace(parts[2]), []byte("null")) {
			m.Read = []int{}
		}
		return nil
	}
	return fmt.Errorf("history: micro-op %s: unknown function %q", b, m.F)
}

// decodeKey accepts string keys and, for histories from Jepsen, integer
// keys, which become their decimal text.
func decodeKey(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", fmt.Errorf("history: key %s: want a string or an integer", raw)
	}
	return strconv.FormatInt(n, 10), nil
}
