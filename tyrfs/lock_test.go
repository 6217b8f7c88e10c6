package tyrfs

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/fslock"
)

// TestLocks checks advisory locks through the native API: conflicts
// between holders, a lease that ends, a renewal, the errors of bad
// input, and that the table's blob goes with the last lock.
func TestLocks(t *testing.T) {
	ctx, c, f := newFS(t)
	must[Attr](t)(f.WriteFile(ctx, "/f", Owner{Mode: 0o644}, []byte("data")))
	lease := func(d time.Duration) int64 { return time.Now().Add(d).UnixNano() }
	a := Lock{Holder: 1, Owner: 7, Write: true, Start: 0, End: 99, Pid: 42, Expires: lease(time.Hour)}
	if _, held, err := f.SetLock(ctx, "/f", a, false); err != nil || !held {
		t.Fatalf("take: held %v, %v", held, err)
	}
	b := Lock{Holder: 2, Owner: 7, Start: 50, End: 50, Expires: lease(time.Hour)}
	c1, _, err := f.SetLock(ctx, "/f", b, false)
	wantErrno(t, err, syscall.EAGAIN)
	if c1.Holder != 1 || c1.Start != 0 || c1.End != 99 || !c1.Write || c1.Pid != 42 {
		t.Fatalf("conflict reported: %+v", c1)
	}
	if got, ok, err := f.GetLock(ctx, "/f", b); err != nil || !ok || got.Holder != 1 {
		t.Fatalf("GetLock: %+v, %v, %v", got, ok, err)
	}
	// Beside the lock, and of the other kind, b is free.
	b.Start, b.End = 100, 199
	if _, _, err := f.SetLock(ctx, "/f", b, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.SetLock(ctx, "/f", Lock{Holder: 2, Owner: 8, Flock: true, Write: true, Expires: lease(time.Hour)}, false); err != nil {
		t.Fatalf("a flock lock conflicts with record locks: %v", err)
	}
	// a's unlock of part of its range frees it for b.
	if _, held, err := f.SetLock(ctx, "/f", Lock{Holder: 1, Owner: 7, Start: 40, End: 60}, true); err != nil || !held {
		t.Fatalf("partial unlock: held %v, %v", held, err)
	}
	b.Start, b.End, b.Write = 50, 50, true
	if _, _, err := f.SetLock(ctx, "/f", b, false); err != nil {
		t.Fatalf("after a's partial unlock: %v", err)
	}

	// A lease that ends frees the lock without its holder; a renewed one
	// does not.
	short := Lock{Holder: 3, Owner: 1, Write: true, Start: 1000, End: 1000, Expires: lease(300 * time.Millisecond)}
	if _, _, err := f.SetLock(ctx, "/f", short, false); err != nil {
		t.Fatal(err)
	}
	if n, err := f.RenewLocks(ctx, "/f", 3, lease(time.Hour)); err != nil || n != 1 {
		t.Fatalf("renew: %d locks, %v", n, err)
	}
	other := Lock{Holder: 4, Owner: 1, Start: 1000, End: 1000, Expires: lease(time.Hour)}
	time.Sleep(400 * time.Millisecond)
	_, _, err = f.SetLock(ctx, "/f", other, false)
	wantErrno(t, err, syscall.EAGAIN)
	if _, _, err := f.SetLock(ctx, "/f", Lock{Holder: 5, Owner: 1, Write: true, Start: 2000, End: 2000, Expires: lease(200 * time.Millisecond)}, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n, err := f.RenewLocks(ctx, "/f", 5, lease(time.Hour)); err != nil || n != 0 {
		t.Fatalf("renewed a lock whose lease ended: %d, %v", n, err)
	}
	if _, _, err := f.SetLock(ctx, "/f", Lock{Holder: 4, Owner: 1, Write: true, Start: 2000, End: 2000, Expires: lease(time.Hour)}, false); err != nil {
		t.Fatalf("the lock whose lease ended still holds: %v", err)
	}

	// An unlock of what is not held is no error, and makes no table.
	must[Attr](t)(f.WriteFile(ctx, "/g", Owner{Mode: 0o644}, nil))
	if _, held, err := f.SetLock(ctx, "/g", Lock{Holder: 1, Owner: 1, End: LockOffsetMax}, true); err != nil || held {
		t.Fatalf("unlock of a file never locked: held %v, %v", held, err)
	}
	if _, err := c.Stat(ctx, "tfs", fslayout.LockKey("/g")); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("an unlock made a table: %v", err)
	}

	// Bad input changes nothing.
	_, _, err = f.SetLock(ctx, "/missing", a, false)
	wantErrno(t, err, syscall.ENOENT)
	_, _, err = f.SetLock(ctx, "/f", Lock{Holder: 9, Start: 5, End: 4, Expires: lease(time.Hour)}, false)
	wantErrno(t, err, syscall.EINVAL)
	_, _, err = f.SetLock(ctx, "/f", Lock{Holder: 9, End: LockOffsetMax + 1, Expires: lease(time.Hour)}, false)
	wantErrno(t, err, syscall.EINVAL)
	if _, err := c.Stat(ctx, "tfs", fslayout.LockKey("/missing")); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a refused lock made a table: %v", err)
	}

	// Once every holder gave its locks up, the table's blob is gone.
	for h := range uint64(6) {
		if err := f.DropLocks(ctx, "/f", h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Stat(ctx, "tfs", fslayout.LockKey("/f")); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the table of a file with no lock: %v", err)
	}
	checkTree(t, ctx, c, f)
}

// TestLockExclusion has holders race for one write lock: at most one
// holds it at any time, and each gets it in turn.
func TestLockExclusion(t *testing.T) {
	ctx, _, f := newFS(t)
	must[Attr](t)(f.WriteFile(ctx, "/f", Owner{Mode: 0o644}, nil))
	var inside, taken atomic.Int32
	var wg sync.WaitGroup
	for h := range uint64(4) {
		wg.Go(func() {
			l := Lock{Holder: h + 1, Owner: 1, Write: true, End: LockOffsetMax}
			for range 5 {
				for {
					l.Expires = time.Now().Add(time.Minute).UnixNano()
					_, _, err := f.SetLock(ctx, "/f", l, false)
					if err == nil {
						break
					}
					if Errno(err) != syscall.EAGAIN {
						t.Error(err)
						return
					}
					time.Sleep(time.Millisecond)
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders inside the lock", n)
				}
				taken.Add(1)
				time.Sleep(2 * time.Millisecond)
				inside.Add(-1)
				if _, _, err := f.SetLock(ctx, "/f", l, true); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := taken.Load(); n != 20 {
		t.Fatalf("the lock was taken %d times, want 20", n)
	}
}

// TestLockTableFull: a file holds LockEntriesMax locks; the next take
// fails with ENOLCK and changes nothing, and a lock fits again once one
// is given up.
func TestLockTableFull(t *testing.T) {
	ctx, c, f := newFS(t)
	must[Attr](t)(f.WriteFile(ctx, "/f", Owner{Mode: 0o644}, nil))
	now := time.Now()
	expires := now.Add(time.Hour).UnixNano()
	// Single bytes with a gap between them, so that none merge.
	at := func(i int) Lock {
		return Lock{Holder: 1, Owner: 1, Write: true, Start: uint64(2 * i), End: uint64(2 * i), Expires: expires}
	}
	// All but the last written as a table at once, the last through
	// SetLock.
	var table fslock.Table
	for i := range LockEntriesMax - 1 {
		var err error
		if table, err = table.Apply(at(i), false, now.UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Commit(ctx, "tfs", client.CreateOp(fslayout.LockKey("/f")), client.WriteOp(fslayout.LockKey("/f"), 0, table.Encode(), false)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.SetLock(ctx, "/f", at(LockEntriesMax-1), false); err != nil {
		t.Fatalf("lock %d: %v", LockEntriesMax, err)
	}
	_, _, err := f.SetLock(ctx, "/f", at(LockEntriesMax), false)
	wantErrno(t, err, syscall.ENOLCK)
	probe := func(i int) bool {
		t.Helper()
		l := at(i)
		l.Holder, l.Write = 2, false
		_, locked, err := f.GetLock(ctx, "/f", l)
		if err != nil {
			t.Fatal(err)
		}
		return locked
	}
	if probe(LockEntriesMax) || !probe(0) || !probe(LockEntriesMax-1) {
		t.Fatalf("after the refused lock: the last byte locked %v, the first %v, the one before %v; want false, true, true",
			probe(LockEntriesMax), probe(0), probe(LockEntriesMax-1))
	}
	if _, _, err := f.SetLock(ctx, "/f", at(0), true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.SetLock(ctx, "/f", at(LockEntriesMax), false); err != nil {
		t.Fatalf("a lock after one was given up: %v", err)
	}
}

// TestLocksFollowRename checks that a rename moves a node's locks with
// it, a file's and those of everything under a directory, and that the
// locks of the node it replaces go: a take at the new name meets the
// moved lock, none is left at the old name, and the replaced file's lock
// binds nothing.
func TestLocksFollowRename(t *testing.T) {
	ctx, _, f := newFS(t)
	lease := time.Now().Add(time.Hour).UnixNano()
	lock := func(holder uint64, start uint64) Lock {
		return Lock{Holder: holder, Owner: 1, Write: true, Start: start, End: start, Expires: lease}
	}
	// held returns the holder of the lock at offset start of p, 0 if none.
	held := func(p string, start uint64) uint64 {
		t.Helper()
		c, ok, err := f.GetLock(ctx, p, lock(99, start))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return 0
		}
		return c.Holder
	}
	for _, p := range []string{"/a", "/c"} {
		must[Attr](t)(f.WriteFile(ctx, p, Owner{Mode: 0o644}, []byte(p)))
	}
	must[Attr](t)(f.Mkdir(ctx, "/d", Owner{Mode: 0o755}))
	must[Attr](t)(f.Mkdir(ctx, "/d/sub", Owner{Mode: 0o755}))
	must[Attr](t)(f.WriteFile(ctx, "/d/sub/x", Owner{Mode: 0o644}, []byte("x")))
	// A large file is stapled when renamed: its locks move all the same.
	big := make([]byte, fslayout.StapleBytesMin)
	must[Attr](t)(f.WriteFile(ctx, "/big", Owner{Mode: 0o644}, big))
	for _, l := range []struct {
		p      string
		holder uint64
	}{{"/a", 1}, {"/c", 2}, {"/d/sub/x", 3}, {"/big", 4}} {
		if _, _, err := f.SetLock(ctx, l.p, lock(l.holder, 10), false); err != nil {
			t.Fatalf("take on %s: %v", l.p, err)
		}
	}

	if err := f.Rename(ctx, "/a", "/b", 0); err != nil {
		t.Fatal(err)
	}
	if h := held("/b", 10); h != 1 {
		t.Fatalf("after /a -> /b, /b's lock holder %d, want 1", h)
	}
	_, _, err := f.SetLock(ctx, "/b", lock(7, 10), false)
	wantErrno(t, err, syscall.EAGAIN)
	if h := held("/a", 10); h != 0 {
		t.Fatalf("after /a -> /b, a lock of holder %d left at /a", h)
	}
	// A file made at the old name starts with no locks.
	must[Attr](t)(f.WriteFile(ctx, "/a", Owner{Mode: 0o644}, nil))
	if _, _, err := f.SetLock(ctx, "/a", lock(7, 10), false); err != nil {
		t.Fatalf("take on a new file at the old name: %v", err)
	}

	// /b replaces /c: /c then holds /b's locks, and /c's old ones are gone.
	if _, _, err := f.SetLock(ctx, "/c", lock(2, 20), false); err != nil {
		t.Fatal(err)
	}
	if err := f.Rename(ctx, "/b", "/c", 0); err != nil {
		t.Fatal(err)
	}
	if h, h2 := held("/c", 10), held("/c", 20); h != 1 || h2 != 0 {
		t.Fatalf("after /b replaced /c: holders %d at 10 (want 1), %d at 20 (want 0)", h, h2)
	}
	if h := held("/b", 10); h != 0 {
		t.Fatalf("after /b -> /c, a lock of holder %d left at /b", h)
	}

	// A file with no locks replacing a locked one leaves none.
	must[Attr](t)(f.WriteFile(ctx, "/plain", Owner{Mode: 0o644}, nil))
	if _, _, err := f.SetLock(ctx, "/a2", lock(1, 10), false); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("take on a missing file: %v", err)
	}
	must[Attr](t)(f.WriteFile(ctx, "/a2", Owner{Mode: 0o644}, nil))
	if _, _, err := f.SetLock(ctx, "/a2", lock(1, 10), false); err != nil {
		t.Fatal(err)
	}
	if err := f.Rename(ctx, "/plain", "/a2", 0); err != nil {
		t.Fatal(err)
	}
	if h := held("/a2", 10); h != 0 {
		t.Fatalf("after /plain replaced the locked /a2, holder %d's lock binds it", h)
	}

	// A directory's rename moves the locks of what is under it.
	if err := f.Rename(ctx, "/d", "/e", 0); err != nil {
		t.Fatal(err)
	}
	if h, old := held("/e/sub/x", 10), held("/d/sub/x", 10); h != 3 || old != 0 {
		t.Fatalf("after /d -> /e: /e/sub/x holder %d (want 3), /d/sub/x holder %d (want 0)", h, old)
	}
	if err := f.Rename(ctx, "/big", "/big2", 0); err != nil {
		t.Fatal(err)
	}
	if h, old := held("/big2", 10), held("/big", 10); h != 4 || old != 0 {
		t.Fatalf("after /big -> /big2: holder %d (want 4), left at /big %d (want 0)", h, old)
	}
	// The holders unlock at the new names, and no table is left.
	for _, l := range []struct {
		p      string
		holder uint64
	}{{"/c", 1}, {"/e/sub/x", 3}, {"/big2", 4}, {"/a", 7}} {
		if _, stillHeld, err := f.SetLock(ctx, l.p, Lock{Holder: l.holder, Owner: 1, End: LockOffsetMax}, true); err != nil || stillHeld {
			t.Fatalf("unlock of %s: held %v, %v", l.p, stillHeld, err)
		}
	}
	keys := must[[]string](t)(lockTables(ctx, f))
	if len(keys) != 0 {
		t.Fatalf("lock tables left: %q", keys)
	}
}

// lockTables lists the keys of f's lock tables.
func lockTables(ctx context.Context, f *FS) ([]string, error) {
	blobs, _, err := f.c.List(ctx, f.ks, fslayout.LockKey(""), "", client.ListLimitMax)
	var keys []string
	for _, b := range blobs {
		keys = append(keys, b.Key)
	}
	return keys, err
}

// TestLockTakeRacesRename renames or removes the file between a take's
// reads and its commit: the take must then fail with ENOENT, not stand
// in a table at the path the file left, where takes through the file's
// new path would not see it; it is undone. A write in the same window
// changes nothing the take read: it stands, in one attempt.
func TestLockTakeRacesRename(t *testing.T) {
	ctx, c, f := newFS(t)
	lease := time.Now().Add(time.Hour).UnixNano()
	lock := func(holder uint64) Lock {
		return Lock{Holder: holder, Owner: 1, Write: true, Start: 0, End: LockOffsetMax, Expires: lease}
	}
	must[Attr](t)(f.Mkdir(ctx, "/d", Owner{Mode: 0o755}))
	// A directory takes locks too (flock on an open directory).
	if _, _, err := f.SetLock(ctx, "/d", lock(1), false); err != nil {
		t.Fatalf("take on a directory: %v", err)
	}
	for _, race := range []struct {
		name string
		do   func() error
		want syscall.Errno
		// runs is the lock transactions the take runs: one, and one
		// more to undo it.
		runs int32
	}{
		{"write", func() error { return f.WriteAt(ctx, "/r", 0, []byte("w")) }, 0, 1},
		{"rename", func() error { return f.Rename(ctx, "/r", "/r2", 0) }, syscall.ENOENT, 2},
		{"unlink", func() error { return f.Unlink(ctx, "/r") }, syscall.ENOENT, 2},
	} {
		must[Attr](t)(f.WriteFile(ctx, "/r", Owner{Mode: 0o644}, []byte("r")))
		var raced atomic.Int32
		lockCommitHook = func(p string) {
			if p == "/r" && raced.Add(1) == 1 {
				if err := race.do(); err != nil {
					t.Errorf("%s in the take's window: %v", race.name, err)
				}
			}
		}
		_, held, err := f.SetLock(ctx, "/r", lock(2), false)
		lockCommitHook = nil
		if n := raced.Load(); n != race.runs {
			t.Fatalf("%s: the take ran %d lock transactions, want %d", race.name, n, race.runs)
		}
		wantErrno(t, err, race.want)
		_, serr := c.Stat(ctx, "tfs", fslayout.LockKey("/r"))
		switch {
		case race.want == 0 && (!held || serr != nil):
			t.Fatalf("%s: the take reports held %v, its table: %v", race.name, held, serr)
		case race.want != 0 && !errors.Is(serr, client.ErrNotFound):
			t.Fatalf("%s: a lock table left at /r (stat: %v)", race.name, serr)
		}
		switch race.name {
		case "write":
			if _, _, err := f.SetLock(ctx, "/r", lock(2), true); err != nil {
				t.Fatal(err)
			}
			if err := f.Unlink(ctx, "/r"); err != nil {
				t.Fatal(err)
			}
		case "rename":
			// The file's new path is free to lock.
			if _, _, err := f.SetLock(ctx, "/r2", lock(3), false); err != nil {
				t.Fatalf("take at the renamed file's path: %v", err)
			}
			if err := f.Unlink(ctx, "/r2"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFindMovedLocks renames a locked file, then its directory, as
// another holder's mount would: the holder that knew the file by its
// first path finds its locks where they are now, and no one else's.
func TestFindMovedLocks(t *testing.T) {
	ctx, c, f := newFS(t)
	lease := time.Now().Add(time.Hour).UnixNano()
	must[Attr](t)(f.Mkdir(ctx, "/m", Owner{Mode: 0o755}))
	for _, p := range []string{"/m/f", "/m/other"} {
		must[Attr](t)(f.WriteFile(ctx, p, Owner{Mode: 0o644}, nil))
	}
	take := func(p string, holder uint64, expires int64) {
		t.Helper()
		if _, _, err := f.SetLock(ctx, p, Lock{Holder: holder, Owner: 1, Flock: true, End: LockOffsetMax, Expires: expires}, false); err != nil {
			t.Fatal(err)
		}
	}
	take("/m/f", 5, lease)
	take("/m/other", 6, time.Now().Add(200*time.Millisecond).UnixNano())
	if err := f.Rename(ctx, "/m/f", "/m/g", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Rename(ctx, "/m/other", "/m/other2", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Rename(ctx, "/m", "/n", 0); err != nil {
		t.Fatal(err)
	}
	found, err := f.FindMovedLocks(ctx, 5, []string{"/m/f", "/m/g", "/nowhere"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"/m/f": "/n/g", "/m/g": "/n/g"}; !maps.Equal(found, want) {
		t.Fatalf("holder 5 found %v, want %v", found, want)
	}
	// Another holder finds nothing of 5's; a holder whose lease ended
	// finds nothing either.
	time.Sleep(300 * time.Millisecond)
	for _, h := range []uint64{6, 7} {
		if found, err := f.FindMovedLocks(ctx, h, []string{"/m/f", "/m/other"}); err != nil || len(found) != 0 {
			t.Fatalf("holder %d found %v, %v", h, found, err)
		}
	}
	// The table keeps its moves through later changes.
	take("/n/g", 8, lease)
	b, err := c.Read(ctx, "tfs", fslayout.LockKey("/n/g"), 0, client.PayloadBytesMax)
	if err != nil {
		t.Fatal(err)
	}
	if _, moved, err := fslock.DecodeMoved(b); err != nil || !slices.Equal(moved, []string{"/m/g", "/m/f"}) {
		t.Fatalf("the table's moves after a take: %q, %v", moved, err)
	}
	// An unlock at the old path finds none of 5's locks; at the new one
	// it finds them.
	l5 := Lock{Holder: 5, Owner: 1, Flock: true, End: LockOffsetMax, Expires: lease}
	if found, held, err := f.Unlock(ctx, "/m/f", l5); err != nil || found || held {
		t.Fatalf("unlock at the old path: found %v held %v, %v", found, held, err)
	}
	if found, held, err := f.Unlock(ctx, "/n/g", l5); err != nil || !found || held {
		t.Fatalf("unlock at the new path: found %v held %v, %v", found, held, err)
	}
}
