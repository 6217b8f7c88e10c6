package rebalance

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/tyrstore/tyr/internal/ring"
)

func nodes(ids ...string) []ring.Node {
	var out []ring.Node
	for _, id := range ids {
		out = append(out, ring.Node{ID: ring.NodeID(id), Weight: 1})
	}
	return out
}

func mustRing(t *testing.T, epoch uint64, ns []ring.Node) *ring.Ring {
	t.Helper()
	r, err := ring.New(ring.Config{}, epoch, ns)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func allAlive(ring.NodeID) bool { return true }

func TestCoordinatorLowestAliveEligible(t *testing.T) {
	cands := []Candidate{
		{ID: "n3", Alive: true, Eligible: true},
		{ID: "n1", Alive: false, Eligible: true},
		{ID: "n0", Alive: true, Eligible: false}, // being removed
		{ID: "n2", Alive: true, Eligible: true},
	}
	for range 10 { // any order
		id, ok := Coordinator(cands)
		if !ok || id != "n2" {
			t.Fatalf("coordinator %q %v, want n2", id, ok)
		}
		slices.Reverse(cands)
	}
	if _, ok := Coordinator([]Candidate{{ID: "a"}}); ok {
		t.Fatal("a dead member was chosen")
	}
}

func TestProposeRules(t *testing.T) {
	first, err := First("n1", nodes("n3", "n1", "n2"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(first.New, compareNodes) || first.Moving() || !first.ReadsNew() {
		t.Fatalf("first record %+v", first)
	}
	if _, err := Propose(first, "n1", nodes("n1", "n2", "n3"), 3); !errors.Is(err, ErrUnchanged) {
		t.Fatalf("unchanged ring: %v", err)
	}
	if _, err := Propose(first, "n1", nodes("n1", "n2"), 3); !errors.Is(err, ErrTooFewNodes) {
		t.Fatalf("removal below rf: %v", err)
	}
	next, err := Propose(first, "n1", nodes("n1", "n2", "n3", "n4", "n5"), 3)
	if err != nil {
		t.Fatal(err)
	}
	if next.Epoch != 2 || next.Phase != PhaseInstalling || !next.Moving() || next.ReadsNew() {
		t.Fatalf("proposal %+v", next)
	}
	if _, err := Propose(next, "n1", nodes("n1", "n2", "n3", "n4"), 3); !errors.Is(err, ErrBusy) {
		t.Fatalf("proposal during a change: %v", err)
	}
	// A join: only the newcomers gain.
	var to []ring.NodeID
	for _, m := range next.Moves {
		to = append(to, m.To)
	}
	if !slices.Equal(to, []ring.NodeID{"n4", "n5"}) {
		t.Fatalf("moves to %v, want [n4 n5]", to)
	}
}

// TestMovesMatchSampledCopies checks the exact Shares against placing many
// chunks: each chunk's new replicas that were not old ones.
func TestMovesMatchSampledCopies(t *testing.T) {
	for _, tc := range []struct {
		old, new []ring.Node
		rf       int
	}{
		{nodes("a", "b", "c"), nodes("a", "b", "c", "d", "e"), 3},
		{nodes("a", "b", "c", "d", "e"), nodes("a", "b", "c"), 3},
		{nodes("a", "b", "c", "d"), nodes("a", "b", "c", "e"), 2},
		{nodes("a", "b"), nodes("a", "b", "c"), 3},
	} {
		t.Run(fmt.Sprintf("%d-%d-rf%d", len(tc.old), len(tc.new), tc.rf), func(t *testing.T) {
			old, new := mustRing(t, 1, tc.old), mustRing(t, 2, tc.new)
			moves := Moves(old, new, tc.rf)
			const samples = 40000
			count := map[ring.NodeID]int{}
			var chunks []Chunk
			for i := range samples {
				key := fmt.Sprintf("k%d", i)
				was, _ := old.Replicas(7, key, 0, min(tc.rf, old.Len()))
				now, _ := new.Replicas(7, key, 0, min(tc.rf, new.Len()))
				for _, id := range now {
					if !slices.Contains(was, id) {
						count[id]++
					}
				}
				chunks = append(chunks, Chunk{Seed: 7, Key: key, Bytes: 1, Replication: min(tc.rf, new.Len())})
			}
			var total float64
			for _, m := range moves {
				got := float64(count[m.To]) / samples
				if math.Abs(got-m.Share) > 0.02 {
					t.Errorf("move to %s: share %.4f, sampled %.4f", m.To, m.Share, got)
				}
				total += m.Share
				delete(count, m.To)
			}
			if len(count) > 0 {
				t.Errorf("sampled copies to nodes without a move: %v", count)
			}
			min, err := MinimumCopies(old, new, chunks)
			if err != nil {
				t.Fatal(err)
			}
			if got := float64(min) / samples; math.Abs(got-total) > 0.02 {
				t.Errorf("MinimumCopies %.4f per chunk, moves sum to %.4f", got, total)
			}
		})
	}
}

// TestAdvanceOrder drives an epoch through its phases and checks that no
// phase is skipped or entered early.
func TestAdvanceOrder(t *testing.T) {
	first, _ := First("n1", nodes("n1", "n2", "n3"))
	r, err := Propose(first, "n1", nodes("n1", "n2", "n4"), 2) // n3 leaves, n4 joins
	if err != nil {
		t.Fatal(err)
	}
	acks := map[ring.NodeID]Ack{}
	ackAll := func(except ...ring.NodeID) {
		for _, id := range r.Members() {
			if !slices.Contains(except, id) {
				a := acks[id]
				a.Epoch, a.Phase = r.Epoch, r.Phase
				acks[id] = a
			}
		}
	}
	// Nothing advances without every required ack.
	ackAll("n4")
	if got, changed := Advance(r, acks, allAlive, allAlive); changed || got.Phase != PhaseInstalling {
		t.Fatalf("advanced without n4's ack: %v", got.Phase)
	}
	ackAll()
	r, _ = Advance(r, acks, allAlive, allAlive)
	if r.Phase != PhaseCopying {
		t.Fatalf("phase %v, want copying", r.Phase)
	}
	ackAll()
	if got, _ := Advance(r, acks, allAlive, allAlive); got.Phase != PhaseCopying {
		t.Fatalf("left copying with moves not copied: %v", got.Phase)
	}
	for _, m := range r.Moves {
		a := acks[m.To]
		a.Copied = true
		acks[m.To] = a
	}
	r, _ = Advance(r, acks, allAlive, allAlive)
	if r.Phase != PhaseSwitching || slices.ContainsFunc(r.Moves, func(m Move) bool { return !m.Copied }) {
		t.Fatalf("after copies: %+v", r)
	}
	if !r.Moving() || !r.ReadsNew() {
		t.Fatal("switching must write to both rings and read the new one")
	}
	ackAll()
	// Writes stay on the old owners, and they keep their data, while a
	// new owner is down or catching up (docs/bugs.md row 43).
	newcomer := r.Moves[0].To
	notNewcomer := func(id ring.NodeID) bool { return id != newcomer }
	if got, _ := Advance(r, acks, allAlive, notNewcomer); got.Phase != PhaseSwitching {
		t.Fatalf("left switching with %s catching up: %v", newcomer, got.Phase)
	}
	if got, _ := Advance(r, acks, notNewcomer, allAlive); got.Phase != PhaseSwitching {
		t.Fatalf("left switching with %s down: %v", newcomer, got.Phase)
	}
	r, _ = Advance(r, acks, allAlive, allAlive)
	if r.Phase != PhaseActive || r.Moving() {
		t.Fatalf("phase %v moving %v", r.Phase, r.Moving())
	}
	// Cleanup waits for every node to have installed Active.
	ackAll("n2")
	if got, _ := Advance(r, acks, allAlive, allAlive); got.Phase != PhaseActive {
		t.Fatal("clean before n2 acknowledged active")
	}
	ackAll()
	// ... and for each to have drained it: a commit chained before
	// Active may be staged, or not yet durable, on a new owner.
	if got, _ := Advance(r, acks, allAlive, allAlive); got.Phase != PhaseActive {
		t.Fatal("clean before any member drained active")
	}
	for _, id := range r.Members() {
		a := acks[id]
		a.Drained = id != "n2"
		acks[id] = a
	}
	if got, _ := Advance(r, acks, allAlive, allAlive); got.Phase != PhaseActive {
		t.Fatal("clean before n2 drained active")
	}
	a := acks["n2"]
	a.Drained = true
	acks["n2"] = a
	if got, _ := Advance(r, acks, allAlive, notNewcomer); got.Phase != PhaseActive {
		t.Fatalf("clean with %s catching up: %v", newcomer, got.Phase)
	}
	r, _ = Advance(r, acks, allAlive, allAlive)
	if r.Phase != PhaseClean {
		t.Fatalf("phase %v", r.Phase)
	}
	if _, changed := Advance(r, acks, allAlive, allAlive); changed {
		t.Fatal("a clean record advanced")
	}
	// A dead member is not waited for, neither being removed nor new.
	r2, _ := Propose(r, "n1", nodes("n1", "n2"), 2)
	acks2 := map[ring.NodeID]Ack{"n1": {Epoch: r2.Epoch, Phase: r2.Phase}, "n2": {Epoch: r2.Epoch, Phase: r2.Phase}}
	deadN4 := func(id ring.NodeID) bool { return id != "n4" }
	if got, _ := Advance(r2, acks2, deadN4, allAlive); got.Phase != PhaseCopying {
		t.Fatalf("waited for a dead leaving node: %v", got.Phase)
	}
	r3, _ := Propose(r, "n1", nodes("n1", "n2", "n4", "n5"), 2)
	r3.Phase = PhaseCopying
	acks3 := map[ring.NodeID]Ack{}
	for _, id := range []ring.NodeID{"n1", "n2", "n4"} {
		acks3[id] = Ack{Epoch: r3.Epoch, Phase: r3.Phase, Copied: true}
	}
	if got, _ := Advance(r3, acks3, allAlive, allAlive); got.Phase != PhaseCopying {
		t.Fatal("advanced without an alive new member's ack and copy")
	}
	// A new member down still holds the copy: it may be the only new
	// owner of a range (docs/bugs.md row 43).
	deadN5 := func(id ring.NodeID) bool { return id != "n5" }
	if got, _ := Advance(r3, acks3, deadN5, allAlive); got.Phase != PhaseCopying {
		t.Fatalf("switched reads without a dead new member's copy: %v", got.Phase)
	}
	acks3["n5"] = Ack{Epoch: r3.Epoch, Phase: r3.Phase, Copied: true}
	if got, _ := Advance(r3, acks3, deadN5, allAlive); got.Phase != PhaseSwitching {
		t.Fatalf("a new member that copied, then went down: %v, want switching", got.Phase)
	}
}

// TestPlacementDuringMove checks that every phase writes to every node
// that any node in an adjacent phase reads from: a reader never meets an
// owner that missed a write acknowledged under a neighbouring phase.
func TestPlacementDuringMove(t *testing.T) {
	first, _ := First("a", nodes("a", "b", "c"))
	r, err := Propose(first, "a", nodes("a", "b", "c", "d", "e"), 3)
	if err != nil {
		t.Fatal(err)
	}
	const rf = 3
	var records []Record
	for p := PhaseInstalling; p <= PhaseClean; p++ {
		c := r
		c.Phase = p
		records = append(records, c)
	}
	pls := make([]Placement, len(records))
	for i, rec := range records {
		pl, err := rec.Rings(ring.Config{})
		if err != nil {
			t.Fatal(err)
		}
		pls[i] = pl
	}
	// A node taking writes without serving reads gains the chunk until
	// Switching; from then on it gives it up.
	for i, rec := range records {
		if got, want := pls[i].Gains(), rec.Phase < PhaseSwitching; got != want {
			t.Fatalf("at %v Gains() = %v, want %v", rec.Phase, got, want)
		}
	}
	oldRing := mustRing(t, 1, first.New)
	for k := range 2000 {
		key := fmt.Sprintf("blob%d", k)
		for i := range records {
			writes, err := pls[i].Replicas(9, key, 0, rf)
			if err != nil {
				t.Fatal(err)
			}
			// Neighbours: nodes one phase apart coexist.
			for j := max(0, i-1); j <= min(len(records)-1, i+1); j++ {
				reads, _ := pls[j].Read.Replicas(9, key, 0, rf)
				// A reader reads from new owners only once they were
				// copied (Switching or later), so from Copying on only
				// the read ring needs the write.
				for _, id := range reads {
					if !slices.Contains(writes, id) {
						t.Fatalf("%s: a write at %v misses %s, read by a node at %v", key, records[i].Phase, id, records[j].Phase)
					}
				}
			}
		}
		// Until Switching, reads stay on the old owners.
		for i := range 2 {
			reads, _ := pls[i].Read.Replicas(9, key, 0, rf)
			want, _ := oldRing.Replicas(9, key, 0, rf)
			if !slices.Equal(reads, want) {
				t.Fatalf("%s at %v reads %v, want old owners %v", key, records[i].Phase, reads, want)
			}
		}
	}
}

func TestRecordValidate(t *testing.T) {
	first, _ := First("a", nodes("a", "b"))
	bad := first
	bad.Phase = PhaseCopying
	if bad.Validate() == nil {
		t.Fatal("a first ring that moves was accepted")
	}
	r, _ := Propose(first, "a", nodes("a", "b", "c"), 1)
	r.Moves = append(r.Moves, Move{To: "zz"})
	if r.Validate() == nil {
		t.Fatal("a move to a non-member was accepted")
	}
	if !r.Newer(first) || first.Newer(r) {
		t.Fatal("Newer")
	}
}

// TestDrain checks a member's drain of Active: done only once every
// commit it held staged when it began has finished, and a sync covered the
// writes made until the last of them finished.
func TestDrain(t *testing.T) {
	var d Drain[string]
	if _, done := d.Drained(func(uint64) bool { return true }); done {
		t.Fatal("a drain never begun is done")
	}
	staged := map[string]bool{"a": true, "b": true}
	active := func(epoch uint64) Record {
		return Record{Epoch: epoch, Phase: PhaseActive, Old: nodes("n1"), New: nodes("n1", "n2")}
	}
	clean := active(4)
	clean.Phase = PhaseClean
	d.Begin(clean, func() []string { t.Fatal("began a drain of a clean epoch"); return nil })
	d.Begin(Record{Epoch: 4, Phase: PhaseActive, New: nodes("n1")}, func() []string { t.Fatal("began a drain of a first ring"); return nil })
	d.Begin(active(4), func() []string { return []string{"a", "b"} })
	d.Begin(active(4), func() []string { t.Fatal("began epoch 4 twice"); return nil })
	synced := uint64(0)
	covers := func(m uint64) bool { return synced >= m }
	d.Step(func(k string) bool { return staged[k] }, 10)
	delete(staged, "a")
	d.Step(func(k string) bool { return staged[k] }, 11)
	if !d.Waiting() {
		t.Fatal("stopped waiting with b still staged")
	}
	synced = 20
	if _, done := d.Drained(covers); done {
		t.Fatal("done with b still staged")
	}
	delete(staged, "b")
	d.Step(func(k string) bool { return staged[k] }, 25) // b's commit is write 25
	if d.Waiting() {
		t.Fatal("waiting with nothing staged")
	}
	if _, done := d.Drained(covers); done {
		t.Fatal("done before a sync covered the last commit's write")
	}
	synced = 25
	if e, done := d.Drained(covers); !done || e != 4 {
		t.Fatalf("Drained = %d, %t; want 4, true", e, done)
	}
	d.Step(func(string) bool { t.Fatal("stepped a finished drain"); return false }, 30)
	d.Begin(active(3), func() []string { t.Fatal("began an older epoch"); return nil })
	d.Begin(active(5), func() []string { return nil })
	if e, done := d.Drained(covers); done || e != 5 {
		t.Fatalf("Drained after Begin(5) = %d, %t; want 5, false", e, done)
	}
	d.Step(func(string) bool { return false }, 26)
	if _, done := d.Drained(covers); done {
		t.Fatal("done before a sync covered the mark")
	}
}
