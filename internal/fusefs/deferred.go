package fusefs

// Deferred creates and held writes (Options.CacheTimeout above 0). A file
// created without O_EXCL or O_APPEND is not committed at its create: the
// mount keeps the bytes written to it from its start, up to deferBytesMax,
// and commits the file with them in one commit (tyrfs.WriteFile) when it is first closed,
// synced or used otherwise. Writing a small file (open, write, close) is
// then one commit, not one for the create and one for each write.
//
// Writes through any other descriptor that may write, but appends, are
// held the same way: the mount keeps a run of contiguous writes, up to
// deferBytesMax (heldBytesMax over the mount), and commits it in one
// commit at the close, at an fsync, at a write that does not continue it,
// or at any other use, as a deferred create. Writing a file in 4 KiB
// writes is then one commit per MiB, not one per write.
//
// Close-to-open holds: other mounts see the file once the close that
// committed it returned, and this mount sees it at once, since any other
// request on the file, or naming it in its directory, commits it first:
//
//  1. A node's deferred create and held writes are committed before any
//     request on the node but a write they can take (contiguous with
//     them, within deferBytesMax) is answered.
//  2. A lookup, create, mkdir, mknod, symlink or unlink of a name commits
//     the deferred create and held writes of that name in that directory
//     first; a listing commits those of its directory; a rename or rmdir
//     commits every one of the mount, since it may move or empty their
//     directories.
//  3. A deferred create whose commit failed leaves no file, and its error
//     answers every later write, fsync and close of the file: close(2) of
//     a file whose create failed fails. Other requests on it find no file,
//     and the kernel is told to forget its name.
//  4. The attributes the kernel holds of the file are the committed
//     file's: the create gives it the times of the create, and a file
//     not written before its commit is committed with them
//     (tyrfs.CreateAt); a write makes the kernel ask for the times again;
//     a file found made meanwhile has its attributes dropped.
//  5. Held writes are committed within Options.HoldFor of the first, if nothing
//     committed them before (a write through a shared memory map may come
//     with no close after it). If their commit fails, the kernel's pages
//     of the file, which hold their bytes, are dropped, and the error
//     answers the file's next write, fsync or close, once, as NFS reports
//     the errors of the writes it holds.
//  6. Once the mount drains (Server.Drain: tyr mount at SIGINT or SIGTERM,
//     before it unmounts), no create is deferred and no write held any
//     more, and when Drain returns every create deferred and write held
//     before it is committed, or its error reported: the gate orders each
//     deferral before the drain or after it, and one after it is refused.
//
// What the caller sees differently: errors of the create (the parent
// removed meanwhile through another mount, no space) come at a write or
// at close, not at open; a file created meanwhile under the same name
// through another mount is opened as open(2) without O_EXCL opens an
// existing file (truncated if O_TRUNC was given), as when the create
// commits first. Errors of held writes come at a later write or at close,
// not at the write. A mount killed before the close loses the file, or
// the writes held; tyr mount stopped by a signal drains first (invariant
// 6).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/tyrstore/tyr/tyrfs"
)

// deferBytesMax is the most bytes a deferred create, or a file's held
// writes, hold; a write past it commits them first.
const deferBytesMax = 1 << 20

// heldBytesMax is the most bytes of held writes a mount keeps, over all
// its files; past it, writes commit before they return.
const heldBytesMax = 64 << 20

// pending is the mount's deferred creates and files with writes held,
// and its files unlinked while open (unlinked.go).
type pending struct {
	mu    sync.Mutex
	nodes map[*node]struct{}
	// unlinked are the files under a hidden name until their last
	// release. Guarded by mu.
	unlinked map[*node]struct{}
	// heldBytes is the bytes of the mount's held writes, at most
	// heldBytesMax.
	heldBytes atomic.Int64
	// holdFor is Options.HoldFor, or its default.
	holdFor time.Duration
	// gate is held for reading by each new deferral, from its check of
	// draining to its add, and for writing to set draining (invariant 6).
	gate     sync.RWMutex
	draining bool
}

// enter reports whether a create may be deferred or a write held
// (invariant 6); if so, the caller adds its node and then calls leave.
func (p *pending) enter() bool {
	p.gate.RLock()
	if p.draining {
		p.gate.RUnlock()
		return false
	}
	return true
}

func (p *pending) leave() { p.gate.RUnlock() }

// drain stops new deferrals and commits every one pending (invariant 6).
// It returns the errors of the commits that failed, each naming its file;
// the file's close still reports its own.
func (p *pending) drain(ctx context.Context) error {
	p.gate.Lock()
	p.draining = true
	p.gate.Unlock()
	var failed []error
	for _, n := range p.matching(nil, "") {
		n.createMu.Lock()
		errno := n.settleLocked(ctx)
		if errno == 0 {
			errno = n.writeErr
		}
		n.createMu.Unlock()
		if errno != 0 {
			name, _ := n.path()
			if name == "" {
				name, _ = n.Parent()
			}
			failed = append(failed, fmt.Errorf("%s: %w", name, errno))
		}
	}
	return errors.Join(failed...)
}

func (p *pending) add(n *node) {
	p.mu.Lock()
	p.nodes[n] = struct{}{}
	p.mu.Unlock()
}

func (p *pending) remove(n *node) {
	p.mu.Lock()
	delete(p.nodes, n)
	p.mu.Unlock()
}

// matching returns the nodes pending whose parent is dir and whose name is
// name ("": any), or all of them for a nil dir.
func (p *pending) matching(dir *fs.Inode, name string) []*node {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*node
	for c := range p.nodes {
		if dir == nil {
			out = append(out, c)
			continue
		}
		if nm, parent := c.Parent(); parent == dir && (name == "" || nm == name) {
			out = append(out, c)
		}
	}
	return out
}

// deferredCreate is a create not committed yet: the owner and flags it was
// made with, and the bytes written from the file's start.
type deferredCreate struct {
	owner tyrfs.Owner
	trunc bool
	data  []byte
	// at is the time of the create (ns since the epoch), which the
	// kernel was given as the file's times.
	at int64
}

// heldWrites is a file's writes held until its close: data, to be
// written at off.
type heldWrites struct {
	off  uint64
	data []byte
	// timer commits them Options.HoldFor after the first (invariant 5).
	timer *time.Timer
}

// holdForDefault is Options.HoldFor's default.
const holdForDefault = time.Second

// hold takes the write of data at off into n's deferred create or held
// writes, if it continues them (invariant 1) within deferBytesMax and
// heldBytesMax, and reports whether it did. n.createMu is held.
func (n *node) hold(off uint64, data []byte) bool {
	if d := n.deferred; d != nil {
		if off != uint64(len(d.data)) || len(d.data)+len(data) > deferBytesMax {
			return false
		}
		d.data = append(d.data, data...)
		return true
	}
	h := n.held
	if h == nil || off != h.off+uint64(len(h.data)) || len(h.data)+len(data) > deferBytesMax || !n.pending.reserve(len(data)) {
		return false
	}
	h.data = append(h.data, data...)
	return true
}

// holdNew holds the write of data at off as n's first held write, within
// deferBytesMax and heldBytesMax, and reports whether it did. n has no
// deferred create or held writes; n.createMu is held.
func (n *node) holdNew(off uint64, data []byte) bool {
	if len(data) > deferBytesMax || !n.pending.enter() {
		return false
	}
	defer n.pending.leave()
	if !n.pending.reserve(len(data)) {
		return false
	}
	n.held = &heldWrites{off: off, data: append(make([]byte, 0, min(2*len(data), deferBytesMax)), data...)}
	n.held.timer = time.AfterFunc(n.pending.holdFor, func() {
		ctx, cancel := detach(context.Background())
		defer cancel()
		n.settle(ctx)
	})
	n.pending.add(n)
	return true
}

// reserve counts bytes more of held writes, unless that passes
// heldBytesMax, and reports whether it did.
func (p *pending) reserve(bytes int) bool {
	if p.heldBytes.Add(int64(bytes)) > heldBytesMax {
		p.heldBytes.Add(-int64(bytes))
		return false
	}
	return true
}

// takeWriteErr returns the error of held writes whose commit failed, once.
// n.createMu is held.
func (n *node) takeWriteErr() syscall.Errno {
	errno := n.writeErr
	n.writeErr = 0
	return errno
}

// settle commits n's deferred create, if any, and its held writes
// (invariant 1), and returns the create's error, or that of the failed
// commit of an earlier create (invariant 3). The error of held writes is
// kept for the next write, fsync or close (invariant 5).
func (n *node) settle(ctx context.Context) syscall.Errno {
	n.createMu.Lock()
	defer n.createMu.Unlock()
	return n.settleLocked(ctx)
}

// settleLocked is settle with n.createMu held.
func (n *node) settleLocked(ctx context.Context) syscall.Errno {
	errno := n.commitCreate(ctx)
	if errno == 0 {
		n.commitHeld(ctx)
	}
	if n.deferred == nil && n.held == nil {
		n.pending.remove(n)
	}
	return errno
}

// commitHeld commits n's held writes, if any, in one commit; if it fails,
// its error is kept in writeErr, and the kernel's pages of the file, which
// hold the bytes, are dropped (invariant 5). n.createMu is held.
func (n *node) commitHeld(ctx context.Context) {
	h := n.held
	if h == nil {
		return
	}
	n.held = nil
	h.timer.Stop()
	n.pending.heldBytes.Add(-int64(len(h.data)))
	p, ok := n.path()
	err := error(syscall.ENOENT)
	if ok {
		err = n.writeKept(ctx, p, h.off, h.data)
	}
	if err != nil {
		n.writeErr = tyrfs.Errno(err)
		// Not waited for: the request in progress may be a write, whose
		// pages the kernel keeps locked until it returns.
		go n.NotifyContent(0, 0)
	}
}

// commitCreate commits n's deferred create, if any, and returns its error,
// or that of the failed commit of an earlier one. n.createMu is held.
func (n *node) commitCreate(ctx context.Context) syscall.Errno {
	d := n.deferred
	if d == nil {
		return n.createErr
	}
	n.deferred = nil
	p, ok := n.path()
	name, parent := n.Parent()
	if !ok || parent == nil {
		n.createErr = syscall.ENOENT
		return n.createErr
	}
	// The create changes its directory (dirattr.go).
	change := &dirChange{}
	if dir, ok := parent.Operations().(*node); ok {
		change = dir.change()
		defer change.end()
	}
	var a tyrfs.Attr
	var err error
	if len(d.data) == 0 {
		// Not written since: the file keeps the times the create gave
		// the kernel, which a stat may still be answered from. (A write
		// through the kernel makes it ask for the times again.)
		a, err = n.fs.CreateAt(ctx, p, d.owner, d.at)
	} else {
		a, err = n.fs.WriteFile(ctx, p, d.owner, d.data)
	}
	exists := tyrfs.Errno(err) == syscall.EEXIST
	if exists {
		// Made meanwhile through another mount: opened as it is, then
		// written.
		if _, err = openExisting(ctx, n.fs, p, d.trunc); err == nil && len(d.data) > 0 {
			err = n.fs.WriteAt(ctx, p, 0, d.data)
		}
	}
	if err != nil {
		n.createErr = tyrfs.Errno(err)
		// The kernel drops the name it was given at the create. Not
		// before this returns: the caller may be a request on the
		// directory, which the kernel's invalidation would wait for.
		go parent.NotifyEntry(name)
		return n.createErr
	}
	if exists {
		// The kernel drops the attributes the create gave it, which
		// are not the file's. Attributes alone (a negative offset),
		// which waits on no lock the request in progress may hold.
		n.NotifyContent(-1, 0)
		return 0
	}
	if len(d.data) <= tyrfs.WriteFileBytesMax {
		change.create(name, a) // one commit
	}
	// The kernel holds the bytes written, which are the file's at the
	// version made.
	n.mu.Lock()
	n.setPagesLocked(a.Version)
	n.mu.Unlock()
	return 0
}

// settleChildren commits the deferred creates of n's child name, or of
// all its children for an empty name (invariant 2). A failed one's error
// is its file's (invariant 3), not the caller's.
func (n *node) settleChildren(ctx context.Context, name string) {
	for _, c := range n.pending.matching(n.EmbeddedInode(), name) {
		c.settle(ctx)
	}
}

// settleMount commits every deferred create of the mount (invariant 2).
func (n *node) settleMount(ctx context.Context) {
	for _, c := range n.pending.matching(nil, "") {
		c.settle(ctx)
	}
}

// openExisting opens file p, which exists, for a create without O_EXCL:
// EISDIR for a directory, truncated for trunc.
func openExisting(ctx context.Context, f *tyrfs.FS, p string, trunc bool) (tyrfs.Attr, error) {
	a, err := f.Lookup(ctx, p)
	if err == nil && a.Kind == tyrfs.KindDir {
		return tyrfs.Attr{}, syscall.EISDIR
	}
	if err == nil && trunc {
		var zero uint64
		a, err = f.Setattr(ctx, p, tyrfs.KindFile, tyrfs.SetAttr{Size: &zero})
	}
	return a, err
}
