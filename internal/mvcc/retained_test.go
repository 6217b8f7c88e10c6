package mvcc

import (
	"slices"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/txn"
)

// TestRetained: Retained lists the history records and the page versions a
// store keeps of a blob, newest first, and the collector's deletions show
// in it.
func TestRetained(t *testing.T) {
	clock := newFakeClock()
	s := openStore(t, Options{MVCC: true, Retention: time.Minute, Linger: time.Second, Now: clock.Now})
	var versions []uint64
	for i := range 3 {
		// Page 0 each time, page 1 only at first.
		ops := []txn.Op{{Key: "b", Kind: txn.OpWrite, Data: []byte{byte(i)}, Create: true}}
		if i == 0 {
			ops = append(ops, txn.Op{Key: "b", Kind: txn.OpWrite, Offset: PageBytes, Data: []byte{9}})
		}
		versions = append(versions, mustCommit(t, s, ops...)[0].Version)
		clock.Advance(time.Millisecond)
	}
	check := func(when string, history, page0 []uint64) {
		t.Helper()
		r, err := s.Retained("b")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.History, history) || !slices.Equal(r.Pages[0], page0) ||
			!slices.Equal(r.Pages[1], versions[:1]) || len(r.Pages) != 2 {
			t.Fatalf("%s: Retained = %+v, want history %v, page 0 %v, page 1 %v", when, r, history, page0, versions[:1])
		}
	}
	v := versions
	check("before collection", []uint64{v[1], v[0]}, []uint64{v[2], v[1], v[0]})
	clock.Advance(2 * time.Second)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	check("after the linger time", nil, []uint64{v[2]})
	if r, err := s.Retained("absent"); err != nil || len(r.History) != 0 || len(r.Pages) != 0 {
		t.Fatalf("Retained of an absent blob = %+v, %v", r, err)
	}
}
