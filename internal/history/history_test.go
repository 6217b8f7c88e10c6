package history

// These tests prove that a recorded history loads back event for event, that
// concurrent recording keeps index and time in step, and that invocations
// pair with their completions as Elle pairs them.

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

func TestRecordLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	r, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := r.Invoke(0, FWrite, Register{"k", Str("v1")})
	rd := r.Invoke(1, FRead, Register{"k", nil})
	r.Ok(w, Register{"k", Str("v1")})
	r.Ok(rd, Register{"k", Str("v1")})
	tx := r.Invoke(2, FTxn, []MicroOp{Append("x", 1), Read("y", nil)})
	r.Info(tx, []MicroOp{Append("x", 1), Read("y", nil)}, errors.New("timeout"))
	tx2 := r.Invoke(3, FTxn, []MicroOp{Read("x", nil), Read("y", nil)})
	r.Fail(tx2, []MicroOp{Read("x", []int{1, 2}), Read("y", []int{})}, errors.New("conflict"))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	events, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 8 {
		t.Fatalf("loaded %d events, want 8", len(events))
	}
	for i, e := range events {
		if e.Index != i {
			t.Fatalf("event %d has index %d", i, e.Index)
		}
		if i > 0 && e.Time < events[i-1].Time {
			t.Fatalf("event %d goes back in time", i)
		}
	}
	ops, err := Pair(events)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 4 || ops[0].Type != OK || ops[1].Type != OK || ops[2].Type != Info || ops[3].Type != Fail {
		t.Fatalf("paired ops: %+v", ops)
	}
	if ops[2].Return != math.MaxInt64 || ops[2].Error != "timeout" {
		t.Fatalf("info op: %+v", ops[2])
	}
	var reg Register
	if err := json.Unmarshal(ops[1].Output, &reg); err != nil || reg.Key != "k" || reg.Value == nil || *reg.Value != "v1" {
		t.Fatalf("register output %s: %+v %v", ops[1].Output, reg, err)
	}
	var mops []MicroOp
	if err := json.Unmarshal(ops[3].Output, &mops); err != nil {
		t.Fatal(err)
	}
	want := []MicroOp{Read("x", []int{1, 2}), Read("y", []int{})}
	if !reflect.DeepEqual(mops, want) {
		t.Fatalf("micro-ops %+v, want %+v", mops, want)
	}
	var unknown []MicroOp
	if err := json.Unmarshal(ops[2].Input, &unknown); err != nil || unknown[1].Read != nil {
		t.Fatalf("unknown read must stay nil: %+v %v", unknown, err)
	}
}

func TestElleFormat(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	op := r.Invoke(5, FTxn, []MicroOp{Append("x", 3), Read("x", nil)})
	r.Ok(op, []MicroOp{Append("x", 3), Read("x", []int{1, 3})})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	var m map[string]any
	if err := json.Unmarshal(lines[1], &m); err != nil {
		t.Fatal(err)
	}
	if m["type"] != "ok" || m["f"] != "txn" || m["process"] != float64(5) || m["index"] != float64(1) {
		t.Fatalf("ok event: %s", lines[1])
	}
	v, _ := json.Marshal(m["value"])
	if string(v) != `[["append","x",3],["r","x",[1,3]]]` {
		t.Fatalf("txn value %s", v)
	}
	// Jepsen histories use integer keys.
	var mo MicroOp
	if err := json.Unmarshal([]byte(`["r", 7, null]`), &mo); err != nil || mo.Key != "7" || mo.Read != nil {
		t.Fatalf("integer key: %+v %v", mo, err)
	}
}

func TestConcurrentRecording(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	var wg sync.WaitGroup
	for p := 0; p < 8; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				op := r.Invoke(p, FRead, Register{"k", nil})
				r.Ok(op, Register{"k", nil})
			}
		}()
	}
	wg.Wait()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	events, err := Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3200 {
		t.Fatalf("%d events", len(events))
	}
	for i := 1; i < len(events); i++ {
		if events[i].Index != i || events[i].Time < events[i-1].Time {
			t.Fatalf("event %d: index %d time %d after %d", i, events[i].Index, events[i].Time, events[i-1].Time)
		}
	}
	ops, err := Pair(events)
	if err != nil || len(ops) != 1600 {
		t.Fatalf("pair: %d ops, %v", len(ops), err)
	}
}

func TestPairRejectsMalformed(t *testing.T) {
	for name, events := range map[string][]Event{
		"double invoke":  {{Type: Invoke, F: FRead, Process: 1}, {Type: Invoke, F: FRead, Process: 1, Index: 1}},
		"orphan":         {{Type: OK, F: FRead, Process: 1}},
		"wrong function": {{Type: Invoke, F: FRead, Process: 1}, {Type: OK, F: FWrite, Process: 1, Index: 1}},
	} {
		if _, err := Pair(events); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
