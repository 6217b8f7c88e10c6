package checker

// These tests prove that CheckListAppend reports each anomaly class on a
// small hand-built history that exhibits it, and nothing on valid histories:
// hand-built ones and random serial executions of a list-append store (seed
// printed; reproduce with TYR_SEED=<seed>).

import (
	"github.com/tyrstore/tyr/internal/testseed"

	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/tyrstore/tyr/internal/history"
)

// txnBuilder builds a history of txns; each txn is invoked and completed
// at its own times unless the test sets them.
type txnBuilder struct{ ops []history.Completed }

func (b *txnBuilder) add(typ history.Type, mops ...history.MicroOp) int {
	in := make([]history.MicroOp, len(mops))
	for i, m := range mops {
		in[i] = m
		if m.F == "r" {
			in[i].Read = nil
		}
	}
	inRaw, _ := json.Marshal(in)
	outRaw, _ := json.Marshal(mops)
	i := len(b.ops)
	b.ops = append(b.ops, history.Completed{Process: i, F: history.FTxn, Type: typ, Index: 2 * i,
		Call: int64(2 * i), Return: int64(2*i + 1), Input: inRaw, Output: outRaw})
	return 2 * i
}

func (b *txnBuilder) ok(m ...history.MicroOp) int   { return b.add(history.OK, m...) }
func (b *txnBuilder) fail(m ...history.MicroOp) int { return b.add(history.Fail, m...) }
func (b *txnBuilder) info(m ...history.MicroOp) int { return b.add(history.Info, m...) }

var (
	ap = history.Append
	rd = history.Read
)

func l(v ...int) []int { return append([]int{}, v...) }

func kinds(r ListAppendResult) map[string]int {
	out := map[string]int{}
	for _, a := range r.Anomalies {
		out[a.Kind]++
	}
	return out
}

func TestListAppendAnomalies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *txnBuilder)
		want  string
	}{
		{"G0 write cycle", func(b *txnBuilder) {
			b.ok(ap("x", 1), ap("y", 2))
			b.ok(ap("x", 2), ap("y", 1))
			b.ok(rd("x", l(1, 2)), rd("y", l(1, 2)))
		}, "G0"},
		{"G1c circular information flow", func(b *txnBuilder) {
			b.ok(ap("x", 1), rd("y", l(1)))
			b.ok(ap("y", 1), ap("x", 2))
			b.ok(rd("x", l(1, 2)))
		}, "G1c"},
		{"G-single read skew", func(b *txnBuilder) {
			b.ok(rd("x", l()), rd("y", l(1)))
			b.ok(ap("x", 1), ap("y", 1))
			b.ok(rd("x", l(1)))
		}, "G-single"},
		{"G2 write skew", func(b *txnBuilder) {
			b.ok(rd("x", l()), ap("y", 1))
			b.ok(rd("y", l()), ap("x", 1))
			b.ok(rd("x", l(1)), rd("y", l(1)))
		}, "G2"},
		{"G2 over three txns", func(b *txnBuilder) {
			b.ok(rd("x", l()), ap("y", 1))
			b.ok(rd("y", l()), ap("z", 1))
			b.ok(rd("z", l()), ap("x", 1))
			b.ok(rd("x", l(1)), rd("y", l(1)), rd("z", l(1)))
		}, "G2"},
		{"G1a aborted read", func(b *txnBuilder) {
			b.fail(ap("x", 1))
			b.ok(rd("x", l(1)))
		}, "G1a"},
		{"G1b intermediate read", func(b *txnBuilder) {
			b.ok(ap("x", 1), ap("x", 2))
			b.ok(rd("x", l(1)))
			b.ok(rd("x", l(1, 2)))
		}, "G1b"},
		{"internal inconsistency", func(b *txnBuilder) {
			b.ok(ap("x", 5), rd("x", l()))
		}, "internal"},
		{"internal: lost own append after a read", func(b *txnBuilder) {
			b.ok(ap("x", 1))
			b.ok(rd("x", l(1)), ap("x", 2), rd("x", l(1)))
		}, "internal"},
		{"incompatible orders", func(b *txnBuilder) {
			b.ok(ap("x", 1))
			b.ok(ap("x", 2))
			b.ok(rd("x", l(1, 2)))
			b.ok(rd("x", l(2, 1)))
		}, "incompatible-order"},
		{"unknown value", func(b *txnBuilder) {
			b.ok(rd("x", l(9)))
		}, "unknown-value"},
		{"duplicate append", func(b *txnBuilder) {
			b.ok(ap("x", 1))
			b.ok(ap("x", 1))
		}, "duplicate-append"},
		{"duplicate elements", func(b *txnBuilder) {
			b.ok(ap("x", 1))
			b.ok(rd("x", l(1, 1)))
		}, "duplicate-elements"},
		{"G1c through an info txn whose append was read", func(b *txnBuilder) {
			b.ok(ap("x", 1), rd("y", l(1)))
			b.info(ap("y", 1), ap("x", 2))
			b.ok(rd("x", l(1, 2)))
		}, "G1c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b txnBuilder
			tc.build(&b)
			r := CheckListAppend(b.ops)
			if kinds(r)[tc.want] == 0 {
				t.Fatalf("want %s, got %v", tc.want, r.Anomalies)
			}
			// A cycle is reported by its weakest class only. (An
			// intermediate read also closes a G-single cycle through its
			// writer, so other anomalies may come with cycles.)
			cyclic := map[string]bool{"G0": true, "G1c": true, "G-single": true, "G2": true}
			for k := range cyclic {
				if cyclic[tc.want] && k != tc.want && kinds(r)[k] > 0 {
					t.Errorf("also reported %s: %v", k, r.Anomalies)
				}
			}
			t.Log(r)
			for _, a := range r.Anomalies {
				t.Log("  ", a)
			}
		})
	}
}

func TestListAppendValid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *txnBuilder)
	}{
		{"serial", func(b *txnBuilder) {
			b.ok(ap("x", 1))
			b.ok(rd("x", l(1)), ap("x", 2), rd("x", l(1, 2)))
			b.ok(rd("x", l(1, 2)), rd("y", l()))
		}},
		{"snapshot reads of an older state", func(b *txnBuilder) {
			b.ok(rd("x", l()), rd("y", l()))
			b.ok(ap("x", 1), ap("y", 1))
			b.ok(rd("x", l(1)), rd("y", l(1)))
		}},
		{"append without a read of the key", func(b *txnBuilder) {
			b.ok(ap("x", 1), ap("x", 2))
			b.ok(ap("x", 3))
			b.ok(rd("x", l(1, 2, 3)))
		}},
		{"failed and info txns never read", func(b *txnBuilder) {
			b.fail(ap("x", 1))
			b.info(ap("x", 2))
			b.ok(rd("x", l()))
		}},
		{"info txn whose append was read", func(b *txnBuilder) {
			b.info(ap("x", 1))
			b.ok(rd("x", l(1)), ap("x", 2))
			b.ok(rd("x", l(1, 2)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b txnBuilder
			tc.build(&b)
			if r := CheckListAppend(b.ops); !r.Valid() {
				t.Fatalf("valid history reported: %v", r.Anomalies)
			}
		})
	}
}

func testSeed(t *testing.T) uint64 { return testseed.FromEnv(t, "TYR_SEED") }

// TestListAppendRandomSerial runs random txns one after another against an
// in-memory list store; whatever their mix, a serial execution must check
// as serializable. Some txns fail (and leave no trace) or end as info (and
// may or may not have committed).
func TestListAppendRandomSerial(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 1))
	store := map[string][]int{}
	keys := []string{"a", "b", "c", "d"}
	next := 1
	var b txnBuilder
	for i := 0; i < 2000; i++ {
		var mops []history.MicroOp
		staged := map[string][]int{}
		for k := range store {
			staged[k] = append([]int(nil), store[k]...)
		}
		for j := 0; j < 1+r.IntN(4); j++ {
			k := keys[r.IntN(len(keys))]
			if r.IntN(2) == 0 {
				mops = append(mops, ap(k, next))
				staged[k] = append(staged[k], next)
				next++
			} else {
				mops = append(mops, rd(k, append([]int{}, staged[k]...)))
			}
		}
		switch p := r.IntN(20); {
		case p == 0:
			b.fail(mops...)
		case p == 1:
			b.info(mops...)
			if r.IntN(2) == 0 {
				store = staged
			}
		default:
			b.ok(mops...)
			store = staged
		}
	}
	res := CheckListAppend(b.ops)
	if !res.Valid() {
		t.Fatalf("seed %d: serial history reported: %v", seed, res.Anomalies[:min(5, len(res.Anomalies))])
	}
	t.Log(res)
}

// TestListAppendInjectedSkew hides one stale read in a long valid history;
// it must show up as a cycle.
func TestListAppendInjectedSkew(t *testing.T) {
	var b txnBuilder
	b.ok(ap("x", 1), ap("y", 1))
	for i := 2; i < 50; i++ {
		b.ok(rd("x", l(seq(1, i-1)...)), ap("x", i))
	}
	b.ok(rd("x", l(seq(1, 49)...)), rd("y", l(1)), ap("y", 2))
	b.ok(rd("y", l(1)), ap("x", 50)) // misses y=2, yet x=50 comes after T_a read x: write skew (G2)
	b.ok(rd("x", l(seq(1, 50)...)), rd("y", l(1, 2)))
	res := CheckListAppend(b.ops)
	if res.Valid() {
		t.Fatal("injected skew not reported")
	}
	t.Log(res)
}

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
