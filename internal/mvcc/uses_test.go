package mvcc

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/txn"
)

// TestVersionUses: a superseded version no transaction uses is collected
// after the linger time; one a transaction uses stays readable until the
// use is released by a commit's read check or lapses after the retention
// (the read timeout); and a read at a collected version fails as a
// conflict.
func TestVersionUses(t *testing.T) {
	const linger, retention = 10 * time.Second, time.Hour
	clock := newFakeClock()
	s := openStore(t, Options{MVCC: true, Retention: retention, Linger: linger, Now: clock.Now})
	write := func(b byte) uint64 {
		t.Helper()
		res := mustCommit(t, s, txn.Op{Key: "k", Kind: txn.OpWrite, Data: bytes.Repeat([]byte{b}, 3*PageBytes), Create: true})
		return res[0].Version
	}
	readable := func(version uint64, b byte) bool {
		t.Helper()
		got, _, err := s.ReadAt("k", 0, 3*PageBytes, version)
		switch {
		case errors.Is(err, errs.ErrConflict):
			return false
		case err != nil:
			t.Fatalf("read at %d: %v", version, err)
		case !bytes.Equal(got, bytes.Repeat([]byte{b}, 3*PageBytes)):
			t.Fatalf("read at %d: %s", version, diff(got, bytes.Repeat([]byte{b}, 3*PageBytes)))
		}
		return true
	}
	collect := func() int {
		t.Helper()
		n, err := s.CollectGarbage()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Unused: kept for the linger time, then collected.
	v1 := write(1)
	v2 := write(2)
	clock.Advance(linger - time.Second)
	if n := collect(); n != 0 || !readable(v1, 1) {
		t.Fatalf("before the linger time: collected %d, version 1 readable %v", n, readable(v1, 1))
	}
	clock.Advance(2 * time.Second)
	if n := collect(); n != 3 || readable(v1, 1) {
		t.Fatalf("after the linger time: collected %d pages, want 3; version 1 readable %v", n, readable(v1, 1))
	}

	// In use: kept past the linger time, until released.
	info, release, err := s.Pin("k", 0, true)
	if err != nil || info.Version != v2 {
		t.Fatalf("pin: %+v %v, want version %d", info, err, v2)
	}
	release()
	if u := s.InUseOf("k"); u.Oldest != v2 || u.Until != clock.Now().Add(retention).UnixNano() {
		t.Fatalf("in use: %+v, want oldest %d until now+retention", u, v2)
	}
	v3 := write(3)
	write(4)
	clock.Advance(3 * linger)
	collect()
	if !readable(v2, 2) || !readable(v3, 3) {
		t.Fatal("a version in use, or one between it and the current, was collected")
	}
	// The transaction's commit carries its read check: whatever its
	// outcome (here a conflict), the use ends.
	if _, err := commit(s, txn.Op{Key: "k", Kind: txn.OpReadCheck, Version: v2}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("stale read check: %v, want a conflict", err)
	}
	if u := s.InUseOf("k"); u != (InUse{}) {
		t.Fatalf("in use after the read check: %+v", u)
	}
	clock.Advance(linger + time.Second)
	collect()
	if readable(v2, 2) || readable(v3, 3) {
		t.Fatal("released versions still readable a linger time later")
	}

	// A use never released lapses after the retention.
	_, release, err = s.Pin("k", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	release()
	v5 := write(5)
	write(6)
	clock.Advance(retention - time.Minute)
	collect()
	if !readable(v5, 5) {
		t.Fatal("an unreleased use's successor collected before the retention")
	}
	clock.Advance(2 * time.Minute)
	collect()
	if readable(v5, 5) {
		t.Fatal("a lapsed use still kept its version")
	}
	if got := mustRead(t, s, "k", 0, 3*PageBytes); !bytes.Equal(got, bytes.Repeat([]byte{6}, 3*PageBytes)) {
		t.Fatalf("current content: %s", diff(got, bytes.Repeat([]byte{6}, 3*PageBytes)))
	}
}

// TestUsesSummary: the summary a version manager hands on merges its own
// uses with the one it was handed, drops what lapsed, and a holder's noted
// summary is replaced by the next one.
func TestUsesSummary(t *testing.T) {
	now := time.Unix(1000, 0)
	var u uses
	u.add("k", 7, now.Add(time.Minute))
	u.add("k", 5, now.Add(time.Second))
	u.add("k", 5, now.Add(2*time.Second))
	if got := u.of("k", now); got != (InUse{Oldest: 5, Until: now.Add(time.Minute).UnixNano()}) {
		t.Fatalf("local: %+v", got)
	}
	u.release("k", 5)
	if got := u.of("k", now); got.Oldest != 5 {
		t.Fatalf("one of two uses of 5 released: %+v", got)
	}
	u.release("k", 5)
	if got := u.of("k", now); got.Oldest != 7 {
		t.Fatalf("both uses of 5 released: %+v", got)
	}
	u.note("k", InUse{Oldest: 3, Until: now.Add(time.Hour).UnixNano()})
	if got := u.of("k", now); got != (InUse{Oldest: 3, Until: now.Add(time.Hour).UnixNano()}) {
		t.Fatalf("merged with a noted summary: %+v", got)
	}
	u.note("k", InUse{})
	if got := u.of("k", now.Add(2*time.Minute)); got != (InUse{}) {
		t.Fatalf("after the noted summary was cleared and the local use lapsed: %+v", got)
	}
	u.release("nothing", 1) // releasing what is not counted leaves the rest
	if got := u.of("k", now); got != (InUse{}) {
		t.Fatalf("after releasing an uncounted use: %+v", got)
	}
}

// TestUsesReachHolders: a holder of a blob's chunk, which serves no
// transaction's first read, keeps a version the version manager has in use,
// learned from the Base of the next commit, and collects it once a later
// commit's Base shows the use released.
func TestUsesReachHolders(t *testing.T) {
	const cs, linger = 4 << 10, 10 * time.Second
	clock := newFakeClock()
	opts := Options{MVCC: true, Now: clock.Now, ChunkBytes: cs, Linger: linger}
	vm := member{openStore(t, opts), chunksOf{manages: true, held: map[uint64]bool{0: true}}}
	h := member{openStore(t, opts), chunksOf{held: map[uint64]bool{1: true}}}
	write := func(b byte) uint64 {
		t.Helper()
		res, err := chainCommit(t, []txn.Op{{Key: "k", Kind: txn.OpWrite, Data: bytes.Repeat([]byte{b}, 2*cs), Create: true}}, 0, vm, h)
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Version
	}
	heldAt := func(version uint64) error {
		t.Helper()
		got, err := h.s.ReadChunks("k", cs, cs, version, 2*cs, 0)
		if err == nil && !bytes.Equal(got, bytes.Repeat([]byte{byte(got[0])}, cs)) {
			t.Fatalf("chunk 1 at %d mixes bytes", version)
		}
		return err
	}
	collect := func() {
		t.Helper()
		clock.Advance(linger + time.Second)
		if _, err := h.s.CollectGarbage(); err != nil {
			t.Fatal(err)
		}
	}
	v1 := write(1)
	if _, release, err := vm.s.Pin("k", 0, true); err != nil {
		t.Fatal(err)
	} else {
		release()
	}
	write(2)
	collect()
	if err := heldAt(v1); err != nil {
		t.Fatalf("holder collected a version in use on the version manager: %v", err)
	}
	if _, err := chainCommit(t, []txn.Op{{Key: "k", Kind: txn.OpReadCheck, Version: v1}}, 0, vm, h); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("stale read check: %v", err)
	}
	write(3)
	collect()
	if err := heldAt(v1); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("holder read at a released, collected version: %v, want a conflict", err)
	}
}
