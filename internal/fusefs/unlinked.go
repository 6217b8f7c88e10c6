package fusefs

// Files unlinked while open. POSIX keeps a file that is unlinked while
// open readable and writable through the descriptors open on it, until
// the last of them is closed, and so does rename(2) with the file it
// replaces. A TýrFS file is the blob of its path, so removing the name
// removes the data. For the descriptors of this mount, the mount does
// what NFS clients do: an unlink of a file it holds open renames the
// file to a hidden name in its directory (.tyr-unlinked-<mount>-<n>),
// and the last release of the file removes it. A rename over a file it
// holds open moves that file to a hidden name in the rename's own
// commit (tyrfs.RenameKeeping), so the replacement stays atomic; a file
// the rename cannot keep so (1 MiB or more, or a staple: it would have
// to be stapled in the same commit that writes the new file to its key)
// is replaced.
//
//  1. A file node's opens count the descriptors the kernel holds on it
//     through this mount: each open and create that succeeds adds one,
//     each release takes one (guarded by openMu).
//  2. An unlink of a file whose opens are above 0 renames it to a name
//     no other file has (RENAME_NOREPLACE; one commit, so other mounts
//     see the old name or the hidden one, never both or neither), and a
//     rename over it keeps it under such a name in the rename's commit;
//     either moves the node to that name and marks it unlinked. openMu
//     is held from the check to the mark, and by the release, so the
//     last release either comes before the check (the unlink removes the
//     file) or after the mark (the release removes the hidden file): it
//     is removed once, after the last descriptor is closed.
//  3. An unlinked node reports no links (st_nlink 0), as an unlinked
//     file does.
//
// What differs from a local file system: other mounts see the hidden
// name in its directory until the last close (an rmdir of the directory
// then fails with ENOTEMPTY, as on NFS). tyr mount removes the hidden
// files still open when it stops (Server.RemoveUnlinked), since no
// descriptor can use them after; a mount killed (SIGKILL) while it holds
// one leaves it behind, to be removed by hand. A
// file unlinked or replaced through another mount, or replaced when it
// cannot be kept, while open here is gone for this mount's descriptors
// too (they read EIO).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/tyrstore/tyr/tyrfs"
)

// unlinkedPrefix starts the hidden names of this process's files
// unlinked while open: a random part tells its mounts from other
// processes'.
var unlinkedPrefix = fmt.Sprintf(".tyr-unlinked-%08x-", rand.Uint32())

// unlinkedSeq numbers the hidden names of this process.
var unlinkedSeq atomic.Uint64

// opened counts a descriptor the kernel now holds on n (invariant 1);
// h, its handle, takes it back at its release.
func (n *node) opened(h *handle) {
	n.openMu.Lock()
	n.opens++
	n.openMu.Unlock()
	h.node = n
}

// Release implements fs.FileReleaser: the last release of a file
// unlinked while open removes it (invariant 2).
func (h *handle) Release(ctx context.Context) syscall.Errno {
	n := h.node
	if n == nil {
		return 0
	}
	n.releaseLocks(ctx, h)
	n.openMu.Lock()
	defer n.openMu.Unlock()
	if n.opens == 0 {
		return 0 // its hidden file removed already (RemoveUnlinked)
	}
	if n.opens--; n.opens > 0 || !n.unlinked.Load() {
		return 0
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	n.settle(ctx) // nothing is left to commit to the name afterwards
	name, parent := n.Parent()
	p, ok := n.path()
	if !ok || parent == nil {
		return 0 // removed by name meanwhile
	}
	if errno := n.removeHidden(ctx, p); errno != 0 {
		return errno
	}
	parent.RmChild(name)
	// The kernel drops the name if a listing made it look it up. Not
	// waited for: a request on the directory may be waiting for this one.
	go parent.NotifyEntry(name)
	return 0
}

// openChild returns n's child name if it is a file open through the
// mount and not unlinked yet, with its openMu held (the caller unlocks
// it), or nil.
func (n *node) openChild(name string) *node {
	ch := n.GetChild(name)
	if ch == nil || ch.StableAttr().Mode != syscall.S_IFREG {
		return nil
	}
	c, ok := ch.Operations().(*node)
	if !ok {
		return nil
	}
	c.openMu.Lock()
	if c.opens == 0 || c.unlinked.Load() {
		c.openMu.Unlock()
		return nil
	}
	return c
}

// hide moves open child c of n from name to the hidden name it was just
// given in the cluster, and marks it unlinked (invariant 2). go-fuse
// drops the name once the request returns; the node is under the hidden
// name by then.
func (n *node) hide(c *node, name, hidden string) {
	n.MvChild(name, n.EmbeddedInode(), hidden, true)
	c.unlinked.Store(true)
	n.pending.mu.Lock()
	n.pending.unlinked[c] = struct{}{}
	n.pending.mu.Unlock()
}

// removeHidden removes unlinked node n's hidden file at p, once its last
// descriptor is closed or can no longer be used. n.openMu is held.
func (n *node) removeHidden(ctx context.Context, p string) syscall.Errno {
	if err := n.fs.Unlink(ctx, p); err != nil && tyrfs.Errno(err) != syscall.ENOENT {
		return tyrfs.Errno(err)
	}
	n.opens = 0
	n.pending.mu.Lock()
	delete(n.pending.unlinked, n)
	n.pending.mu.Unlock()
	return 0
}

// RemoveUnlinked removes the hidden files of the files unlinked while
// open that are still open: for tyr mount once it stopped serving, when
// no descriptor can use them any more (a release that still comes finds
// none). It returns the errors of the removals that failed, each naming
// its file.
func (s *Server) RemoveUnlinked(ctx context.Context) error {
	s.pending.mu.Lock()
	nodes := make([]*node, 0, len(s.pending.unlinked))
	for n := range s.pending.unlinked {
		nodes = append(nodes, n)
	}
	s.pending.mu.Unlock()
	var failed []error
	for _, n := range nodes {
		n.openMu.Lock()
		if p, ok := n.path(); ok && n.opens > 0 {
			if errno := n.removeHidden(ctx, p); errno != 0 {
				failed = append(failed, fmt.Errorf("%s: %w", p, errno))
			}
		}
		n.openMu.Unlock()
	}
	return errors.Join(failed...)
}

// hiddenName returns a new hidden name (invariant 2).
func hiddenName() string {
	return fmt.Sprintf("%s%d", unlinkedPrefix, unlinkedSeq.Add(1))
}

// unlinkOpen is the unlink of n's child name at path p, when it is a file
// open through the mount: it renames the file to a hidden name and
// returns true (invariant 2). It returns false, holding nothing, for a
// child not open, not known or already unlinked, which the caller removes.
func (n *node) unlinkOpen(ctx context.Context, name, p string) (bool, syscall.Errno) {
	c := n.openChild(name)
	if c == nil {
		return false, 0
	}
	defer c.openMu.Unlock()
	hidden := hiddenName()
	hp, errno := n.child(hidden)
	if errno != 0 {
		return true, errno
	}
	defer n.change().end()
	if err := n.fs.Rename(ctx, p, hp, tyrfs.RenameNoReplace); err != nil {
		if tyrfs.Errno(err) == syscall.ENAMETOOLONG {
			return false, 0 // no room for the hidden name: removed
		}
		return true, tyrfs.Errno(err)
	}
	n.hide(c, name, hidden)
	return true, 0
}

// renameOver is the rename of from over n's child name at to: a file
// open through the mount there is kept under a hidden name when the
// rename can keep it (tyrfs.RenameKeeping), and handled then as one
// unlinked while open (invariant 2); otherwise it is replaced, and gone
// for its descriptors too.
func (n *node) renameOver(ctx context.Context, from, name, to string, flags uint32) syscall.Errno {
	if n.locks == nil || from == to {
		errno, _ := n.renameKeeping(ctx, from, name, to, flags)
		return errno
	}
	// The rename moves the lock tables of what it moves; the mount's
	// locks follow (locks.go, invariant 1).
	n.locks.startRename()
	errno, kept := n.renameKeeping(ctx, from, name, to, flags)
	n.locks.endRename(errno == 0, from, to, kept)
	return errno
}

// renameKeeping is renameOver but for the locks, and also returns the
// path the file it replaced was kept at ("" if none).
func (n *node) renameKeeping(ctx context.Context, from, name, to string, flags uint32) (syscall.Errno, string) {
	c := n.openChild(name)
	if c == nil {
		return tyrfs.Errno(n.fs.Rename(ctx, from, to, flags)), ""
	}
	defer c.openMu.Unlock()
	hidden := hiddenName()
	kept, err := n.fs.RenameKeeping(ctx, from, to, hidden, flags)
	if tyrfs.Errno(err) == syscall.ENAMETOOLONG {
		// No room for the hidden name: replaced.
		kept, err = n.fs.RenameKeeping(ctx, from, to, "", flags)
	}
	if err != nil {
		return tyrfs.Errno(err), ""
	}
	if !kept {
		return 0, ""
	}
	n.hide(c, name, hidden)
	return 0, path.Join(path.Dir(to), hidden)
}

var _ fs.FileReleaser = (*handle)(nil)
