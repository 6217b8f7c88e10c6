package fusefs

// Directories' attributes kept by the mount (Options.CacheTimeout or
// DirCacheTimeout above 0). The kernel drops a directory's attributes
// whenever an entry of it changes through the mount, and asks for them at
// the next path walk through it, to check search permission itself
// (default_permissions): a loop of creates in one directory would read the
// directory's header from the cluster once a create. So the mount keeps
// the attributes a stat of a directory read, for as long as the kernel
// may keep them (node.dirCache), and applies to them the creates and
// removals it commits in that directory: a loop of unlinks (rm -r) or of
// creates then reads them once.
//
// Invariants:
//
//  1. Kept attributes are the cluster's as read at most dirCache ago, with
//     every change made through this mount since applied: a directory
//     changed only through this mount stats as the cluster holds it. What
//     other mounts (or the servers' compaction of its log, which shrinks
//     its size) changed meanwhile may show late, by dirCache at most, as
//     the kernel's own cache would show it.
//  2. A change of the directory through the mount other than a create
//     (of a file, directory, symbolic link or special file) or a removal
//     (unlink, rmdir) committed alone in it (any other change, as a
//     rename, or two at once) drops them.
//  3. Attributes read while a change of the directory through the mount
//     began are not kept.

import (
	"time"

	"github.com/tyrstore/tyr/tyrfs"
)

// keptAttr is a directory's kept attributes. Guarded by node.mu.
type keptAttr struct {
	a tyrfs.Attr
	// until is when a stops being usable (zero: nothing kept).
	until time.Time
	// changing counts the changes of the directory through the mount in
	// progress; changes counts those begun.
	changing int
	changes  uint64
}

// keptDirAttr returns n's kept attributes if they are usable now;
// otherwise the count of changes begun, to hand to keepDirAttr.
func (n *node) keptDirAttr() (tyrfs.Attr, uint64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := &n.kept
	if k.changing == 0 && time.Now().Before(k.until) {
		return k.a, 0, true
	}
	return tyrfs.Attr{}, k.changes, false
}

// keepDirAttr keeps a, read from the cluster starting at read, unless a
// change through the mount began since changes was counted (invariant 3).
func (n *node) keepDirAttr(a tyrfs.Attr, changes uint64, read time.Time) {
	if n.dirCache == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if k := &n.kept; k.changing == 0 && k.changes == changes {
		k.a, k.until = a, read.Add(n.dirCache)
	}
}

// dirChange is a change of directory dir through the mount, in progress:
// made by dir.change, ended by end once the change is done or failed.
type dirChange struct {
	dir *node
	// known is set when the change is known exactly: it made (or, if
	// removed, removed) the entry name, committed with the directory's
	// new times at ctime.
	known   bool
	removed bool
	name    string
	ctime   int64
	subdir  bool // the entry is a directory's
}

// change records the start of a change of directory n through the mount.
func (n *node) change() *dirChange {
	n.mu.Lock()
	k := &n.kept
	k.changing++
	k.changes++
	n.mu.Unlock()
	return &dirChange{dir: n}
}

// create records that the change made the node name in the directory,
// with the new node's attributes a (tyrfs's creates commit the entry and
// the directory's new times, a's ctime, at once, and for a new directory
// its parent's count of subdirectories): the directory's log grew by the
// entry's record, its mtime and ctime became a's ctime (or stayed, if
// later: a create committed at the time it was answered, tyrfs.CreateAt,
// moves them forward only), and a directory made there added a link if
// the directory counts them (fslayout, invariant 6).
func (c *dirChange) create(name string, a tyrfs.Attr) {
	c.known, c.name, c.ctime, c.subdir = true, name, a.Ctime, a.Kind == tyrfs.KindDir
}

// remove records that the change removed the entry name, a directory's if
// subdir, setting the directory's mtime and ctime to t (tyrfs.UnlinkAt,
// tyrfs.RmdirAt): the log grew by the removal's record, and a directory
// removed took its link away if the directory counts them.
func (c *dirChange) remove(name string, t int64, subdir bool) {
	c.known, c.removed, c.name, c.ctime, c.subdir = true, true, name, t, subdir
}

// end ends the change, applying what it did to the kept attributes if it
// was the only change in progress and is known exactly (invariants 1, 2);
// otherwise it drops them.
func (c *dirChange) end() {
	n := c.dir
	n.mu.Lock()
	defer n.mu.Unlock()
	k := &n.kept
	alone := k.changing == 1
	k.changing--
	if !c.known || !alone || k.until.IsZero() {
		k.until = time.Time{}
		return
	}
	k.a.Size += tyrfs.DirEntryBytes(c.name)
	links := uint32(0)
	if c.subdir && k.a.LinksCounted {
		links = 1
	}
	if c.removed {
		// tyrfs.UnlinkAt and RmdirAt set the times, where a create
		// answered before its commit (tyrfs.CreateAt) moves them
		// forward only.
		k.a.Mtime, k.a.Ctime = c.ctime, c.ctime
		k.a.Nlink -= links
	} else {
		k.a.Mtime, k.a.Ctime = max(k.a.Mtime, c.ctime), max(k.a.Ctime, c.ctime)
		k.a.Nlink += links
	}
}
