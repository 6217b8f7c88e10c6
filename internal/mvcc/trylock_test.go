package mvcc

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/txn"
)

func writeOp(key, data string) txn.Op {
	return txn.Op{Key: key, Kind: txn.OpWrite, Data: []byte(data), Create: true}
}

// lockedKeys is how many keys the lock table tracks: held or waited for.
func lockedKeys(s *Store) int {
	s.locks.mu.Lock()
	defer s.locks.mu.Unlock()
	return len(s.locks.locks)
}

func readString(t *testing.T, s *Store, key string) string {
	t.Helper()
	b, _, err := s.Read(key, 0, 1<<10)
	if errors.Is(err, errs.ErrNotFound) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTryPrepareConflict(t *testing.T) {
	for _, finish := range []string{"commit", "abort"} {
		t.Run(finish, func(t *testing.T) {
			s := openStore(t, Options{MVCC: true, Now: newFakeClock().Now})
			if _, err := commit(s, writeOp("b", "old")); err != nil {
				t.Fatal(err)
			}
			held, err := s.Prepare([]txn.Op{writeOp("b", "new")})
			if err != nil {
				t.Fatal(err)
			}
			// The locked key sorts in the middle: "a" is taken first and
			// must be released, "c" is never reached.
			for _, ops := range [][]txn.Op{
				{writeOp("b", "try")},
				{writeOp("c", "try"), writeOp("a", "try"), writeOp("b", "try")},
			} {
				p, err := s.TryPrepare(ops)
				if !errors.Is(err, errs.ErrConflict) {
					t.Fatalf("TryPrepare of %d ops with b locked: %v, %v; want ErrConflict", len(ops), p, err)
				}
			}
			if _, err := (Stager{Store: s}).Prepare(chain.TxnID{}, []txn.Op{writeOp("b", "try")}); !errors.Is(err, errs.ErrConflict) {
				t.Fatalf("Stager.Prepare with b locked: %v; want ErrConflict", err)
			}
			if n := lockedKeys(s); n != 1 {
				t.Fatalf("after the refused TryPrepares the lock table tracks %d keys, want 1 (b)", n)
			}
			for key, want := range map[string]string{"a": "<absent>", "b": "old", "c": "<absent>"} {
				if got := readString(t, s, key); got != want {
					t.Fatalf("after the refused TryPrepares %s = %q, want %q", key, got, want)
				}
			}
			// Keys other than b are free: a TryPrepare on them succeeds.
			p, err := s.TryPrepare([]txn.Op{writeOp("a", "x"), writeOp("c", "x")})
			if err != nil {
				t.Fatalf("TryPrepare of a and c beside the held b: %v", err)
			}
			p.Abort()

			want := "old"
			if finish == "commit" {
				if err := held.Commit(); err != nil {
					t.Fatal(err)
				}
				want = "new"
			} else {
				held.Abort()
			}
			if got := readString(t, s, "b"); got != want {
				t.Fatalf("b = %q after %s, want %q", got, finish, want)
			}
			staged, err := (Stager{Store: s}).Prepare(chain.TxnID{}, []txn.Op{{Key: "b", Kind: txn.OpAppend, Data: []byte("+")}})
			if err != nil {
				t.Fatalf("Stager.Prepare after %s: %v", finish, err)
			}
			if r := staged.Results(); len(r) != 1 || r[0].Offset != uint64(len(want)) {
				t.Fatalf("results %+v, want one append at %d", r, len(want))
			}
			if err := staged.Commit(staged.Results()); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, s, "b"); got != want+"+" {
				t.Fatalf("b = %q, want %q", got, want+"+")
			}
			if n := lockedKeys(s); n != 0 {
				t.Fatalf("lock table tracks %d keys at rest", n)
			}
		})
	}
}

// TestTryPrepareInvalid checks that an invalid commit is refused before any
// lock is taken.
func TestTryPrepareInvalid(t *testing.T) {
	s := openStore(t, Options{})
	if _, err := s.TryPrepare(nil); err == nil {
		t.Fatal("TryPrepare of no ops succeeded")
	}
	if _, err := s.TryPrepare([]txn.Op{{Key: "a", Kind: txn.OpTruncate, Size: 1}}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("truncate of a missing blob: %v, want ErrNotFound", err)
	}
	if n := lockedKeys(s); n != 0 {
		t.Fatalf("lock table tracks %d keys after refusals", n)
	}
}

// TestTryPrepareStress mixes blocking and non-blocking commits of counter
// increments on overlapping keys. Every commit that went through must be
// counted exactly once, and no lock may be left behind.
func TestTryPrepareStress(t *testing.T) {
	s := openStore(t, Options{MVCC: true})
	keys := []string{"k0", "k1", "k2", "k3"}
	for _, k := range keys {
		if _, err := commit(s, txn.Op{Key: k, Kind: txn.OpCreate}); err != nil {
			t.Fatal(err)
		}
	}
	const workers, rounds = 8, 200
	committed := make([]atomic.Int64, len(keys))
	var conflicts atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				a, b := (w+i)%len(keys), (w*3+i*7)%len(keys)
				ops := []txn.Op{{Key: keys[a], Kind: txn.OpAtomic, Width: 8, Func: txn.FuncAdd, Operand: 1}}
				if b != a {
					ops = append(ops, txn.Op{Key: keys[b], Kind: txn.OpAtomic, Width: 8, Func: txn.FuncAdd, Operand: 1})
				}
				var p *Pending
				var err error
				if w%4 == 0 {
					p, err = s.Prepare(ops)
				} else {
					p, err = s.TryPrepare(ops)
				}
				if errors.Is(err, errs.ErrConflict) && w%4 != 0 {
					conflicts.Add(1)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 {
					p.Abort()
					continue
				}
				if err := p.Commit(); err != nil {
					t.Error(err)
					return
				}
				committed[a].Add(1)
				if b != a {
					committed[b].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for i, k := range keys {
		b, _, err := s.Read(k, 0, 8)
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		for j := len(b) - 1; j >= 0; j-- {
			got = got<<8 | int64(b[j])
		}
		if want := committed[i].Load(); got != want {
			t.Errorf("%s = %d, want %d committed increments", k, got, want)
		}
	}
	if n := lockedKeys(s); n != 0 {
		t.Errorf("lock table tracks %d keys at rest", n)
	}
	t.Logf("%d TryPrepare conflicts", conflicts.Load())
}

// TryPrepareAt stores the caller's version, and refuses one that is not
// above the blob's newest (or, for a new blob, the newest removed here),
// changing nothing.
func TestTryPrepareAtPinsVersions(t *testing.T) {
	s := openStore(t, Options{MVCC: true})
	commitAt := func(version uint64, ops ...txn.Op) ([]txn.Result, error) {
		p, err := s.TryPrepareAt(ops, version)
		if err != nil {
			return nil, err
		}
		return p.Results(), p.Commit()
	}
	res, err := commitAt(1000, writeOp("a", "one"))
	if err != nil || res[0].Version != 1000 {
		t.Fatalf("first commit: %v, %v; want version 1000", res, err)
	}
	var stale *StaleVersionError
	if _, err := commitAt(1000, writeOp("a", "two")); !errors.As(err, &stale) || stale.Floor != 1000 ||
		!errors.Is(err, errs.ErrConflict) {
		t.Fatalf("same version again: %v; want a StaleVersionError with floor 1000", err)
	}
	if got := readString(t, s, "a"); got != "one" {
		t.Fatalf("a refused commit changed the blob: %q", got)
	}
	// Creates of different blobs do not order each other: a new blob may
	// take a version below one another blob has.
	if res, err := commitAt(900, writeOp("b", "new")); err != nil || res[0].Version != 900 {
		t.Fatalf("a new blob below another blob's version: %v, %v; want it committed at 900", res, err)
	}
	if res, err := commitAt(1001, writeOp("a", "two"), writeOp("b", "newer")); err != nil ||
		res[0].Version != 1001 || res[1].Version != 1001 {
		t.Fatalf("commit at 1001: %v, %v", res, err)
	}
	// A blob removed here raises the floor of every blob without a record
	// to the removing commit's version, so a re-created blob's versions
	// keep increasing and its page keys stay unique.
	if _, err := commitAt(1100, txn.Op{Key: "b", Kind: txn.OpDelete}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"b", "d"} {
		if _, err := commitAt(1050, writeOp(key, "again")); !errors.As(err, &stale) || stale.Floor != 1100 {
			t.Fatalf("creating %q at 1050 after a delete at 1100: %v; want refused with floor 1100", key, err)
		}
	}
	if res, err := commitAt(1101, writeOp("b", "again")); err != nil || res[0].Version != 1101 {
		t.Fatalf("re-create at 1101: %v, %v", res, err)
	}
	// Clock-drawn versions stay above every accepted one.
	if res := mustCommit(t, s, writeOp("c", "x")); res[0].Version <= 1101 {
		t.Fatalf("clock version %d not above the accepted 1101", res[0].Version)
	}
	// A locked blob is refused as ErrLocked.
	p, err := s.TryPrepare([]txn.Op{writeOp("a", "held")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryPrepareAt([]txn.Op{writeOp("a", "x")}, 5000); !errors.Is(err, ErrLocked) {
		t.Fatalf("locked blob: %v; want ErrLocked", err)
	}
	p.Abort()
}
