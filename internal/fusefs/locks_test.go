package fusefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// fcntlLock takes (or with F_UNLCK gives up) a POSIX lock of typ on
// [start, start+n) of f (n 0: to the end), waiting if wait.
func fcntlLock(f *os.File, typ int16, start, n int64, wait bool) error {
	cmd := syscall.F_SETLK
	if wait {
		cmd = syscall.F_SETLKW
	}
	return syscall.FcntlFlock(f.Fd(), cmd, &syscall.Flock_t{Type: typ, Whence: 0, Start: start, Len: n})
}

// eventuallyTaken waits up to 10 s for take to succeed: a lock given up
// at a RELEASE, which the kernel sends after close(2) returns.
func eventuallyTaken(t *testing.T, what string, take func() error) {
	t.Helper()
	testserver.Eventually(t, 10*time.Second, what, func() (bool, string) {
		err := take()
		return err == nil, fmt.Sprint(err)
	})
}

func openRW(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// locksAcross checks advisory locks between mounts a and b of keyspace ks
// (locks.go): record locks and flock locks exclude each other's across
// mounts as between processes, F_GETLK reports the holder's range, a close
// gives up the process's record locks (at once for a descriptor opened to
// write, at its release for one opened to read only), a blocked F_SETLKW takes the lock
// once it is given up, what is written under a lock is read under it
// through the other mount, and no lock table is left once all are given
// up.
func locksAcross(t *testing.T, c *client.Client, ks, a, b string) {
	if err := os.WriteFile(filepath.Join(a, "locked"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	fa, fb := openRW(t, filepath.Join(a, "locked")), openRW(t, filepath.Join(b, "locked"))

	// Record locks: a's write lock on [0, 100) keeps b out of it, for
	// reads and writes, but not out of the bytes after it.
	if err := fcntlLock(fa, syscall.F_WRLCK, 0, 100, false); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []int16{syscall.F_WRLCK, syscall.F_RDLCK} {
		if err := fcntlLock(fb, typ, 50, 10, false); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("lock %d inside a's write lock through b: %v, want EAGAIN", typ, err)
		}
	}
	if err := fcntlLock(fb, syscall.F_WRLCK, 100, 100, false); err != nil {
		t.Fatalf("lock beside a's: %v", err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Start: 10, Len: 1}
	if err := syscall.FcntlFlock(fb.Fd(), syscall.F_GETLK, &lk); err != nil {
		t.Fatal(err)
	}
	if lk.Type != syscall.F_WRLCK || lk.Start != 0 || lk.Len != 100 || lk.Pid != 0 {
		t.Fatalf("F_GETLK through b: %+v, want a's write lock on [0, 100), pid 0 (a process of another mount)", lk)
	}
	// Shared locks share.
	if err := fcntlLock(fa, syscall.F_RDLCK, 0, 100, false); err != nil {
		t.Fatal(err)
	}
	if err := fcntlLock(fb, syscall.F_RDLCK, 50, 10, false); err != nil {
		t.Fatalf("read lock beside a's read lock: %v", err)
	}
	if err := fcntlLock(fb, syscall.F_UNLCK, 0, 0, false); err != nil {
		t.Fatal(err)
	}

	// A descriptor opened to read only sends no FLUSH at its close: the
	// process's locks go at its release, just after close(2) returns.
	ro, err := os.Open(filepath.Join(a, "locked"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fcntlLock(ro, syscall.F_RDLCK, 0, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fcntlLock(fb, syscall.F_WRLCK, 200, 1, false); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("write lock through b inside a's read lock: %v, want EAGAIN", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	eventuallyTaken(t, "a write lock through b after a's read-only descriptor closed", func() error {
		return fcntlLock(fb, syscall.F_WRLCK, 0, 0, false)
	})
	if err := fcntlLock(fb, syscall.F_UNLCK, 0, 0, false); err != nil {
		t.Fatal(err)
	}

	// Closing any descriptor of the file gives up the process's record
	// locks on it.
	fa2 := openRW(t, filepath.Join(a, "locked"))
	if err := fcntlLock(fa, syscall.F_WRLCK, 0, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fcntlLock(fb, syscall.F_WRLCK, 0, 1, false); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("lock through b while a holds the file: %v, want EAGAIN", err)
	}
	if err := fa2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fcntlLock(fb, syscall.F_WRLCK, 0, 1, false); err != nil {
		t.Fatalf("lock through b after a's process closed a descriptor of the file: %v", err)
	}

	// A blocked F_SETLKW waits for the lock and takes it once given up.
	taken := make(chan error, 1)
	go func() { taken <- fcntlLock(fa, syscall.F_WRLCK, 0, 0, true) }()
	select {
	case err := <-taken:
		t.Fatalf("F_SETLKW through a returned while b held the lock: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := fcntlLock(fb, syscall.F_UNLCK, 0, 0, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-taken:
		if err != nil {
			t.Fatalf("F_SETLKW: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("F_SETLKW through a did not take the lock given up")
	}

	// What is written under the lock is read under it through b, although
	// b read the file before, and a held the write until the unlock.
	if _, err := fb.ReadAt(make([]byte, 10), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fa.WriteAt([]byte("LOCKED"), 2); err != nil {
		t.Fatal(err)
	}
	if err := fcntlLock(fa, syscall.F_UNLCK, 0, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fcntlLock(fb, syscall.F_RDLCK, 0, 0, false); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if _, err := fb.ReadAt(got, 0); err != nil || string(got) != "01LOCKED89" {
		t.Fatalf("read under the lock through b: %q, %v", got, err)
	}
	if err := fcntlLock(fb, syscall.F_UNLCK, 0, 0, false); err != nil {
		t.Fatal(err)
	}

	// flock: exclusive across mounts, apart from record locks, and given
	// up at the last close of the open file description.
	if err := syscall.Flock(int(fa.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	for _, how := range []int{syscall.LOCK_EX, syscall.LOCK_SH} {
		if err := syscall.Flock(int(fb.Fd()), how|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Fatalf("flock %d through b while a holds it: %v, want EWOULDBLOCK", how, err)
		}
	}
	if err := fcntlLock(fb, syscall.F_WRLCK, 0, 0, false); err != nil {
		t.Fatalf("a record lock conflicts with a flock lock: %v", err)
	}
	if err := fcntlLock(fb, syscall.F_UNLCK, 0, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	eventuallyTaken(t, "flock through b after a's close", func() error {
		return syscall.Flock(int(fb.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	})
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}

	// Open file description locks belong to the description: a second
	// one of the same process is refused, a close of it gives nothing up,
	// and the last close of the first does.
	o1, o2 := openRW(t, filepath.Join(a, "locked")), openRW(t, filepath.Join(a, "locked"))
	fb = openRW(t, filepath.Join(b, "locked"))
	ofd := func(f *os.File, typ int16) error {
		return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: typ, Start: 0, Len: 0})
	}
	if err := ofd(o1, unix.F_WRLCK); err != nil {
		t.Fatal(err)
	}
	if err := ofd(o2, unix.F_RDLCK); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("OFD lock of a second description of the process: %v, want EAGAIN", err)
	}
	if err := fcntlLock(fb, syscall.F_RDLCK, 0, 0, false); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("record lock through b while a description of a holds an OFD lock: %v, want EAGAIN", err)
	}
	if err := o2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fcntlLock(fb, syscall.F_RDLCK, 0, 0, false); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("record lock through b after the close of another description of a: %v, want EAGAIN", err)
	}
	if err := o1.Close(); err != nil {
		t.Fatal(err)
	}
	eventuallyTaken(t, "a record lock through b after the OFD lock's description closed", func() error {
		return fcntlLock(fb, syscall.F_RDLCK, 0, 0, false)
	})
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	noLockTables(t, c, ks)
}

// locksRenamed checks that locks go with a file renamed through mount a,
// and with a directory's files when it is renamed, as on a local file
// system: through mount b, the file at its new name is locked, and the
// holder keeps the lock past several of a's leases (a renews it where it
// now is) until it closes the file, also once b renamed the file and its
// directory (a finds the lock by the table's moves, tyrfs.FindMovedLocks,
// and follows it, at its renewal or at the close). a must run with LockLease lease,
// short, but long enough that a renewal (a third of it) is not cut off
// on a loaded machine.
func locksRenamed(t *testing.T, c *client.Client, ks, a, b string, lease time.Duration) {
	if err := os.MkdirAll(filepath.Join(a, "lr"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "lr", "f"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	held := openRW(t, filepath.Join(a, "lr", "f"))
	if err := unix.FcntlFlock(held.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_WRLCK}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(a, "lr", "f"), filepath.Join(a, "lr", "g")); err != nil {
		t.Fatal(err)
	}
	locked := func(p string) {
		t.Helper()
		f := openRW(t, p)
		if err := fcntlLock(f, syscall.F_RDLCK, 0, 0, false); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("record lock on %s, renamed while locked through the other mount: %v, want EAGAIN", p, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	locked(filepath.Join(b, "lr", "g"))
	if err := os.Rename(filepath.Join(a, "lr"), filepath.Join(a, "lr2")); err != nil {
		t.Fatal(err)
	}
	// Past three leases: a's renewals reached the lock where it is now.
	time.Sleep(3 * lease)
	locked(filepath.Join(b, "lr2", "g"))
	// Renamed through b, the file, then its directory: a finds the lock
	// where b moved it and keeps renewing it there.
	if err := os.Rename(filepath.Join(b, "lr2", "g"), filepath.Join(b, "lr2", "h")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(b, "lr2"), filepath.Join(b, "lr3")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * lease)
	locked(filepath.Join(b, "lr3", "h"))
	// Renamed through b once more, then closed at once, before a's next
	// renewal: the unlock finds the lock where b moved it. Its lease runs
	// at least two thirds of one past the close, so b takes the lock
	// well before it could have ended.
	if err := os.Rename(filepath.Join(b, "lr3", "h"), filepath.Join(b, "lr3", "i")); err != nil {
		t.Fatal(err)
	}
	fb := openRW(t, filepath.Join(b, "lr3", "i"))
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, lease*3/5, "a record lock through b once the holder closed the file b renamed", func() (bool, string) {
		err := fcntlLock(fb, syscall.F_WRLCK, 0, 0, false)
		return err == nil, fmt.Sprint(err)
	})
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	noLockTables(t, c, ks)
}

// noLockTables waits up to 10 s for keyspace ks to hold no lock table:
// every lock given up, the last by a RELEASE the kernel sends after
// close(2) returns.
func noLockTables(t *testing.T, c *client.Client, ks string) {
	t.Helper()
	testserver.Eventually(t, 10*time.Second, "no lock table left", func() (bool, string) {
		tables, _, err := c.List(t.Context(), ks, "&", "", client.ListLimitMax)
		if err != nil {
			t.Fatal(err)
		}
		return len(tables) == 0, fmt.Sprintf("%d tables", len(tables))
	})
}
