package tyrfs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/fslock"
)

// Lock is an advisory lock on a file: flock(2) or a POSIX record lock
// (fcntl), of one owner of one holder, with the time its lease ends. See
// SetLock.
type Lock = fslock.Lock

// LockOffsetMax ends a lock that runs to the end of the file.
const LockOffsetMax = fslock.OffsetMax

// LockEntriesMax bounds the locks held on one file (ENOLCK beyond).
const LockEntriesMax = fslock.EntriesMax

// SetLock takes advisory lock l on file p, or, with unlock, gives up
// l's range of the locks of l's holder and owner (the whole file for a
// flock lock), in one transaction on the file's lock table. Locks follow
// flock(2) and fcntl(2) between owners: a live lock of another owner of
// the same kind that overlaps l, where either is a write lock, fails the
// take with EAGAIN and is returned; flock and POSIX locks do not
// conflict. A lock is live until l.Expires (Unix ns, by the clocks of
// the machines that use it, which must agree to well within a lease);
// its holder keeps it with RenewLocks. held reports whether the owner
// still holds locks of l's kind on p afterwards (not set on an error). A take needs the file
// (ENOENT); an unlock does not. A file's locks are kept at its path, and
// a rename moves them with it (a directory's, those of everything under
// it), in its own transaction; the locks of a file a rename replaces go.
func (f *FS) SetLock(ctx context.Context, p string, l Lock, unlock bool) (conflict Lock, held bool, err error) {
	conflict, held, _, err = f.setLock(ctx, p, l, unlock)
	return conflict, held, err
}

// Unlock is SetLock giving up l's range, and also reports whether p's
// table held a live lock of l's holder before: if it held none, the
// holder's locks on the file, if any, are elsewhere (a rename through
// another holder's mount moved them; see FindMovedLocks).
func (f *FS) Unlock(ctx context.Context, p string, l Lock) (found, held bool, err error) {
	_, held, found, err = f.setLock(ctx, p, l, true)
	return found, held, err
}

func (f *FS) setLock(ctx context.Context, p string, l Lock, unlock bool) (conflict Lock, held, found bool, err error) {
	p, err = fslayout.CleanPath(p)
	if err != nil {
		return Lock{}, false, false, err
	}
	if err := fslock.Check(l); err != nil {
		return Lock{}, false, false, errnof(syscall.EINVAL, "%s: %v", p, err)
	}
	if !unlock && f.cred.UID != 0 {
		// The search permissions above p, which the node serving p
		// checks; root is refused none.
		if _, err := f.Lookup(ctx, p); err != nil {
			return Lock{}, false, false, err
		}
	}
	err = f.changeLocks(ctx, p, func(t fslock.Table, now int64) (fslock.Table, error) {
		if c, ok := t.Conflict(l, now); ok && !unlock {
			conflict = c
			return nil, errLockHeld
		}
		found = t.Holds(l.Holder, now)
		next, err := t.Apply(l, unlock, now)
		if errors.Is(err, fslock.ErrTooMany) {
			return nil, errnof(syscall.ENOLCK, "%s: %v", p, err)
		}
		held = next.Held(l, now)
		return next, err
	})
	if errors.Is(err, errLockHeld) {
		return conflict, false, false, errnof(syscall.EAGAIN, "%s: locked", p)
	}
	if err != nil {
		return Lock{}, false, false, err
	}
	if !unlock {
		if err := f.takenOn(ctx, p, l); err != nil {
			return Lock{}, false, false, err
		}
	}
	return Lock{}, held, found, nil
}

// takenOn checks, once take l committed in p's lock table, that p still
// holds a file or directory. A rename or unlink of the file that
// committed between the caller's finding the file and the take leaves
// the lock at a path the file left, where takes through its new path do
// not see it: the take is undone then, and fails with ENOENT. (The take
// itself reads nothing a rename writes, so that writes to the file, which
// change its version, never make it start again.)
func (f *FS) takenOn(ctx context.Context, p string, l Lock) error {
	_, err := f.Lookup(ctx, p)
	if e := Errno(err); e != syscall.ENOENT && e != syscall.ENOTDIR {
		return nil // the take stands (the check may fail for other reasons)
	}
	if _, _, uerr := f.SetLock(ctx, p, l, true); uerr != nil {
		return errors.Join(err, fmt.Errorf("tyrfs: undoing a lock on %s, which its file left: %w", p, uerr))
	}
	return err
}

// errLockHeld ends a take that found a conflicting lock; nothing is
// committed.
var errLockHeld = errors.New("lock held")

// GetLock returns the first live lock on p that would keep l from being
// taken (F_GETLK), if any.
func (f *FS) GetLock(ctx context.Context, p string, l Lock) (Lock, bool, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return Lock{}, false, err
	}
	if err := fslock.Check(l); err != nil {
		return Lock{}, false, errnof(syscall.EINVAL, "%s: %v", p, err)
	}
	b, err := f.c.Read(ctx, f.ks, fslayout.LockKey(p), 0, client.PayloadBytesMax)
	if errors.Is(err, client.ErrNotFound) {
		return Lock{}, false, nil
	}
	if err != nil {
		return Lock{}, false, err
	}
	t, err := fslock.Decode(b)
	if err != nil {
		return Lock{}, false, fmt.Errorf("tyrfs: locks of %s: %w", p, err)
	}
	c, ok := t.Conflict(l, time.Now().UnixNano())
	return c, ok, nil
}

// RenewLocks moves the end of the leases of holder's locks on p to
// expires, and returns how many it holds there: 0 if their leases ended
// before (they may be another's by now).
func (f *FS) RenewLocks(ctx context.Context, p string, holder uint64, expires int64) (int, error) {
	var n int
	err := f.changeLocks(ctx, p, func(t fslock.Table, now int64) (fslock.Table, error) {
		var next fslock.Table
		next, n = t.Renew(holder, expires, now)
		return next, nil
	})
	return n, err
}

// DropLocks gives up every lock of holder on p.
func (f *FS) DropLocks(ctx context.Context, p string, holder uint64) error {
	return f.changeLocks(ctx, p, func(t fslock.Table, now int64) (fslock.Table, error) {
		return t.Drop(holder, now), nil
	})
}

// LockScanMax bounds the lock tables FindMovedLocks reads.
const LockScanMax = 4096

// lockListBytes is the largest table FindMovedLocks takes with a listing:
// a few locks and moves.
const lockListBytes = 4 << 10

// FindMovedLocks finds where the locks of holder that were on the paths
// of lost went: for each path of lost, the path of a table that was
// moved from it (a rename through another holder's mount, which moved
// the table; up to fslock.MovesMax renames back) and holds a live lock
// of holder. A path found nowhere is left out. It lists and reads every
// lock table of the keyspace, at most LockScanMax (EAGAIN beyond), so it
// is for the rare holder that found its locks gone from where it kept
// them.
func (f *FS) FindMovedLocks(ctx context.Context, holder uint64, lost []string) (map[string]string, error) {
	want := map[string]bool{}
	for _, p := range lost {
		if cp, err := fslayout.CleanPath(p); err == nil {
			want[cp] = true
		}
	}
	found := map[string]string{}
	prefix := fslayout.LockKey("/")
	read := 0
	for after := ""; len(want) > len(found); {
		// A page of tables and their bytes in one request; a table
		// too large to come with them is read alone.
		tables, next, err := f.c.ListData(ctx, f.ks, prefix, after, client.ListLimitMax, lockListBytes)
		if err != nil {
			return nil, err
		}
		for _, tb := range tables {
			if read++; read > LockScanMax {
				return found, errnof(syscall.EAGAIN, "more than %d lock tables to look through", LockScanMax)
			}
			b := tb.Data
			if !tb.HasData {
				if b, err = f.c.Read(ctx, f.ks, tb.Key, 0, client.PayloadBytesMax); errors.Is(err, client.ErrNotFound) {
					continue // gone since the listing
				} else if err != nil {
					return nil, err
				}
			}
			t, moved, err := fslock.DecodeMoved(b)
			if err != nil || !t.Holds(holder, time.Now().UnixNano()) {
				continue
			}
			for _, from := range moved {
				if want[from] {
					found[from] = strings.TrimPrefix(tb.Key, fslayout.LockKey(""))
				}
			}
		}
		if next == "" {
			break
		}
		after = next
	}
	return found, nil
}

// changeLocks runs change on the lock table of p in a transaction and
// commits what it returns, deleting the table's blob once it is empty.
// now is the time leases are judged by.
func (f *FS) changeLocks(ctx context.Context, p string, change func(t fslock.Table, now int64) (fslock.Table, error)) error {
	key := fslayout.LockKey(p)
	return f.c.RunTx(ctx, f.ks, func(tx *client.Tx) error {
		b, err := readAll(ctx, tx, key)
		exists := err == nil
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			return err
		}
		t, moved, err := fslock.DecodeMoved(b)
		if err != nil {
			return fmt.Errorf("tyrfs: locks of %s: %w", p, err)
		}
		now := time.Now().UnixNano()
		next, err := change(t, now)
		if err != nil {
			return err
		}
		if err := next.Verify(now); err != nil {
			return fmt.Errorf("tyrfs: locks of %s: %w", p, err)
		}
		if hook := lockCommitHook; hook != nil {
			hook(p)
		}
		switch nb := next.EncodeMoved(moved); {
		case len(nb) == 0 && exists:
			return tx.Do(client.DeleteOp(key))
		case len(nb) == 0:
			return nil
		case exists:
			return tx.Do(client.WriteOp(key, 0, nb, false), client.TruncateOp(key, uint64(len(nb))))
		default:
			return tx.Do(client.CreateOp(key), client.WriteOp(key, 0, nb, false))
		}
	}, txOptions)
}

// lockCommitHook, if set (by tests), runs in changeLocks' transaction
// after its reads, before its commit.
var lockCommitHook func(p string)
