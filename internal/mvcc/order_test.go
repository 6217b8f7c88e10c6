package mvcc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/txn"
)

func addOp(key string, n uint64) txn.Op {
	return txn.Op{Key: key, Kind: txn.OpAtomic, Offset: 0, Width: 8, Func: txn.FuncAdd, Operand: n}
}

// counterStore returns a store holding an 8-byte zero counter "c", and the
// counter's version.
func counterStore(t *testing.T) (*Store, uint64) {
	t.Helper()
	s := openStore(t, Options{MVCC: true, Now: newFakeClock().Now})
	mustCommit(t, s, txn.Op{Key: "c", Kind: txn.OpWrite, Data: make([]byte, 8), Create: true})
	info, err := s.Stat("c")
	if err != nil {
		t.Fatal(err)
	}
	return s, info.Version
}

func counter(t *testing.T, s *Store) uint64 {
	t.Helper()
	return binary.LittleEndian.Uint64(mustRead(t, s, "c", 0, 8))
}

func TestQueueOrdersAtomicCommits(t *testing.T) {
	for _, first := range []string{"commit", "abort"} {
		t.Run(first, func(t *testing.T) {
			s, v := counterStore(t)
			p1, err := s.TryPrepareAt([]txn.Op{addOp("c", 1)}, v+10)
			if err != nil {
				t.Fatal(err)
			}
			p2, err := s.TryPrepareAt([]txn.Op{addOp("c", 2)}, v+20)
			if err != nil {
				t.Fatalf("an atomic commit above the queued one was refused: %v", err)
			}
			if got := p2.Bases()["c"].Ahead; !slices.Equal(got, []uint64{v + 10}) {
				t.Fatalf("second commit's base names %v ahead, want [%d]", got, v+10)
			}
			if p1.Ready() == false || p2.Ready() {
				t.Fatalf("ready: first %t, second %t; want true, false", p1.Ready(), p2.Ready())
			}
			if err := p2.Commit(); !errors.Is(err, ErrNotReady) {
				t.Fatalf("commit of the second before the first decided: %v, want ErrNotReady", err)
			}
			for _, refused := range []struct {
				name string
				ops  []txn.Op
				v    uint64
			}{
				{"an atomic commit below the last queued version", []txn.Op{addOp("c", 4)}, v + 15},
				{"an append", []txn.Op{{Key: "c", Kind: txn.OpAppend, Data: []byte{9}}}, v + 30},
				{"a write past the end", []txn.Op{{Key: "c", Kind: txn.OpWrite, Offset: 6, Data: []byte{1, 2, 3, 4}}}, v + 30},
				{"a read check", []txn.Op{{Key: "c", Kind: txn.OpReadCheck, Version: v}, addOp("c", 4)}, v + 30},
			} {
				if p, err := s.TryPrepareAt(refused.ops, refused.v); !errors.Is(err, errs.ErrConflict) {
					t.Fatalf("%s joined the queue: %v, %v", refused.name, p, err)
				}
			}
			// The refused append keeps later atomic commits out until the
			// queue drains.
			if p, err := s.TryPrepareAt([]txn.Op{addOp("c", 8)}, v+40); !errors.Is(err, errs.ErrConflict) {
				t.Fatalf("an atomic commit joined after a write was refused: %v, %v", p, err)
			}
			want := uint64(2)
			if first == "commit" {
				if err := p1.Commit(); err != nil {
					t.Fatal(err)
				}
				want = 3
			} else {
				p1.Abort()
			}
			if !p2.Ready() {
				t.Fatal("second commit not ready once the first is decided")
			}
			if err := p2.Commit(); err != nil {
				t.Fatal(err)
			}
			if got := counter(t, s); got != want {
				t.Fatalf("counter %d, want %d", got, want)
			}
			if got := p2.Results()[0].Value; got != want {
				t.Fatalf("second commit's result %d, want the value it left, %d", got, want)
			}
			if info, _ := s.Stat("c"); info.Version != v+20 {
				t.Fatalf("version %d, want %d", info.Version, v+20)
			}
			if n := lockedKeys(s); n != 0 {
				t.Fatalf("%d keys still locked", n)
			}
			// Drained: the write goes through.
			mustCommit(t, s, txn.Op{Key: "c", Kind: txn.OpWrite, Data: []byte{9}})
		})
	}
}

// A blocking locker waits for the queue to drain, and no commit joins
// while it waits.
func TestQueueDrainsForWaiters(t *testing.T) {
	s, v := counterStore(t)
	p1, err := s.TryPrepareAt([]txn.Op{addOp("c", 1)}, v+10)
	if err != nil {
		t.Fatal(err)
	}
	locked := make(chan struct{})
	go func() {
		s.locks.lock([]string{"c"})
		close(locked)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.locks.mu.Lock()
		waiting := s.locks.locks["c"].waiting
		s.locks.mu.Unlock()
		if waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the locker never waited")
		}
		time.Sleep(time.Millisecond)
	}
	if p, err := s.TryPrepareAt([]txn.Op{addOp("c", 2)}, v+20); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("a commit joined the queue while a locker waited: %v, %v", p, err)
	}
	select {
	case <-locked:
		t.Fatal("the locker got the lock while a commit held it")
	default:
	}
	if err := p1.Commit(); err != nil {
		t.Fatal(err)
	}
	<-locked
	s.locks.unlock([]string{"c"})
	if n := lockedKeys(s); n != 0 {
		t.Fatalf("%d keys still locked", n)
	}
}

// A member after the version manager may already have applied the commits
// queued ahead of this one there: its record at one of Base.Ahead is in
// step; any other version is not.
func TestQueueBaseAhead(t *testing.T) {
	s, v := counterStore(t)
	mustCommit(t, s, addOp("c", 1))
	info, err := s.Stat("c")
	if err != nil {
		t.Fatal(err)
	}
	base := Base{Version: v, Size: 8}
	var mismatch *BaseMismatchError
	if p, err := s.TryPrepareStep([]txn.Op{addOp("c", 2)}, Step{Version: info.Version + 10, Bases: map[string]Base{"c": base}}); !errors.As(err, &mismatch) {
		t.Fatalf("record one commit past the base, none ahead: %v, %v; want a BaseMismatchError", p, err)
	}
	base.Ahead = []uint64{info.Version}
	// A store that may have missed commits accepts no version ahead, not
	// even the base itself while commits are queued ahead: it might apply
	// this commit without them.
	for _, b := range []Base{base, {Version: info.Version, Size: 8, Ahead: []uint64{info.Version + 5}}} {
		if p, err := s.TryPrepareStep([]txn.Op{addOp("c", 2)}, Step{Version: info.Version + 10, Bases: map[string]Base{"c": b}, Strict: true}); !errors.As(err, &mismatch) || mismatch.Have > mismatch.Want {
			t.Fatalf("strict, record at %d, base %+v: %v, %v; want a BaseMismatchError showing this store behind", info.Version, b, p, err)
		}
	}
	p, err := s.TryPrepareStep([]txn.Op{addOp("c", 2)}, Step{Version: info.Version + 10, Bases: map[string]Base{"c": base}})
	if err != nil {
		t.Fatalf("record at a version queued ahead: %v", err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, s); got != 3 {
		t.Fatalf("counter %d, want 3", got)
	}
}

// A member in step whose record is at the base, while the version manager
// has commits queued ahead that have not reached this store, refuses the
// commit (ErrAheadUnseen, tried again as locked): applied now it would
// miss them, and if one of them then committed without this store both
// copies would reach one version with different bytes (simulation seed
// 7114). Once they are queued here, it queues behind them.
func TestQueueBaseAheadUnseen(t *testing.T) {
	s, v := counterStore(t)
	base := Base{Version: v, Size: 8, Ahead: []uint64{v + 5}}
	if p, err := s.TryPrepareStep([]txn.Op{addOp("c", 2)}, Step{Version: v + 10, Bases: map[string]Base{"c": base}}); !errors.Is(err, ErrAheadUnseen) || !errors.Is(err, ErrLocked) || !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("a commit queued ahead on the version manager is unseen here: %v, %v; want ErrAheadUnseen", p, err)
	}
	if n := lockedKeys(s); n != 0 {
		t.Fatalf("%d keys still locked after the refusal", n)
	}
	p1, err := s.TryPrepareStep([]txn.Op{addOp("c", 1)}, Step{Version: v + 5, Bases: map[string]Base{"c": {Version: v, Size: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.TryPrepareStep([]txn.Op{addOp("c", 2)}, Step{Version: v + 10, Bases: map[string]Base{"c": base}})
	if err != nil {
		t.Fatalf("the commit ahead is queued here: %v", err)
	}
	if err := errors.Join(p1.Commit(), p2.Commit()); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, s); got != 3 {
		t.Fatalf("counter %d, want 3", got)
	}
}

// A write inside the blob queues like an atomic op; a write that turns out
// to change the size is refused behind others, and holds the blob alone if
// it came first.
func TestQueueBlindWrites(t *testing.T) {
	s, v := counterStore(t)
	p1, err := s.TryPrepareAt([]txn.Op{addOp("c", 1)}, v+10)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.TryPrepareAt([]txn.Op{{Key: "c", Kind: txn.OpWrite, Offset: 1, Data: []byte{7}}}, v+20)
	if err != nil {
		t.Fatalf("a write inside the blob was refused: %v", err)
	}
	if err := errors.Join(p1.Commit(), p2.Commit()); err != nil {
		t.Fatal(err)
	}
	if got, want := counter(t, s), uint64(1+7<<8); got != want {
		t.Fatalf("counter %#x, want %#x", got, want)
	}
	if n := lockedKeys(s); n != 0 {
		t.Fatalf("%d keys still locked", n)
	}

	info, _ := s.Stat("c")
	grow := []txn.Op{{Key: "c", Kind: txn.OpWrite, Offset: 6, Data: []byte{1, 2, 3, 4}}}
	p3, err := s.TryPrepareAt(grow, info.Version+10)
	if err != nil {
		t.Fatalf("a growing write on a free blob: %v", err)
	}
	if p, err := s.TryPrepareAt([]txn.Op{addOp("c", 1)}, info.Version+20); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("an atomic commit queued behind a write that grows the blob: %v, %v", p, err)
	}
	if err := p3.Commit(); err != nil {
		t.Fatal(err)
	}
	if info, _ := s.Stat("c"); info.Size != 10 {
		t.Fatalf("size %d after the growing write, want 10", info.Size)
	}
	if n := lockedKeys(s); n != 0 {
		t.Fatalf("%d keys still locked", n)
	}
}

// Commits that only read-check a blob hold it together; one that changes it
// waits for them, and keeps further readers out until they are done.
func TestReadersShare(t *testing.T) {
	s, v := counterStore(t)
	check := []txn.Op{{Key: "c", Kind: txn.OpReadCheck, Version: v}}
	r1, err := s.TryPrepareAt(check, v+10)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := s.TryPrepareAt(check, v+5)
	if err != nil {
		t.Fatalf("a second read check was refused: %v", err)
	}
	if p, err := s.TryPrepareAt([]txn.Op{addOp("c", 1)}, v+20); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("an atomic commit while readers hold the blob: %v, %v", p, err)
	}
	if p, err := s.TryPrepareAt(check, v+30); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("a reader joined after a writer was refused: %v, %v", p, err)
	}
	if err := errors.Join(r2.Commit(), r1.Commit()); err != nil {
		t.Fatal(err)
	}
	if n := lockedKeys(s); n != 0 {
		t.Fatalf("%d keys still locked", n)
	}
	w, err := s.TryPrepareAt([]txn.Op{addOp("c", 1)}, v+40)
	if err != nil {
		t.Fatalf("the writer after the readers: %v", err)
	}
	if p, err := s.TryPrepareAt(check, v+50); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("a read check while a writer holds the blob: %v, %v", p, err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryPrepareAt(check, v+60); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("a read check of a changed version passed: %v", err)
	}
	if n := lockedKeys(s); n != 0 {
		t.Fatalf("%d keys still locked", n)
	}
}

func TestQueueWaits(t *testing.T) {
	s, v := counterStore(t)
	p1, err := s.TryPrepareAt([]txn.Op{addOp("c", 1)}, v+10)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.TryPrepareAt([]txn.Op{addOp("c", 2)}, v+20)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("version %d behind=true rebased=false; blob \"c\" waiting=0 wanted=false queue %d [%d]", v+20, v+10, v+20)
	if got := p2.Waits(); got != want {
		t.Fatalf("Waits of the second commit:\n got %s\nwant %s", got, want)
	}
	p1.Abort()
	p2.Abort()
}
