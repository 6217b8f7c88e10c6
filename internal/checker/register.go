// Package checker checks histories recorded by internal/history: single-key
// register histories for linearizability (with porcupine) and list-append
// transaction histories for serializability (an Elle-style dependency graph).
// Checkers are pure functions of a history; they never talk to a store.
package checker

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/tyrstore/tyr/internal/history"
)

// Anomaly is one violation found in a history.
type Anomaly struct {
	Kind   string // e.g. "nonlinearizable", "lost-write", "G1a", "G-single"
	Key    string // the key involved, when there is one
	Ops    []int  // invoke indexes of the operations involved
	Detail string
}

func (a Anomaly) String() string {
	s := a.Kind
	if a.Key != "" {
		s += " on " + a.Key
	}
	if len(a.Ops) > 0 {
		s += fmt.Sprintf(" (ops %v)", a.Ops)
	}
	if a.Detail != "" {
		s += ": " + a.Detail
	}
	return s
}

// RegisterOptions tunes CheckRegister.
type RegisterOptions struct {
	// Timeout bounds porcupine's search; zero means one minute. A search
	// that times out is reported as an anomaly of kind "unknown", because a
	// check that did not finish proves nothing.
	Timeout time.Duration
	// VisualizePath, when set, is where an HTML visualization of a
	// nonlinearizable history is written.
	VisualizePath string
}

// RegisterResult is the outcome of CheckRegister.
type RegisterResult struct {
	Ops       int // register ops in the history
	OK        int
	Fail      int
	Info      int
	Keys      int
	Anomalies []Anomaly
}

// Valid reports whether no anomaly was found.
func (r RegisterResult) Valid() bool { return len(r.Anomalies) == 0 }

func (r RegisterResult) String() string {
	verdict := "valid"
	if !r.Valid() {
		verdict = fmt.Sprintf("%d anomalies", len(r.Anomalies))
	}
	return fmt.Sprintf("%d register ops on %d keys (%d ok, %d fail, %d info): %s",
		r.Ops, r.Keys, r.OK, r.Fail, r.Info, verdict)
}

// parsedReg is a register op with its value decoded.
type parsedReg struct {
	op  history.Completed
	key string
	in  *string // the written value; nil for a read
	out *string // the value a read returned; nil for "not found"
}

// regOp is a register op as porcupine sees it.
type regOp struct {
	key   string
	write bool
	value string // "" for a read that found nothing; written values are never empty
}

// CheckRegister checks that the read and write ops of a history are
// linearizable, treating every key as an independent register whose initial
// state is "not found". A write replaces the whole value; written values
// must be unique and non-empty, which is what lets a read be traced to the
// one write it observed.
//
// An op that failed certainly did not take effect and is dropped. An op with
// an unknown outcome (info) may take effect at any time after its
// invocation, so a write of unknown outcome is given an open-ended return
// time; one whose value no read observed is dropped, which is equivalent
// (it could always be placed after every other op) and keeps the search
// small. A read of unknown outcome observed nothing and is dropped.
//
// Besides linearizability it reports, with clearer messages than a failed
// search gives: reads of a value never written or written by a failed op
// ("phantom-read"), and reads that return the value of a write w' — or
// nothing — although a later acknowledged write w completed before the read
// began and w' had completed before w began ("lost-write": w was lost).
func CheckRegister(ops []history.Completed, opts RegisterOptions) RegisterResult {
	if opts.Timeout == 0 {
		opts.Timeout = time.Minute
	}
	var res RegisterResult
	var regs []parsedReg
	for _, op := range ops {
		if op.F != history.FRead && op.F != history.FWrite {
			continue
		}
		var in, out history.Register
		if err := json.Unmarshal(op.Input, &in); err != nil {
			res.Anomalies = append(res.Anomalies, Anomaly{Kind: "malformed", Ops: []int{op.Index}, Detail: err.Error()})
			continue
		}
		if op.Type == history.OK && op.F == history.FRead {
			if err := json.Unmarshal(op.Output, &out); err != nil || out.Key != in.Key {
				res.Anomalies = append(res.Anomalies, Anomaly{Kind: "malformed", Ops: []int{op.Index},
					Detail: fmt.Sprintf("read output %s", op.Output)})
				continue
			}
		}
		if op.F == history.FWrite && (in.Value == nil || *in.Value == "") {
			res.Anomalies = append(res.Anomalies, Anomaly{Kind: "malformed", Ops: []int{op.Index}, Detail: "write of no value"})
			continue
		}
		regs = append(regs, parsedReg{op: op, key: in.Key, in: in.Value, out: out.Value})
		res.Ops++
		switch op.Type {
		case history.OK:
			res.OK++
		case history.Fail:
			res.Fail++
		default:
			res.Info++
		}
	}

	// Index the writes by value, and find which values some read observed.
	writes := map[string]map[string]history.Completed{} // key -> value -> write
	observed := map[string]map[string]bool{}
	for _, r := range regs {
		if r.op.F != history.FWrite {
			continue
		}
		if writes[r.key] == nil {
			writes[r.key] = map[string]history.Completed{}
			observed[r.key] = map[string]bool{}
		}
		if prev, dup := writes[r.key][*r.in]; dup {
			res.Anomalies = append(res.Anomalies, Anomaly{Kind: "duplicate-write", Key: r.key,
				Ops: []int{prev.Index, r.op.Index}, Detail: fmt.Sprintf("value %q written twice", *r.in)})
		}
		writes[r.key][*r.in] = r.op
	}
	keys := map[string]bool{}
	for _, r := range regs {
		keys[r.key] = true
		if r.op.F != history.FRead || r.op.Type != history.OK || r.out == nil {
			continue
		}
		w, ok := writes[r.key][*r.out]
		switch {
		case !ok:
			res.Anomalies = append(res.Anomalies, Anomaly{Kind: "phantom-read", Key: r.key, Ops: []int{r.op.Index},
				Detail: fmt.Sprintf("read %q, which no op wrote", *r.out)})
		case w.Type == history.Fail:
			res.Anomalies = append(res.Anomalies, Anomaly{Kind: "phantom-read", Key: r.key, Ops: []int{w.Index, r.op.Index},
				Detail: fmt.Sprintf("read %q, written by a failed op", *r.out)})
		default:
			observed[r.key][*r.out] = true
		}
	}
	res.Keys = len(keys)
	res.Anomalies = append(res.Anomalies, lostWrites(regsToLost(regs, writes))...)

	// Linearizability, one register per key.
	var pops []porcupine.Operation
	clientIDs := map[int]int{} // process -> dense id, as the visualization draws a row per id
	for _, r := range regs {
		op := r.op
		switch {
		case op.Type == history.Fail:
			continue
		case op.F == history.FRead && op.Type != history.OK:
			continue
		case op.F == history.FWrite && op.Type != history.OK && !observed[r.key][*r.in]:
			continue
		case op.F == history.FRead && r.out != nil && !observed[r.key][*r.out]:
			continue // already reported as a phantom read
		}
		in := regOp{key: r.key, write: op.F == history.FWrite}
		var out string
		if in.write {
			in.value = *r.in
		} else if r.out != nil {
			out = *r.out
		}
		ret := op.Return
		if op.Type != history.OK {
			ret = math.MaxInt64
		}
		id, ok := clientIDs[op.Process]
		if !ok {
			id = len(clientIDs)
			clientIDs[op.Process] = id
		}
		pops = append(pops, porcupine.Operation{ClientId: id, Input: in, Call: op.Call, Output: out,
			Return: ret, Metadata: op.Index})
	}
	verdict, info := porcupine.CheckOperationsVerbose(registerModel, pops, opts.Timeout)
	switch verdict {
	case porcupine.Illegal:
		a := Anomaly{Kind: "nonlinearizable", Detail: "no linearization of the register ops exists"}
		if opts.VisualizePath != "" {
			if err := porcupine.VisualizePath(registerModel, info, opts.VisualizePath); err == nil {
				a.Detail += "; visualization in " + opts.VisualizePath
			}
		}
		a.Key = illegalKeys(pops, opts.Timeout)
		res.Anomalies = append(res.Anomalies, a)
	case porcupine.Unknown:
		res.Anomalies = append(res.Anomalies, Anomaly{Kind: "unknown",
			Detail: fmt.Sprintf("linearizability search did not finish in %v", opts.Timeout)})
	}
	return res
}

// illegalKeys names the keys whose registers are not linearizable, checked
// one at a time, so a report points at the registers to look at.
func illegalKeys(pops []porcupine.Operation, timeout time.Duration) string {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range pops {
		k := op.Input.(regOp).key
		byKey[k] = append(byKey[k], op)
	}
	var bad []string
	for k, part := range byKey {
		if porcupine.CheckOperationsTimeout(registerModel, part, timeout) == porcupine.Illegal {
			bad = append(bad, k)
		}
	}
	sort.Strings(bad)
	return strings.Join(bad, ",")
}

var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			k := op.Input.(regOp).key
			if _, ok := byKey[k]; !ok {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regOp)
		if in.write {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	DescribeOperation: func(input, output any) string {
		in := input.(regOp)
		if in.write {
			return fmt.Sprintf("write(%s, %q)", in.key, in.value)
		}
		if output.(string) == "" {
			return fmt.Sprintf("read(%s) -> not found", in.key)
		}
		return fmt.Sprintf("read(%s) -> %q", in.key, output.(string))
	},
	DescribeState: func(state any) string {
		if state.(string) == "" {
			return "not found"
		}
		return fmt.Sprintf("%q", state.(string))
	},
}

// lostOp is a register op reduced to what the lost-write check needs.
type lostOp struct {
	index     int
	key       string
	write     bool
	call, ret int64
	readFrom  *history.Completed // the write a read observed; nil for "not found"
}

func regsToLost(regs []parsedReg, writes map[string]map[string]history.Completed) []lostOp {
	var out []lostOp
	for _, r := range regs {
		if r.op.Type != history.OK {
			continue
		}
		l := lostOp{index: r.op.Index, key: r.key, write: r.op.F == history.FWrite, call: r.op.Call, ret: r.op.Return}
		if !l.write && r.out != nil {
			w, ok := writes[r.key][*r.out]
			if !ok || w.Type == history.Fail {
				continue // a phantom read, reported already
			}
			l.readFrom = &w
		}
		out = append(out, l)
	}
	return out
}

// lostWrites finds reads that return a value (or nothing) although an
// acknowledged write that certainly followed it completed before the read
// began. Per key, the acknowledged writes sorted by return time give, for
// any instant t, the latest invocation among writes completed before t; a
// read starting at t that observed a write which returned before that
// invocation observed an overwritten value.
func lostWrites(ops []lostOp) []Anomaly {
	type ack struct {
		ret, call int64
		index     int
	}
	acks := map[string][]ack{}
	for _, o := range ops {
		if o.write {
			acks[o.key] = append(acks[o.key], ack{o.ret, o.call, o.index})
		}
	}
	type prefix struct {
		ret     int64
		maxCall int64
		index   int // the write with the latest invocation so far
	}
	prefixes := map[string][]prefix{}
	for k, a := range acks {
		sort.Slice(a, func(i, j int) bool { return a[i].ret < a[j].ret })
		p := make([]prefix, len(a))
		for i, w := range a {
			p[i] = prefix{w.ret, w.call, w.index}
			if i > 0 && p[i-1].maxCall > w.call {
				p[i].maxCall, p[i].index = p[i-1].maxCall, p[i-1].index
			}
		}
		prefixes[k] = p
	}
	var out []Anomaly
	for _, o := range ops {
		if o.write {
			continue
		}
		p := prefixes[o.key]
		n := sort.Search(len(p), func(i int) bool { return p[i].ret >= o.call })
		if n == 0 {
			continue // no acknowledged write completed before the read began
		}
		latest := p[n-1]
		switch {
		case o.readFrom == nil:
			out = append(out, Anomaly{Kind: "lost-write", Key: o.key, Ops: []int{latest.index, o.index},
				Detail: "read found nothing after an acknowledged write completed"})
		case o.readFrom.Return < latest.maxCall:
			out = append(out, Anomaly{Kind: "lost-write", Key: o.key, Ops: []int{latest.index, o.readFrom.Index, o.index},
				Detail: "read an overwritten value after an acknowledged later write completed"})
		}
	}
	return out
}
