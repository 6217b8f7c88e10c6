package fusefs

// Advisory locks across mounts. Unless Options.LocalLocks, the kernel
// sends flock(2) and fcntl(2) record locks to the mount (FUSE's
// POSIX_LOCKS and FLOCK_LOCKS), and the mount keeps them in the cluster,
// in the file's lock table (tyrfs.SetLock), as holder: a random number of
// the mount's own. Each lock's lease is renewed while the mount runs; a
// mount that dies gives its locks up once their leases end.
//
// The kernel drops a process's POSIX locks on a file at each close of a
// descriptor of it (FLUSH, with the process's lock owner), and an open
// file description's flock lock at its last close (RELEASE, with the
// FLOCK_UNLOCK flag and the description's lock owner). It leaves the
// record locks of an open file description (F_OFD_SETLK, owned by the
// description) to the file system. go-fuse's node API passes none of
// these owners, so rawFS records the owner of a FLUSH or RELEASE for the
// request, by its cancel channel, which the node's call gets in its
// context.
//
// Invariants:
//  1. held names, for each (node, owner, kind) of this mount, the path
//     whose lock table holds its locks, while it may hold any: it is added
//     before a take returns and removed once an unlock, a close or the
//     renewal found none left, or a close's unlock failed (the lease then
//     ends, as it is no longer renewed). A rename through the mount, which
//     moves the tables of what it moves, moves the paths with them before
//     it returns (lockState.endRename); while one is in progress, the
//     renewal forgets none. A rename through another mount moves the
//     tables too, and each moved table remembers the paths it left: the
//     next renewal finds none of the mount's locks at the path held names,
//     finds the table that left it (tyrfs.FindMovedLocks) and moves the
//     path there; so does a lock or unlock through the mount that finds
//     none of ref's locks at its path (lockState.follow).
//  2. A lock is taken after what the mount held of the file's writes was
//     committed, and given up after it: a mount that takes the lock next
//     reads what was written under it. A take drops the kernel's pages
//     and attributes of the file, so reads under the lock go to the
//     cluster (as NFS clients do at a lock).
//  3. The close of every descriptor opened to write sends FLUSH (no
//     FOPEN_NOFLUSH), which gives up the closing process's record locks
//     on the file before close(2) returns. One opened to read only sends
//     none, so that reading a file costs no request at its close.
//  4. via holds, for each open file description, the owners that took
//     record locks through it and closed no descriptor of the file opened
//     to write since. Its RELEASE gives up their locks: the description's
//     own (F_OFD_SETLK), and those of processes whose closes were of
//     descriptors opened to read only (just after close(2) returned, as
//     the kernel sends a RELEASE without waiting). A process that closed
//     a descriptor opened to write gave its locks up then (3).

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/tyrstore/tyr/tyrfs"
)

// LockLeaseDefault is how long a mount's lock lasts without a renewal
// (Options.LockLease): the longest other mounts wait for the locks of a
// mount that died.
const LockLeaseDefault = 30 * time.Second

// LockLeaseMin bounds Options.LockLease from below.
const LockLeaseMin = time.Second

// CheckLockLease refuses a lock lease below LockLeaseMin (0: the
// default).
func CheckLockLease(d time.Duration) error {
	if d != 0 && d < LockLeaseMin {
		return fmt.Errorf("lock lease %v: below %v", d, LockLeaseMin)
	}
	return nil
}

// lockWaitMax is the longest a blocked F_SETLKW or flock sleeps between
// tries.
const lockWaitMax = 100 * time.Millisecond

// lockRef is one owner's locks of one kind on one file of the mount.
type lockRef struct {
	n     *node
	owner uint64
	flock bool
}

// lockState is the mount's locks.
type lockState struct {
	holder uint64
	lease  time.Duration

	mu       sync.Mutex
	held     map[lockRef]string              // invariant 1
	via      map[*handle]map[uint64]struct{} // invariant 4
	renaming int                             // renames through the mount in progress

	// owners maps the cancel channel of each FLUSH, and of each RELEASE
	// that gives up a flock lock, being served to the request's lock
	// owner.
	owners sync.Map
}

func newLockState(lease time.Duration) *lockState {
	return &lockState{holder: rand.Uint64() | 1, lease: cmp.Or(lease, LockLeaseDefault), held: map[lockRef]string{},
		via: map[*handle]map[uint64]struct{}{}}
}

// ownerOf returns the lock owner rawFS recorded for the request ctx
// serves.
func (s *lockState) ownerOf(ctx context.Context) (uint64, bool) {
	c, ok := ctx.(*fuse.Context)
	if !ok {
		return 0, false
	}
	v, ok := s.owners.Load(c.Cancel)
	if !ok {
		return 0, false
	}
	return v.(uint64), true
}

// rawFS is go-fuse's bridge, recording the lock owners of FLUSH and
// RELEASE requests for the node's calls.
type rawFS struct {
	fuse.RawFileSystem
	locks *lockState
}

func (r *rawFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	r.locks.owners.Store(cancel, in.LockOwner)
	defer r.locks.owners.Delete(cancel)
	return r.RawFileSystem.Flush(cancel, in)
}

func (r *rawFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	if in.ReleaseFlags&fuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		r.locks.owners.Store(cancel, in.LockOwner)
		defer r.locks.owners.Delete(cancel)
	}
	r.RawFileSystem.Release(cancel, in)
}

// record notes whether ref holds locks on p (invariant 1).
func (s *lockState) record(ref lockRef, p string, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held {
		s.held[ref] = p
	} else {
		delete(s.held, ref)
	}
}

// startRename notes a rename through the mount in progress, until
// endRename: the renewal forgets no lock meanwhile, since the rename may
// have moved a table before endRename moved its path.
func (s *lockState) startRename() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renaming++
}

// endRename ends a rename of from to to, and if it was done (tyrfs.Rename
// moves lock tables with what it moves) follows it: the locks on the node
// it replaced at to were dropped, or moved with it to kept if it was kept
// (RenameKeeping; "" if not), and those on from and under it are now on
// to and under it.
func (s *lockState) endRename(done bool, from, to, kept string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renaming--
	if !done {
		return
	}
	for ref, p := range s.held {
		switch {
		case p == to && kept != "":
			s.held[ref] = kept
		case p == to:
			delete(s.held, ref)
		}
	}
	for ref, p := range s.held {
		if p == from || strings.HasPrefix(p, from+"/") {
			s.held[ref] = to + p[len(from):]
		}
	}
}

// pathOf returns the path ref's locks are on, if it may hold any.
func (s *lockState) pathOf(ref lockRef) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.held[ref]
	return p, ok
}

// paths returns the paths whose tables hold the mount's locks.
func (s *lockState) paths() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	paths := map[string]bool{}
	for _, p := range s.held {
		paths[p] = true
	}
	return paths
}

func (n *node) Getlk(ctx context.Context, _ fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	s := n.locks
	if s == nil {
		return syscall.ENOSYS
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	ref := lockRef{n, owner, flags&fuse.FUSE_LK_FLOCK != 0}
	p, errno := n.lockPath(ref)
	if errno != 0 {
		return errno
	}
	c, ok, err := n.fs.GetLock(ctx, p, s.lock(ref, lk))
	if err != nil {
		return tyrfs.Errno(err)
	}
	*out = fuse.FileLock{Start: lk.Start, End: lk.End, Typ: syscall.F_UNLCK}
	if ok {
		*out = fuse.FileLock{Start: c.Start, End: c.End, Typ: syscall.F_RDLCK}
		if c.Write {
			out.Typ = syscall.F_WRLCK
		}
		if c.Holder == s.holder {
			out.Pid = c.Pid // another's pid would name a process of its machine
		}
	}
	return 0
}

func (n *node) Setlk(ctx context.Context, fh fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	h, _ := fh.(*handle)
	return n.setlk(ctx, owner, h, lk, flags, false)
}

func (n *node) Setlkw(ctx context.Context, fh fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	h, _ := fh.(*handle)
	return n.setlk(ctx, owner, h, lk, flags, true)
}

// lock is the cluster's form of the kernel's lock lk of ref.
func (s *lockState) lock(ref lockRef, lk *fuse.FileLock) tyrfs.Lock {
	return tyrfs.Lock{Holder: s.holder, Owner: ref.owner, Flock: ref.flock, Write: lk.Typ == syscall.F_WRLCK,
		Start: lk.Start, End: lk.End, Pid: lk.Pid}
}

// lockPath is the path of ref's lock table: where its locks are, or the
// node's path.
func (n *node) lockPath(ref lockRef) (string, syscall.Errno) {
	if p, ok := n.locks.pathOf(ref); ok {
		return p, 0
	}
	p, ok := n.path()
	if !ok {
		return "", syscall.ENOENT
	}
	return p, 0
}

// setlk takes or gives up a lock through h (nil: at a close), waiting for
// a conflicting one to go if wait (until the request is interrupted:
// EINTR).
func (n *node) setlk(ctx context.Context, owner uint64, h *handle, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	s := n.locks
	if s == nil {
		return syscall.ENOSYS
	}
	ref := lockRef{n, owner, flags&fuse.FUSE_LK_FLOCK != 0}
	unlock := lk.Typ == syscall.F_UNLCK
	dctx, cancel := detach(ctx)
	defer cancel()
	p, errno := n.lockPath(ref)
	if errno != 0 {
		return errno
	}
	// Invariant 2: what was written under the lock goes first. Its errors
	// are kept for the write, fsync or close after.
	n.settle(dctx)
	pause := time.Millisecond
	_, follow := s.pathOf(ref)
	for {
		l := s.lock(ref, lk)
		l.Expires = time.Now().Add(s.lease).UnixNano()
		var held, found bool
		var err error
		if unlock {
			found, held, err = n.fs.Unlock(dctx, p, l)
		} else {
			_, held, err = n.fs.SetLock(dctx, p, l, false)
			found = tyrfs.Errno(err) != syscall.ENOENT
		}
		if !found && follow {
			// None of ref's locks where the mount kept them: a rename
			// through another mount may have moved them (invariant 1).
			follow = false
			if q, ok := s.follow(dctx, n.fs, p); ok {
				p = q
				continue
			}
		}
		if err == nil {
			s.record(ref, p, held)
			if !unlock && !ref.flock && h != nil {
				s.mu.Lock()
				if s.via[h] == nil {
					s.via[h] = map[uint64]struct{}{}
				}
				s.via[h][owner] = struct{}{}
				s.mu.Unlock()
			}
			if !unlock && n.revalidate {
				n.forgetPages()
				if errno := n.NotifyContent(0, 0); errno != 0 && errno != syscall.ENOENT {
					return syscall.EIO
				}
			}
			return 0
		}
		if errno := tyrfs.Errno(err); errno != syscall.EAGAIN || !wait {
			return errno
		}
		select {
		case <-ctx.Done():
			return syscall.EINTR
		case <-time.After(pause):
		}
		pause = min(2*pause, lockWaitMax)
	}
}

// unlockAll gives up the locks of refs, all of n's, at a close. One
// whose unlock fails is forgotten all the same: its lease is no longer
// renewed, so it goes within a lease.
func (n *node) unlockAll(ctx context.Context, refs []lockRef) syscall.Errno {
	var first syscall.Errno
	for _, ref := range refs {
		errno := n.setlk(ctx, ref.owner, nil, &fuse.FileLock{Start: 0, End: tyrfs.LockOffsetMax, Typ: syscall.F_UNLCK},
			flockFlags(ref.flock), false)
		if errno != 0 {
			n.locks.record(ref, "", false)
			if first == 0 {
				first = errno
			}
		}
	}
	return first
}

func flockFlags(flock bool) uint32 {
	if flock {
		return fuse.FUSE_LK_FLOCK
	}
	return 0
}

// flushLocks gives up, at a FLUSH, the record locks of its owner on n
// (invariants 3 and 4).
func (n *node) flushLocks(ctx context.Context) syscall.Errno {
	s := n.locks
	if s == nil {
		return 0
	}
	owner, ok := s.ownerOf(ctx)
	if !ok {
		return 0
	}
	ref := lockRef{n, owner, false}
	s.mu.Lock()
	for h, owners := range s.via {
		if h.node == n {
			delete(owners, owner)
		}
	}
	_, held := s.held[ref]
	s.mu.Unlock()
	if !held {
		return 0
	}
	return n.unlockAll(ctx, []lockRef{ref})
}

// releaseLocks gives up, at the RELEASE of h, the flock lock of its open
// file description, if the kernel asks, and the record locks of the
// owners via holds for h (invariant 4).
func (n *node) releaseLocks(ctx context.Context, h *handle) syscall.Errno {
	s := n.locks
	if s == nil {
		return 0
	}
	var refs []lockRef
	s.mu.Lock()
	if owner, ok := s.ownerOf(ctx); ok {
		if _, held := s.held[lockRef{n, owner, true}]; held {
			refs = append(refs, lockRef{n, owner, true})
		}
	}
	for owner := range s.via[h] {
		if _, ok := s.held[lockRef{n, owner, false}]; ok {
			refs = append(refs, lockRef{n, owner, false})
		}
	}
	delete(s.via, h)
	s.mu.Unlock()
	return n.unlockAll(ctx, refs)
}

// renew keeps the leases of the mount's locks until stop is closed.
func (s *lockState) renew(f *tyrfs.FS, stop <-chan struct{}) {
	t := time.NewTicker(s.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		s.renewOnce(f)
	}
}

// renewOnce renews the lease of every lock the mount holds. Locks not
// where the mount kept them were moved by a rename through another mount,
// or their lease ended before (the mount was cut off from the cluster for
// a lease): the mount looks for the first (tyrfs.FindMovedLocks), follows
// them and renews them there, and forgets the others, and logs it.
func (s *lockState) renewOnce(f *tyrfs.FS) {
	var lost []string
	for p := range s.paths() {
		held, err := s.renewAt(f, p)
		if err != nil {
			slog.Warn("renewing the lease of locks", "path", p, "err", err)
			continue
		}
		if held == 0 {
			lost = append(lost, p)
		}
	}
	if len(lost) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.lease/3)
	moved, err := f.FindMovedLocks(ctx, s.holder, lost)
	cancel()
	if err != nil {
		slog.Warn("looking for locks moved by renames through other mounts", "err", err)
	}
	for _, p := range lost {
		// A failed search forgets nothing: the next renewal looks again.
		to, found := moved[p]
		forget := err == nil && !found
		if found {
			if held, rerr := s.renewAt(f, to); rerr == nil && held == 0 {
				found, forget = false, true
			}
		}
		s.mu.Lock()
		if s.renaming > 0 {
			// Maybe moved by the rename: judged at the next renewal.
			s.mu.Unlock()
			continue
		}
		if forget {
			slog.Warn("locks lost: their lease ended before it was renewed", "path", p)
		}
		switch {
		case found:
			s.moveHeldLocked(p, to)
		case forget:
			s.moveHeldLocked(p, "")
		}
		s.mu.Unlock()
	}
}

// follow looks for the table a rename through another mount moved the
// mount's locks on p to, and if it finds one moves every path p of held
// there (invariant 1) and returns it.
func (s *lockState) follow(ctx context.Context, f *tyrfs.FS, p string) (string, bool) {
	moved, err := f.FindMovedLocks(ctx, s.holder, []string{p})
	if err != nil {
		slog.Warn("looking for locks moved by a rename through another mount", "path", p, "err", err)
	}
	to, ok := moved[p]
	if !ok {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.moveHeldLocked(p, to)
	return to, true
}

// moveHeldLocked moves every path from of held to to, or forgets them
// if to is "". s.mu is held.
func (s *lockState) moveHeldLocked(from, to string) {
	for ref, q := range s.held {
		switch {
		case q != from:
		case to == "":
			delete(s.held, ref)
		default:
			s.held[ref] = to
		}
	}
}

// renewAt renews the leases of the mount's locks on p and returns how
// many it holds there.
func (s *lockState) renewAt(f *tyrfs.FS, p string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.lease/3)
	defer cancel()
	return f.RenewLocks(ctx, p, s.holder, time.Now().Add(s.lease).UnixNano())
}

// ReleaseLocks gives up every lock the mount holds. tyr mount calls it
// as it exits, after the unmount.
func (s *Server) ReleaseLocks(ctx context.Context) error {
	l := s.locks
	if l == nil {
		return nil
	}
	paths := l.paths()
	l.mu.Lock()
	clear(l.held)
	l.mu.Unlock()
	var first error
	for p := range paths {
		if err := s.fs.DropLocks(ctx, p, l.holder); err != nil && first == nil {
			first = err
		}
	}
	return first
}
