package rebalance

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tyrstore/tyr/internal/ring"
)

// TestSourcesByPhase checks where a catch-up copies from in each phase of
// a move from 3 to 5 nodes at replication 3: the read replicas always;
// the new owners apart while ranges are copied; the old owners among the
// read replicas while reads switch; the old owners apart in Active while
// the old ring is kept; nothing more once Clean.
func TestSourcesByPhase(t *testing.T) {
	first, _ := First("a", nodes("a", "b", "c"))
	r, err := Propose(first, "a", nodes("a", "b", "c", "d", "e"), 3)
	if err != nil {
		t.Fatal(err)
	}
	const rf, seed = 3, 9
	oldRing, newRing := mustRing(t, 1, first.New), mustRing(t, r.Epoch, r.New)
	for p := PhaseInstalling; p <= PhaseClean; p++ {
		pl := placementAt(t, r, p)
		var old *ring.Ring
		if p == PhaseActive {
			old = oldRing
		}
		moved := 0
		for k := range 500 {
			key := fmt.Sprintf("blob%d", k)
			was, _ := oldRing.Replicas(seed, key, 0, rf)
			now, _ := newRing.Replicas(seed, key, 0, rf)
			reps, stale, err := pl.Sources(seed, key, 0, rf, old)
			if err != nil {
				t.Fatal(err)
			}
			reads, wantReps, wantStale := was, was, minus(now, was)
			switch p {
			case PhaseSwitching:
				reads, wantReps, wantStale = now, union(now, was), nil
			case PhaseActive:
				reads, wantReps, wantStale = now, now, minus(was, now)
			case PhaseClean:
				reads, wantReps, wantStale = now, now, nil
			}
			if !slices.Equal(reps[:len(reads)], reads) {
				t.Fatalf("%s at %v: sources begin %v, want the read replicas %v", key, p, reps, reads)
			}
			if !sameSet(reps, wantReps) || !sameSet(stale, wantStale) {
				t.Fatalf("%s at %v: sources %v, stale %v; want %v, stale %v", key, p, reps, stale, wantReps, wantStale)
			}
			if !slices.Equal(was, now) {
				moved++
			}
		}
		if moved == 0 {
			t.Fatal("no key moved: the test proves nothing")
		}
	}
}

func TestOrder(t *testing.T) {
	dead := map[ring.NodeID]bool{"e": true}
	behind := map[ring.NodeID]bool{"a": true}
	alive := func(id ring.NodeID) bool { return !dead[id] }
	catching := func(id ring.NodeID) bool { return behind[id] }
	got := Order("b", []ring.NodeID{"e", "d", "c", "b", "a"}, []ring.NodeID{"g", "f", "e", "b"}, alive, catching)
	want := []Source{{"c", true}, {"d", true}, {"f", false}, {"g", false}, {"a", false}}
	if !slices.Equal(got, want) {
		t.Fatalf("Order = %v, want %v", got, want)
	}
	if got := Order("b", []ring.NodeID{"b", "e"}, nil, alive, catching); len(got) != 0 {
		t.Fatalf("Order of b and e (dead) at b = %v, want none", got)
	}
}

func TestKeeps(t *testing.T) {
	holders := map[ring.NodeID]bool{"a": true, "b": true}
	holds := func(id ring.NodeID) bool { return holders[id] }
	none := func(ring.NodeID) bool { return false }
	all := func(ring.NodeID) bool { return true }
	for _, tc := range []struct {
		name       string
		self       ring.NodeID
		chain      []ring.NodeID
		serves     bool
		catchingUp func(ring.NodeID) bool
		want       Keeping
	}{
		{"no chain", "a", nil, true, none, NoChain},
		{"the tail refuses for itself", "a", []ring.NodeID{"c", "a"}, true, none, Kept},
		{"a serving member, the tail holds it", "a", []ring.NodeID{"a", "b"}, true, none, Kept},
		{"a serving member, the tail lacks it", "a", []ring.NodeID{"a", "b", "c"}, true, none, TailLacks},
		{"the tail keeps it even if catching up", "a", []ring.NodeID{"a", "b"}, true, all, Kept},
		{"a gaining member, another holder in step", "a", []ring.NodeID{"a", "b", "c"}, false, none, Kept},
		{"a gaining member, the other holder catching up", "a", []ring.NodeID{"a", "b", "c"}, false, all, SoleHolder},
		{"a gaining member, no other holder", "a", []ring.NodeID{"a", "c", "d"}, false, none, SoleHolder},
	} {
		if got := Keeps(tc.self, tc.chain, tc.serves, holds, tc.catchingUp); got != tc.want {
			t.Errorf("%s: Keeps = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestOnlyGains(t *testing.T) {
	first, _ := First("a", nodes("a", "b", "c"))
	r, err := Propose(first, "a", nodes("a", "b", "c", "d"), 3)
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{"x": true}
	serves := func(key string) bool { return served[key] }
	for p := PhaseInstalling; p <= PhaseClean; p++ {
		pl := placementAt(t, r, p)
		gaining := p < PhaseSwitching
		if got := pl.OnlyGains([]string{"y", "z"}, serves); got != gaining {
			t.Errorf("at %v OnlyGains of keys not served = %v, want %v", p, got, gaining)
		}
		if pl.OnlyGains([]string{"y", "x"}, serves) {
			t.Errorf("at %v OnlyGains with a key served = true", p)
		}
	}
}

// placementAt returns the placement of r at phase p.
func placementAt(t *testing.T, r Record, p Phase) Placement {
	t.Helper()
	r.Phase = p
	pl, err := r.Rings(ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func minus(a, b []ring.NodeID) []ring.NodeID {
	return slices.DeleteFunc(slices.Clone(a), func(id ring.NodeID) bool { return slices.Contains(b, id) })
}

func union(a, b []ring.NodeID) []ring.NodeID { return append(slices.Clone(a), minus(b, a)...) }

func sameSet(a, b []ring.NodeID) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// TestRefresh checks which source's answer counts: those behind are passed
// over, the first up-to-date one that answers otherwise decides, and
// without one every source that is not up to date is asked and any copy
// taken counts.
func TestRefresh(t *testing.T) {
	type reply struct {
		a     Answer
		ready bool
	}
	for _, tc := range []struct {
		name    string
		replies []reply
		want    Answer
		asked   int
	}{
		{"none", nil, Failed, 0},
		{"an up-to-date source takes", []reply{{Took, true}, {Failed, false}}, Took, 1},
		{"an up-to-date source fails and decides", []reply{{Failed, true}, {Took, true}}, Failed, 1},
		{"one behind is passed over", []reply{{Behind, true}, {Took, true}}, Took, 2},
		{"all behind", []reply{{Behind, true}, {Behind, false}}, Behind, 2},
		{"stale copies: any taken counts", []reply{{Took, false}, {Failed, false}}, Took, 2},
		{"stale copies: none taken", []reply{{Failed, false}, {Behind, false}}, Behind, 2},
		{"a stale copy, then an up-to-date failure", []reply{{Took, false}, {Failed, true}}, Failed, 2},
		{"membership says ready, the answer not", []reply{{Failed, false}, {Took, false}}, Took, 2},
		{"one lost, then an up-to-date copy", []reply{{Lost, true}, {Took, true}}, Took, 2},
		{"lost and behind everywhere", []reply{{Behind, true}, {Lost, true}}, Lost, 2},
		{"lost, but a source failed", []reply{{Lost, true}, {Failed, false}}, Failed, 2},
		{"a source failed, then one lost", []reply{{Failed, false}, {Lost, true}}, Behind, 2},
		{"lost, and a stale copy taken", []reply{{Lost, true}, {Took, false}}, Took, 2},
	} {
		asked := 0
		srcs := make([]Source, len(tc.replies))
		for i := range srcs {
			srcs[i] = Source{ID: ring.NodeID(fmt.Sprint(i)), Ready: true} // as membership saw them: the answers count
		}
		got := Refresh(srcs, func(Source) (Answer, bool) {
			r := tc.replies[asked]
			asked++
			return r.a, r.ready
		})
		if got != tc.want || asked != tc.asked {
			t.Errorf("%s: Refresh = %v after %d asked, want %v after %d", tc.name, got, asked, tc.want, tc.asked)
		}
	}
}

func TestMark(t *testing.T) {
	var m Mark[string]
	m = m.Add(0, "staged")
	if m != (Mark[string]{Marks: 1}) {
		t.Fatalf("an undecided commit's mark = %+v", m)
	}
	m = m.Add(7, "b").Add(5, "a")
	if m != (Mark[string]{Version: 7, Txn: "b", Marks: 3}) {
		t.Fatalf("after versions 7 and 5: %+v, want version 7 of b, 3 marks", m)
	}
}

func TestSettle(t *testing.T) {
	up := func(id ring.NodeID) bool { return id != "down" }
	for _, tc := range []struct {
		name        string
		a           Answer
		reps, stale []ring.NodeID
		want        Answer
	}{
		{"all up", Lost, []ring.NodeID{"self", "a"}, []ring.NodeID{"b"}, Lost},
		{"self is not asked", Lost, []ring.NodeID{"self"}, nil, Lost},
		{"a replica down", Lost, []ring.NodeID{"a", "down"}, nil, Behind},
		{"a stale replica down", Lost, []ring.NodeID{"a"}, []ring.NodeID{"down"}, Behind},
		{"other answers stand", Took, []ring.NodeID{"down"}, nil, Took},
	} {
		if got := Settle(tc.a, "self", tc.reps, tc.stale, func(id ring.NodeID) bool { return id == "self" || up(id) }); got != tc.want {
			t.Errorf("%s: Settle = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBehindAnswer(t *testing.T) {
	for _, ready := range []bool{false, true} {
		for _, locked := range []bool{false, true} {
			for _, missed := range []bool{false, true} {
				want := Behind
				if ready && !locked && missed {
					want = Lost
				}
				if got := BehindAnswer(ready, locked, missed); got != want {
					t.Errorf("BehindAnswer(ready %t, locked %t, missed %t) = %v, want %v", ready, locked, missed, got, want)
				}
			}
		}
	}
}

func TestLeftToCopy(t *testing.T) {
	r := Record{Epoch: 5}
	for p := PhaseInstalling; p <= PhaseClean; p++ {
		r.Phase = p
		if !r.LeftToCopy(4) {
			t.Errorf("at %v, the copy of epoch 4 ended: LeftToCopy = false, want true", p)
		}
		if r.LeftToCopy(5) {
			t.Errorf("at %v, the copy of epoch 5 ended: LeftToCopy = true, want false", p)
		}
	}
}
