package checker

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/tyrstore/tyr/internal/history"
)

// Dependency edge kinds, as bits so one pair of txns can carry several.
const (
	edgeWW = 1 << iota // write-write: the target appended the next version
	edgeWR             // write-read: the target read the source's append
	edgeRW             // read-write (anti-dependency): the target appended past what the source read
)

func edgeName(e int) string {
	switch {
	case e&edgeWW != 0:
		return "ww"
	case e&edgeWR != 0:
		return "wr"
	default:
		return "rw"
	}
}

// ListAppendResult is the outcome of CheckListAppend.
type ListAppendResult struct {
	Txns      int // txn ops in the history
	OK        int
	Fail      int
	Info      int
	Edges     int // dependency edges between distinct txns
	Anomalies []Anomaly
}

// Valid reports whether no anomaly was found.
func (r ListAppendResult) Valid() bool { return len(r.Anomalies) == 0 }

func (r ListAppendResult) String() string {
	verdict := "serializable"
	if !r.Valid() {
		kinds := map[string]int{}
		for _, a := range r.Anomalies {
			kinds[a.Kind]++
		}
		var parts []string
		for k, n := range kinds {
			parts = append(parts, fmt.Sprintf("%s×%d", k, n))
		}
		sort.Strings(parts)
		verdict = strings.Join(parts, " ")
	}
	return fmt.Sprintf("%d txns (%d ok, %d fail, %d info), %d edges: %s", r.Txns, r.OK, r.Fail, r.Info, r.Edges, verdict)
}

// laTxn is a decoded txn op.
type laTxn struct {
	index int // invoke index, reported in anomalies
	typ   history.Type
	ops   []history.MicroOp
}

// writer locates one appended value.
type writer struct {
	txn  int // position in the txn list
	last bool
}

// CheckListAppend checks a history of "txn" ops over append-only lists for
// serializability, as Elle's list-append checker does. Each appended value
// must be unique per key, which lets every read list name the txns that
// wrote it and, since lists only grow, the longest list read of a key gives
// its version order. From the orders it infers the dependency graph over
// committed txns (ok, and info txns, whose appends may have committed):
//
//   - ww: T1 appended a version and T2 the next one of the same key;
//   - wr: T2 read a list whose last element T1 appended;
//   - rw: T1 read a list and T2 appended the version that follows it.
//
// Every cycle is an anomaly, classified by the weakest edges that close
// one, per strongly connected component: G0 (ww only), G1c (ww and wr),
// G-single (exactly one rw), G2 (two or more rw). It also reports, without
// cycles: G1a (an ok txn read a value a failed txn appended), G1b (an ok txn
// read a value that was not its writer's last append to the key),
// incompatible-order (two reads of a key that are not prefixes of one
// another), internal (a txn's read disagrees with its own earlier read and
// appends), and duplicate or unknown values. Real-time order is not
// checked, so this is serializability, not strict serializability.
func CheckListAppend(ops []history.Completed) ListAppendResult {
	var res ListAppendResult
	var txns []laTxn
	for _, op := range ops {
		if op.F != history.FTxn {
			continue
		}
		raw := op.Input
		if op.Type == history.OK {
			raw = op.Output
		}
		var mops []history.MicroOp
		if err := json.Unmarshal(raw, &mops); err != nil {
			res.Anomalies = append(res.Anomalies, Anomaly{Kind: "malformed", Ops: []int{op.Index}, Detail: err.Error()})
			continue
		}
		if op.Type != history.OK {
			// Only a committed txn's reads are known.
			for i := range mops {
				mops[i].Read = nil
			}
		}
		txns = append(txns, laTxn{index: op.Index, typ: op.Type, ops: mops})
		switch op.Type {
		case history.OK:
			res.OK++
		case history.Fail:
			res.Fail++
		default:
			res.Info++
		}
	}
	res.Txns = len(txns)
	bad := func(kind, key string, detail string, txs ...int) {
		a := Anomaly{Kind: kind, Key: key, Detail: detail}
		for _, t := range txs {
			a.Ops = append(a.Ops, txns[t].index)
		}
		res.Anomalies = append(res.Anomalies, a)
	}

	// Who appended each value, and whether it was the writer's last append
	// to that key.
	writers := map[string]map[int]writer{}
	for ti, t := range txns {
		lastPos := map[string]int{}
		for i, m := range t.ops {
			if m.F == history.FAppend {
				lastPos[m.Key] = i
			}
		}
		for i, m := range t.ops {
			if m.F != history.FAppend {
				continue
			}
			if writers[m.Key] == nil {
				writers[m.Key] = map[int]writer{}
			}
			if prev, dup := writers[m.Key][m.Value]; dup {
				bad("duplicate-append", m.Key, fmt.Sprintf("value %d appended twice", m.Value), prev.txn, ti)
				continue
			}
			writers[m.Key][m.Value] = writer{txn: ti, last: lastPos[m.Key] == i}
		}
	}

	// Check each committed read on its own, and within its txn.
	orders := map[string][]int{} // key -> the longest list read
	for ti, t := range txns {
		if t.typ != history.OK {
			continue
		}
		known := map[string][]int{}    // key -> what this txn must see now, if it read the key
		appended := map[string][]int{} // key -> this txn's appends not yet covered by a read
		for _, m := range t.ops {
			if m.F == history.FAppend {
				if l, ok := known[m.Key]; ok {
					known[m.Key] = append(slices.Clone(l), m.Value)
				} else {
					appended[m.Key] = append(appended[m.Key], m.Value)
				}
				continue
			}
			if m.Read == nil {
				continue
			}
			if l, ok := known[m.Key]; ok && !slices.Equal(l, m.Read) {
				bad("internal", m.Key, fmt.Sprintf("read %v, expected %v from the txn's own ops", m.Read, l), ti)
			} else if a := appended[m.Key]; !ok && len(a) > 0 &&
				(len(m.Read) < len(a) || !slices.Equal(m.Read[len(m.Read)-len(a):], a)) {
				bad("internal", m.Key, fmt.Sprintf("read %v, which does not end with the txn's own appends %v", m.Read, a), ti)
			}
			known[m.Key], appended[m.Key] = m.Read, nil
			seen := map[int]bool{}
			for _, v := range m.Read {
				if seen[v] {
					bad("duplicate-elements", m.Key, fmt.Sprintf("read %v holds %d twice", m.Read, v), ti)
				}
				seen[v] = true
				w, ok := writers[m.Key][v]
				switch {
				case !ok:
					bad("unknown-value", m.Key, fmt.Sprintf("read %v holds %d, which no txn appended", m.Read, v), ti)
				case txns[w.txn].typ == history.Fail:
					bad("G1a", m.Key, fmt.Sprintf("read %v holds %d, appended by a failed txn", m.Read, v), w.txn, ti)
				}
			}
			if n := len(m.Read); n > 0 {
				if w, ok := writers[m.Key][m.Read[n-1]]; ok && w.txn != ti && !w.last {
					bad("G1b", m.Key, fmt.Sprintf("read %v ends with %d, an intermediate append of its writer", m.Read, m.Read[n-1]), w.txn, ti)
				}
			}
			if len(m.Read) > len(orders[m.Key]) {
				orders[m.Key] = m.Read
			}
		}
	}
	for ti, t := range txns {
		for _, m := range t.ops {
			if t.typ == history.OK && m.Read != nil && !isPrefix(m.Read, orders[m.Key]) {
				bad("incompatible-order", m.Key, fmt.Sprintf("read %v is not a prefix of %v", m.Read, orders[m.Key]), ti)
			}
		}
	}

	// The dependency graph over txns that may have committed.
	g := newGraph(len(txns))
	committed := func(ti int) bool { return txns[ti].typ != history.Fail }
	for key, order := range orders {
		for i := 1; i < len(order); i++ {
			a, okA := writers[key][order[i-1]]
			b, okB := writers[key][order[i]]
			if okA && okB && committed(a.txn) && committed(b.txn) {
				g.add(a.txn, b.txn, edgeWW)
			}
		}
	}
	for ti, t := range txns {
		if t.typ != history.OK {
			continue
		}
		for _, m := range t.ops {
			if m.Read == nil || !isPrefix(m.Read, orders[m.Key]) {
				continue
			}
			if n := len(m.Read); n > 0 {
				if w, ok := writers[m.Key][m.Read[n-1]]; ok && committed(w.txn) {
					g.add(w.txn, ti, edgeWR)
				}
			}
			if order := orders[m.Key]; len(m.Read) < len(order) {
				if w, ok := writers[m.Key][order[len(m.Read)]]; ok && committed(w.txn) {
					g.add(ti, w.txn, edgeRW)
				}
			}
		}
	}
	res.Edges = g.edges
	for _, c := range g.cycles() {
		ids := make([]int, len(c.nodes))
		var steps []string
		for i, n := range c.nodes {
			ids[i] = txns[n].index
			steps = append(steps, fmt.Sprintf("T%d -%s->", txns[n].index, edgeName(c.kinds[i])))
		}
		steps = append(steps, fmt.Sprintf("T%d", txns[c.nodes[0]].index))
		res.Anomalies = append(res.Anomalies, Anomaly{Kind: c.class, Ops: ids, Detail: strings.Join(steps, " ")})
	}
	return res
}

func isPrefix(a, b []int) bool { return len(a) <= len(b) && slices.Equal(a, b[:len(a)]) }

// graph is a directed graph over txns with edge kinds as bit sets.
type graph struct {
	out   []map[int]int // node -> successor -> kinds
	edges int
}

func newGraph(n int) *graph { return &graph{out: make([]map[int]int, n)} }

func (g *graph) add(from, to, kind int) {
	if from == to {
		return
	}
	if g.out[from] == nil {
		g.out[from] = map[int]int{}
	}
	if g.out[from][to] == 0 {
		g.edges++
	}
	g.out[from][to] |= kind
}

// succ lists from's successors in ascending order over edges with a kind in
// mask and a target in scope, so that reports are deterministic.
func (g *graph) succ(from, mask int, scope map[int]bool) []int {
	var out []int
	for to, k := range g.out[from] {
		if k&mask != 0 && scope[to] {
			out = append(out, to)
		}
	}
	sort.Ints(out)
	return out
}

// cycle is one cycle found: nodes[i] -> nodes[i+1] (wrapping) over an edge
// of kinds[i].
type cycle struct {
	class string
	nodes []int
	kinds []int
}

// cycles returns one cycle of the weakest class in every strongly connected
// component of the whole graph, as Elle reports one per component.
func (g *graph) cycles() []cycle {
	all := map[int]bool{}
	for i := range g.out {
		all[i] = true
	}
	var out []cycle
	for _, comp := range g.sccs(edgeWW|edgeWR|edgeRW, all) {
		if c, ok := g.cycleIn(comp, edgeWW); ok {
			c.class = "G0"
			out = append(out, c)
		} else if c, ok := g.cycleIn(comp, edgeWW|edgeWR); ok {
			c.class = "G1c"
			out = append(out, c)
		} else if c, ok := g.singleRW(comp); ok {
			c.class = "G-single"
			out = append(out, c)
		} else if c, ok := g.cycleIn(comp, edgeWW|edgeWR|edgeRW); ok {
			c.class = "G2"
			out = append(out, c)
		}
	}
	return out
}

// sccs returns the strongly connected components of more than one node of
// the subgraph of scope over edges in mask (Tarjan's algorithm).
func (g *graph) sccs(mask int, scope map[int]bool) []map[int]bool {
	index := map[int]int{}
	low := map[int]int{}
	onStack := map[int]bool{}
	var stack []int
	var out []map[int]bool
	next := 0
	var visit func(v int)
	visit = func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range g.succ(v, mask, scope) {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			comp := map[int]bool{}
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = true
				if w == v {
					break
				}
			}
			if len(comp) > 1 {
				out = append(out, comp)
			}
		}
	}
	nodes := make([]int, 0, len(scope))
	for v := range scope {
		nodes = append(nodes, v)
	}
	sort.Ints(nodes)
	for _, v := range nodes {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	return out
}

// path finds a shortest path from -> to over edges in mask within scope,
// returning its nodes from "from" up to, not including, "to".
func (g *graph) path(from, to, mask int, scope map[int]bool) ([]int, bool) {
	prev := map[int]int{from: -1}
	queue := []int{from}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range g.succ(v, mask, scope) {
			if w == to {
				var p []int
				for n := v; n != -1; n = prev[n] {
					p = append(p, n)
				}
				slices.Reverse(p)
				return p, true
			}
			if _, seen := prev[w]; !seen {
				prev[w] = v
				queue = append(queue, w)
			}
		}
	}
	return nil, false
}

// label names each step of a cycle by its weakest kind within mask.
func (g *graph) label(nodes []int, mask int) cycle {
	c := cycle{nodes: nodes, kinds: make([]int, len(nodes))}
	for i, n := range nodes {
		c.kinds[i] = g.out[n][nodes[(i+1)%len(nodes)]] & mask
	}
	return c
}

// cycleIn finds a cycle within comp over edges in mask.
func (g *graph) cycleIn(comp map[int]bool, mask int) (cycle, bool) {
	for _, sub := range g.sccs(mask, comp) {
		start := -1
		for v := range sub {
			if start == -1 || v < start {
				start = v
			}
		}
		if p, ok := g.path(start, start, mask, sub); ok {
			return g.label(p, mask), true
		}
	}
	return cycle{}, false
}

// singleRW finds a cycle within comp with exactly one rw edge: an rw edge
// a -> b closed by a path b -> a over ww and wr edges.
func (g *graph) singleRW(comp map[int]bool) (cycle, bool) {
	nodes := make([]int, 0, len(comp))
	for v := range comp {
		nodes = append(nodes, v)
	}
	sort.Ints(nodes)
	for _, a := range nodes {
		for _, b := range g.succ(a, edgeRW, comp) {
			if p, ok := g.path(b, a, edgeWW|edgeWR, comp); ok {
				c := g.label(append([]int{a}, p...), edgeWW|edgeWR)
				c.kinds[0] = edgeRW
				return c, true
			}
		}
	}
	return cycle{}, false
}
