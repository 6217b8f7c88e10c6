// Package fusefs mounts a TýrFS file system (tyrfs) with FUSE, on
// go-fuse's node API. Each FUSE request becomes one tyrfs call, which reads
// or commits in the cluster before the request is answered: a write is
// committed on the keyspace's replicas (and on their disks if the keyspace
// syncs) when write(2) returns, so fsync has nothing left to do; but with
// Options.CacheTimeout, a new file's create and first bytes are committed
// together at its close (deferred.go).
//
// With Options.CacheTimeout, the kernel keeps names, attributes and pages,
// and an open asks the cluster whether the file changed since the last
// open: one request reads its header, whose version changes with every
// commit to the file (fslayout.Attr.Version), and its first bytes. An
// unchanged file keeps its pages (FOPEN_KEEP_CACHE), so reading it again
// costs no round trip; a changed one has its pages and attributes dropped
// before the open returns, and the bytes read given to the kernel.
//
// Nodes keep no path: a node's path is computed from its place in go-fuse's
// tree at each request, so a rename through this mount moves the open
// files under it too. A file unlinked or replaced by a rename through the
// mount while open is kept under a hidden name until its last close
// (unlinked.go). A node whose name was removed otherwise answers ENOENT,
// and EIO to a stat through an open descriptor, as a stale handle: its
// data is gone with its blob.
//
// Not supported, each refused with the errno in parentheses: hard links
// (EPERM), extended attributes (ENOTSUP: the mount answers the first
// xattr request ENOSYS, after which the kernel answers them all ENOTSUP
// itself, and no longer asks for security.capability before each write),
// RENAME_EXCHANGE (EINVAL). FIFOs, sockets and device
// nodes are names with attributes; the kernel of the machine that opens
// one gives it meaning. Advisory locks (flock, fcntl) hold across mounts,
// kept in the cluster under leases (locks.go), unless Options.LocalLocks
// leaves them to the kernel.
package fusefs

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/tyrstore/tyr/tyrfs"
)

// Options tune a mount. The zero value means the defaults.
type Options struct {
	// CacheTimeout is how long the kernel may keep names and attributes
	// without asking again. Default 0: every lookup and stat goes to the
	// cluster, so a change made through another mount is seen at the next
	// system call, and the kernel keeps no pages past a close. Above 0, a
	// stat or path walk may show a file, directory or name removed as it
	// was for up to this long, but close-to-open holds for files: each
	// open asks the cluster whether the file changed (one read) and drops
	// the kernel's pages and attributes of it if it did, so an open sees
	// every change committed before it; pages of an unchanged file are
	// kept and read again without a round trip. Names are never cached as
	// absent, so a file created through another mount can be opened at
	// once. A file created without O_EXCL or O_APPEND is committed at
	// its first close (deferred.go).
	CacheTimeout time.Duration
	// DirCacheTimeout is how long the kernel may keep the names and
	// attributes of directories, if longer than CacheTimeout. Files'
	// names and attributes still follow CacheTimeout, so close-to-open
	// holds for files whatever this is; a directory removed, renamed or
	// changed through another mount may still be walked through and
	// stat'ed here as it was, for up to this long. Listings are never
	// cached.
	DirCacheTimeout time.Duration
	// HoldFor is the longest writes are held with the cache (deferred.go):
	// writes that come with no close after them (through a shared memory
	// map) are committed then. 0: a second.
	HoldFor time.Duration
	// Debug logs every FUSE request.
	Debug bool
	// LocalLocks leaves advisory locks (flock, fcntl) to the kernel, which
	// keeps them between the processes of this mount only, and lets the
	// close of a descriptor with nothing to commit cost no request.
	// Otherwise locks hold across mounts (locks.go).
	LocalLocks bool
	// LockLease is how long a lock of this mount lasts in the cluster
	// without a renewal, which the mount makes every third of it: the
	// longest other mounts wait for the locks of a mount that died.
	// Default LockLeaseDefault; at least LockLeaseMin.
	LockLease time.Duration
	// AllowOther lets users other than the one mounting use the mount
	// (FUSE's allow_other: root, or user_allow_other in /etc/fuse.conf);
	// the kernel still checks each access against the modes and owners.
	AllowOther bool
	// ReadOnly mounts the file system read-only (FUSE's ro): the kernel
	// refuses every change through the mount with EROFS before it reaches
	// the mount, and reads, stats, listings and advisory locks work as
	// on a writable mount. Other mounts may still change the files, and
	// this one shows their changes as any mount does.
	ReadOnly bool
}

// Server is a mounted TýrFS file system.
type Server struct {
	*fuse.Server
	pending *pending
	fs      *tyrfs.FS
	locks   *lockState // nil with Options.LocalLocks
}

// Drain makes the mount commit every create and write before answering
// it from now on, and commits the creates it deferred and the writes it
// holds (deferred.go, invariant 6): once it returns, everything written
// through the mount is in the cluster, whether its files are still open
// or not. It returns the errors of the commits that failed, each naming
// its file. tyr mount drains at SIGINT and SIGTERM, before it unmounts,
// and once unmounted.
func (s *Server) Drain(ctx context.Context) error {
	return s.pending.drain(ctx)
}

// Subtype is a TýrFS mount's FUSE subtype: its type is fuse.tyrfs (in
// /proc/self/mountinfo and /etc/fstab), and mount.fuse3 runs the program
// of that name to make one.
const Subtype = "tyrfs"

// Mount mounts f at dir and serves it until it is unmounted (Unmount on
// the returned server, fusermount3 -u, or umount). The caller waits with
// server.Wait.
func Mount(dir string, f *tyrfs.FS, name string, o Options) (*Server, error) {
	timeout, none := o.CacheTimeout, time.Duration(0)
	if err := CheckLockLease(o.LockLease); err != nil {
		return nil, err
	}
	var locks *lockState
	if !o.LocalLocks {
		locks = newLockState(o.LockLease)
	}
	p := &pending{nodes: map[*node]struct{}{}, unlinked: map[*node]struct{}{}, holdFor: cmp.Or(o.HoldFor, holdForDefault)}
	root := &node{fs: f, dirCache: max(o.CacheTimeout, o.DirCacheTimeout), revalidate: timeout > 0, pending: p, locks: locks}
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName: name,
			Name:   Subtype,
			// The kernel checks permissions against the modes and owners
			// the file system reports.
			Options:    []string{"default_permissions"},
			Debug:      o.Debug,
			AllowOther: o.AllowOther,
			// With the cache, the opens drop the kernel's pages of a file
			// that changed (node.Open); the kernel's own dropping them
			// whenever new attributes show another mtime would drop the
			// bytes an open just gave it, or wrote through it, at the
			// first stat.
			ExplicitDataCacheControl: timeout > 0,
			// Extended attributes are not stored (see the package doc).
			DisableXAttrs: true,
			// Locks go to the mount, and on to the cluster (locks.go).
			EnableLocks: locks != nil,
		},
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		NegativeTimeout: &none,
	}
	if o.ReadOnly {
		opts.MountOptions.Options = append(opts.MountOptions.Options, "ro")
	}
	var raw fuse.RawFileSystem = fs.NewNodeFS(root, opts)
	if locks != nil {
		raw = &rawFS{RawFileSystem: raw, locks: locks}
	}
	srv, err := fuse.NewServer(raw, dir, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return nil, err
	}
	if locks != nil {
		stop := make(chan struct{})
		go locks.renew(f, stop)
		go func() {
			srv.Wait()
			close(stop)
		}()
	}
	return &Server{Server: srv, pending: p, fs: f, locks: locks}, nil
}

// node is a file, directory or symbolic link of the mount.
type node struct {
	fs.Inode
	fs *tyrfs.FS
	// dirCache is how long the kernel may keep a directory's name and
	// attributes (Options.DirCacheTimeout).
	dirCache time.Duration
	// revalidate is set when the kernel keeps files' attributes and
	// pages (Options.CacheTimeout above 0): an open then checks the file's
	// version against pages.
	revalidate bool
	// pending is the mount's deferred creates (deferred.go).
	pending *pending
	// locks is the mount's advisory locks (locks.go), nil if the kernel
	// keeps them (Options.LocalLocks).
	locks *lockState

	// createMu serializes the commit of a deferred create with the
	// requests on the node.
	createMu sync.Mutex
	// deferred is the node's create while deferred (nil otherwise), and
	// createErr the error its commit failed with. Guarded by createMu.
	deferred  *deferredCreate
	createErr syscall.Errno
	// held is the file's writes held until its close, nil if none, and
	// writeErr the error of held writes whose commit failed, until a
	// write, fsync or close returns it (deferred.go). Guarded by
	// createMu.
	held     *heldWrites
	writeErr syscall.Errno

	mu sync.Mutex
	// pages is the version of the file the kernel's pages are of (0:
	// none known): the one the last open found, or the one a create or a
	// write through this node made when the file was at pages before it
	// (tyrfs.WriteAtFrom), since the kernel keeps the bytes written
	// through it in its pages. Otherwise the kernel's pages and
	// attributes of the file are of that version or newer ones written
	// through this mount, whose writes leave a newer version in the
	// cluster. Guarded by mu.
	pages uint64
	// pagesGen counts the changes of pages, so that an open, which sets
	// it without holding mu while it fills the kernel's pages, can tell
	// whether a write came between. Guarded by mu.
	pagesGen uint64
	// fillMu orders the opens that drop and fill the kernel's pages. No
	// write waits for it.
	fillMu sync.Mutex
	// fresh is the version of the attributes the lookup that made this
	// node gave the kernel, while they are the only ones it gave of it
	// (0 otherwise). The kernel asks nothing else of a node before it
	// knows it, so an open that finds this version need not drop them.
	// Guarded by mu.
	fresh uint64
	// kept is a directory's attributes the mount keeps (dirattr.go).
	// Guarded by mu.
	kept keptAttr

	// openMu guards opens, the descriptors the kernel holds on the file
	// through the mount, and orders an unlink of the file with their
	// releases; unlinked is set once the file was unlinked while open and
	// renamed to a hidden name (unlinked.go).
	openMu   sync.Mutex
	opens    int
	unlinked atomic.Bool
}

// forgetPages records that the file changed through n other than by a
// write that checks the version of the kernel's pages (see pages).
func (n *node) forgetPages() {
	n.mu.Lock()
	n.setPagesLocked(0)
	n.mu.Unlock()
}

// setPagesLocked sets pages to v. n.mu is held.
func (n *node) setPagesLocked(v uint64) {
	n.pages = v
	n.pagesGen++
}

// sentAttr records that a reply other than the lookup that made n gives
// the kernel attributes of n: the kernel's may now be of any version.
func (n *node) sentAttr() {
	n.mu.Lock()
	n.fresh = 0
	n.mu.Unlock()
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeReader     = (*node)(nil)
	_ fs.NodeWriter     = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeFlusher    = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeMknoder    = (*node)(nil)
	_ fs.NodeAllocater  = (*node)(nil)
)

// path returns n's absolute path, and false if n is in no directory.
func (n *node) path() (string, bool) {
	var names []string
	in := n.EmbeddedInode()
	for !in.IsRoot() {
		name, parent := in.Parent()
		if parent == nil {
			return "", false
		}
		names = append(names, name)
		in = parent
	}
	p := ""
	for i := len(names) - 1; i >= 0; i-- {
		p += "/" + names[i]
	}
	if p == "" {
		p = "/"
	}
	return p, true
}

// child returns the path of n's child name.
func (n *node) child(name string) (string, syscall.Errno) {
	p, ok := n.path()
	if !ok {
		return "", syscall.ENOENT
	}
	if p == "/" {
		return "/" + name, 0
	}
	return p + "/" + name, 0
}

// kind is the tyrfs kind whose key holds n: KindDir for a directory,
// KindFile for a file or a symbolic link (both live under file keys).
func (n *node) kind() tyrfs.Kind {
	if n.StableAttr().Mode == syscall.S_IFDIR {
		return tyrfs.KindDir
	}
	return tyrfs.KindFile
}

func typeBits(k tyrfs.Kind) uint32 {
	switch k {
	case tyrfs.KindDir:
		return syscall.S_IFDIR
	case tyrfs.KindSymlink:
		return syscall.S_IFLNK
	case tyrfs.KindFifo:
		return syscall.S_IFIFO
	case tyrfs.KindSocket:
		return syscall.S_IFSOCK
	case tyrfs.KindChar:
		return syscall.S_IFCHR
	case tyrfs.KindBlock:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}

// blockBytes is the block size the mount reports.
const blockBytes = 4096

func fillAttr(a tyrfs.Attr, out *fuse.Attr) {
	out.Mode = typeBits(a.Kind) | a.Mode
	out.Size = a.Size
	out.Blocks = (a.Size + 511) / 512
	out.Blksize = blockBytes
	out.Nlink = a.Nlink
	if out.Nlink == 0 { // attributes not read from a header
		out.Nlink = 1
		if a.Kind == tyrfs.KindDir {
			out.Nlink = 2
		}
	}
	out.Uid, out.Gid = a.UID, a.GID
	out.Rdev = a.Rdev
	out.Atime, out.Atimensec = uint64(a.Atime/1e9), uint32(a.Atime%1e9)
	out.Mtime, out.Mtimensec = uint64(a.Mtime/1e9), uint32(a.Mtime%1e9)
	out.Ctime, out.Ctimensec = uint64(a.Ctime/1e9), uint32(a.Ctime%1e9)
}

// newChild returns the inode for child name of kind a.Kind, reusing the
// one go-fuse knows under that name if it is of that kind, so open files
// keep their node across lookups.
//
// A node a create makes (created) notes a's version as its pages': the
// kernel holds no pages of a node new to it, and keeps those written
// through it from then on.
func (n *node) newChild(ctx context.Context, name string, a tyrfs.Attr, out *fuse.EntryOut, created bool) *fs.Inode {
	ctx, cancel := detach(ctx)
	defer cancel()
	fillAttr(a, &out.Attr)
	if a.Kind == tyrfs.KindDir && n.dirCache > 0 {
		out.SetEntryTimeout(n.dirCache)
		out.SetAttrTimeout(n.dirCache)
	}
	mode := typeBits(a.Kind)
	if ch := n.GetChild(name); ch != nil && ch.StableAttr().Mode == mode {
		if c, ok := ch.Operations().(*node); ok {
			c.sentAttr()
		}
		return ch
	}
	ch := &node{fs: n.fs, dirCache: n.dirCache, revalidate: n.revalidate, pending: n.pending, locks: n.locks, fresh: a.Version}
	if created && n.revalidate {
		ch.pages = a.Version
	}
	return n.NewInode(ctx, ch, fs.StableAttr{Mode: mode})
}

// fillAttrOut fills out with a, and the directory cache timeout for a
// directory.
func (n *node) fillAttrOut(a tyrfs.Attr, out *fuse.AttrOut) {
	fillAttr(a, &out.Attr)
	if n.unlinked.Load() {
		out.Nlink = 0 // unlinked while open (unlinked.go)
	}
	if a.Kind == tyrfs.KindDir && n.dirCache > 0 {
		out.SetTimeout(n.dirCache)
	}
}

// opTimeout bounds one request's calls to the cluster.
const opTimeout = 2 * time.Minute

// detach returns the context of a request's calls to the cluster, and
// the function to call once the request is done with it. The context is
// not cancelled when the kernel interrupts the request (a signal to the
// caller, which Go's runtime sends to its threads routinely): a commit
// abandoned half-way would leave its outcome unknown, and the caller's
// system call would fail with EINTR, which most callers do not retry.
//
// The done function also hands the watch over the network back to the
// scheduler. go-fuse reads requests with blocking read(2)s on /dev/fuse,
// from the goroutine that answered the last one. When an answer from the
// cluster wakes a request's goroutine, the thread that was polling the
// network runs it, and then stays blocked in the next read(2); no other
// thread polls the network until Go's monitor does, 10 ms later, so the
// next request's answer from the cluster waited that long (a create in a
// directory where other files were being written took 10 ms, not 0.5).
// Starting a goroutine wakes an idle thread, which takes over polling;
// only while other requests are in flight, which may wait on the network:
// alone, a request costs the wake-up and saves nothing.
func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	inFlight.Add(1)
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	return c, func() {
		cancel()
		if inFlight.Add(-1) > 0 {
			go func() {}()
		}
	}
}

// inFlight counts the requests of the process's mounts between detach
// and its done function.
var inFlight atomic.Int64

func owner(ctx context.Context, mode uint32) tyrfs.Owner {
	o := tyrfs.Owner{Mode: mode & 07777}
	if c, ok := fuse.FromContext(ctx); ok {
		o.UID, o.GID = c.Uid, c.Gid
	}
	return o
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, cancel := detach(ctx)
	defer cancel()
	p, errno := n.child(name)
	if errno != 0 {
		return nil, errno
	}
	n.settleChildren(ctx, name)
	// A name looked up before is most likely what it was: a directory
	// costs one read, not a miss on the file key first.
	guess := tyrfs.KindFile
	if ch := n.GetChild(name); ch != nil {
		if c, ok := ch.Operations().(*node); ok {
			guess = c.kind()
		}
	}
	a, err := n.fs.LookupGuess(ctx, p, guess)
	if err != nil {
		return nil, tyrfs.Errno(err)
	}
	return n.newChild(ctx, name, a, out, false), 0
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctx, cancel := detach(ctx)
	defer cancel()
	// When the object this node stands for is gone (unlinked through
	// another mount, replaced by a rename, or its name now holds another
	// kind), open descriptors
	// of it (go-fuse passes one if any is open) answer EIO, as a stale
	// handle; a lookup in progress answers ENOENT.
	gone := syscall.ENOENT
	if fh != nil {
		gone = syscall.EIO
	}
	n.settle(ctx) // a failed create leaves no file
	p, ok := n.path()
	if !ok {
		return gone
	}
	isDir := n.kind() == tyrfs.KindDir
	var changes uint64
	if isDir {
		var a tyrfs.Attr
		var ok bool
		if a, changes, ok = n.keptDirAttr(); ok {
			n.sentAttr()
			n.fillAttrOut(a, out)
			return 0
		}
	}
	if hook := opHook.Load(); hook != nil {
		(*hook)("getattr", p)
	}
	read := time.Now()
	a, err := n.fs.Stat(ctx, p, n.kind())
	if errno := tyrfs.Errno(err); errno == syscall.ENOENT {
		return gone
	} else if err != nil {
		return errno
	}
	if typeBits(a.Kind) != n.StableAttr().Mode {
		return gone
	}
	if isDir {
		n.keepDirAttr(a, changes, read)
	}
	n.sentAttr()
	n.fillAttrOut(a, out)
	return 0
}

func (n *node) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx, cancel := detach(ctx)
	defer cancel()
	n.settle(ctx) // a failed create leaves no file
	p, ok := n.path()
	if !ok {
		return syscall.ENOENT
	}
	if n.kind() == tyrfs.KindDir {
		defer n.change().end() // its kept attributes (dirattr.go)
	}
	var s tyrfs.SetAttr
	if m, ok := in.GetMode(); ok {
		s.Mode = &m
	}
	if u, ok := in.GetUID(); ok {
		s.UID = &u
	}
	if g, ok := in.GetGID(); ok {
		s.GID = &g
	}
	if sz, ok := in.GetSize(); ok {
		s.Size = &sz
	}
	if t, ok := in.GetATime(); ok {
		ns := t.UnixNano()
		s.Atime = &ns
	}
	if t, ok := in.GetMTime(); ok {
		ns := t.UnixNano()
		s.Mtime = &ns
	}
	a, err := n.fs.Setattr(ctx, p, n.kind(), s)
	n.forgetPages() // a write through n then need not check the version
	if err != nil {
		return tyrfs.Errno(err)
	}
	n.sentAttr()
	n.fillAttrOut(a, out)
	return 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, cancel := detach(ctx)
	defer cancel()
	p, errno := n.child(name)
	if errno != 0 {
		return nil, errno
	}
	n.settleChildren(ctx, name)
	change := n.change()
	defer change.end()
	a, err := n.fs.Mkdir(ctx, p, owner(ctx, mode))
	if err != nil {
		return nil, tyrfs.Errno(err)
	}
	change.create(name, a)
	return n.newChild(ctx, name, a, out, false), 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx, cancel := detach(ctx)
	defer cancel()
	p, errno := n.child(name)
	if errno != 0 {
		return errno
	}
	n.settleMount(ctx)
	return n.removeEntry(name, true, func(t int64) error { return n.fs.RmdirAt(ctx, p, t) })
}

// removeEntry commits the removal of the entry name, a directory's if
// subdir, with remove at a time it picks, and applies it to the
// directory's kept attributes (dirattr.go).
func (n *node) removeEntry(name string, subdir bool, remove func(t int64) error) syscall.Errno {
	change := n.change()
	defer change.end()
	t := time.Now().UnixNano()
	err := remove(t)
	if err == nil {
		change.remove(name, t, subdir)
	}
	return tyrfs.Errno(err)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx, cancel := detach(ctx)
	defer cancel()
	p, errno := n.child(name)
	if errno != 0 {
		return errno
	}
	n.settleChildren(ctx, name)
	if hidden, errno := n.unlinkOpen(ctx, name, p); hidden {
		return errno
	}
	return n.removeEntry(name, false, func(t int64) error { return n.fs.UnlinkAt(ctx, p, t) })
}

// handle is an open file. Writes through a handle opened with O_APPEND
// append at the blob's end as of their commit, whatever offset the kernel
// computed, so appends from two mounts never overwrite each other. node
// is the file it was opened on (unlinked.go).
type handle struct {
	append bool
	node   *node
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx, cancel := detach(ctx)
	defer cancel()
	p, errno := n.child(name)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	n.settleChildren(ctx, name)
	o := owner(ctx, mode)
	if n.revalidate && flags&(syscall.O_EXCL|syscall.O_APPEND) == 0 && n.pending.enter() {
		// Deferred to the first close (deferred.go).
		defer n.pending.leave()
		t := time.Now().UnixNano()
		a := tyrfs.Attr{Kind: tyrfs.KindFile, Mode: o.Mode, UID: o.UID, GID: o.GID, Atime: t, Mtime: t, Ctime: t, Btime: t}
		ch := n.newChild(ctx, name, a, out, true)
		c := ch.Operations().(*node)
		c.createMu.Lock()
		c.deferred, c.createErr = &deferredCreate{owner: o, trunc: flags&syscall.O_TRUNC != 0, at: t}, 0
		c.createMu.Unlock()
		n.pending.add(c)
		h := &handle{}
		c.opened(h)
		return ch, h, 0, 0
	}
	change := n.change()
	defer change.end()
	a, err := n.fs.Create(ctx, p, o)
	if tyrfs.Errno(err) == syscall.EEXIST && flags&syscall.O_EXCL == 0 {
		// Created meanwhile by another mount: open it, as open(2) would.
		a, err = openExisting(ctx, n.fs, p, flags&syscall.O_TRUNC != 0)
	} else if err == nil {
		change.create(name, a)
	}
	if err != nil {
		return nil, nil, 0, tyrfs.Errno(err)
	}
	ch := n.newChild(ctx, name, a, out, true)
	h := &handle{append: flags&syscall.O_APPEND != 0}
	if c, ok := ch.Operations().(*node); ok {
		c.opened(h)
	}
	return ch, h, n.noFlush(flags), 0
}

// noFlush returns FOPEN_NOFLUSH for a descriptor opened with flags whose
// close has nothing to do: one opened to read only (the record locks
// taken through it go at its release, locks.go invariant 4), or one
// through a mount without the cache, where every write commits before it
// returns (with the cache, writes are held until the close, deferred.go),
// with the kernel keeping the locks (each close gives up the process's
// locks, locks.go invariant 3).
func (n *node) noFlush(flags uint32) uint32 {
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY || !n.revalidate && n.locks == nil {
		return fuse.FOPEN_NOFLUSH
	}
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, fl, errno := n.open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	n.opened(h)
	return h, fl, 0
}

// open is Open but for counting the descriptor.
func (n *node) open(ctx context.Context, flags uint32) (*handle, uint32, syscall.Errno) {
	p, ok := n.path()
	if !ok {
		return nil, 0, syscall.ENOENT
	}
	h := &handle{append: flags&syscall.O_APPEND != 0}
	// The kernel sends no FLUSH at the close of a descriptor with nothing
	// to commit then, one round trip less (noFlush): one opened to read
	// only (a deferred create of the file commits before this open
	// returns), and any without the cache, whose writes commit before
	// they return, if the kernel keeps the locks.
	noFlush := n.noFlush(flags)
	if !n.revalidate {
		// No FOPEN_KEEP_CACHE: the kernel drops its cached pages at each
		// open, and asks for attributes at each use, so an open sees what
		// was committed before it (close-to-open).
		return h, noFlush, 0
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	n.settle(ctx) // a failed create leaves no file
	// The file's attributes and, the first time this node is opened
	// unless to write only, its first bytes, in one request. Once an open
	// found a version, the attributes alone: the file most likely did not
	// change, and its pages are kept.
	n.mu.Lock()
	opened := n.pages != 0
	n.mu.Unlock()
	var head uint64
	if !opened && flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		head = openReadBytes
	}
	a, data, err := n.fs.FetchHead(ctx, p, head)
	if errno := tyrfs.Errno(err); errno == syscall.EISDIR {
		return nil, 0, syscall.ENOENT // the name holds a directory now
	} else if err != nil {
		return nil, 0, errno
	}
	if typeBits(a.Kind) != n.StableAttr().Mode {
		return nil, 0, syscall.ENOENT // the name holds another kind now
	}
	n.fillMu.Lock()
	defer n.fillMu.Unlock()
	n.mu.Lock()
	if a.Version == n.pages {
		n.mu.Unlock()
		return h, fuse.FOPEN_KEEP_CACHE | noFlush, 0
	}
	// Changed since the last open, or not opened before: the kernel drops
	// its attributes of the file (a GETATTR started before this is
	// discarded) and its pages, before the open returns, unless it never
	// held any but the lookup's, of the version found, and no pages. Then
	// it is given the bytes read, which are of that version, and keeps
	// them. Both without mu: each waits for the page locks of a write(2)
	// in progress, whose request may be waiting for mu (writeKept).
	current := n.fresh != 0 && n.fresh == a.Version // fresh is 0 once opened
	n.fresh = 0
	n.setPagesLocked(0)
	gen := n.pagesGen
	n.mu.Unlock()
	if !current {
		if errno := n.NotifyContent(0, 0); errno != 0 && errno != syscall.ENOENT {
			return nil, 0, syscall.EIO
		}
	}
	if len(data) == 0 {
		n.pagesFound(gen, a.Version)
		return h, noFlush, 0
	}
	if errno := n.WriteCache(0, data); errno != 0 {
		// The kernel may hold some of them: drop them again.
		n.NotifyContent(0, 0)
		return h, noFlush, 0
	}
	if !n.pagesFound(gen, a.Version) {
		// A write through the node came between: the kernel drops its
		// pages at this open.
		return h, noFlush, 0
	}
	return h, fuse.FOPEN_KEEP_CACHE | noFlush, 0
}

// pagesFound sets pages to v, the version an open found, unless pages
// changed since the open's change, gen; it reports whether it did.
func (n *node) pagesFound(gen, v uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pagesGen != gen {
		return false
	}
	n.setPagesLocked(v)
	return true
}

// openReadBytes is how much of a file an open reads and gives the kernel
// with --cache: one FUSE read of the kernel's default largest size.
const openReadBytes = 128 << 10

// opHook, unless nil, is called with "read" or "getattr" and the path of
// every read or stat that goes to the cluster, and with "flush" and the
// path of every FLUSH request (tests).
var opHook atomic.Pointer[func(op, p string)]

func (n *node) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ctx, cancel := detach(ctx)
	defer cancel()
	n.settle(ctx) // a failed create leaves no file
	p, ok := n.path()
	if !ok {
		return nil, syscall.ENOENT
	}
	if hook := opHook.Load(); hook != nil {
		(*hook)("read", p)
	}
	b, err := n.fs.ReadAt(ctx, p, uint64(off), uint64(len(dest)))
	if err != nil {
		return nil, tyrfs.Errno(err)
	}
	return fuse.ReadResultData(b), 0
}

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	ctx, cancel := detach(ctx)
	defer cancel()
	h, _ := fh.(*handle)
	appending := h != nil && h.append
	if n.revalidate {
		// Held until the close (deferred.go), unless an append.
		n.createMu.Lock()
		if !appending && n.hold(uint64(off), data) {
			n.createMu.Unlock()
			return uint32(len(data)), 0
		}
		errno := n.commitLocked(ctx)
		if errno == 0 && !appending && n.holdNew(uint64(off), data) {
			n.createMu.Unlock()
			return uint32(len(data)), 0
		}
		n.createMu.Unlock()
		if errno != 0 {
			return 0, errno
		}
	}
	p, ok := n.path()
	if !ok {
		return 0, syscall.ENOENT
	}
	var err error
	switch {
	case appending:
		_, err = n.fs.Append(ctx, p, data)
		n.forgetPages()
	case n.revalidate:
		err = n.writeKept(ctx, p, uint64(off), data)
	default:
		err = n.fs.WriteAt(ctx, p, uint64(off), data)
	}
	if err != nil {
		return 0, tyrfs.Errno(err)
	}
	return uint32(len(data)), 0
}

// writeKept commits a write of data at off to file p whose bytes the
// kernel keeps in its pages: if the file was at the pages' version before
// the write, it is at the write's after it.
func (n *node) writeKept(ctx context.Context, p string, off uint64, data []byte) error {
	n.mu.Lock()
	base := n.pages
	n.mu.Unlock()
	v, err := n.fs.WriteAtFrom(ctx, p, off, data, base)
	n.mu.Lock()
	if err == nil && n.pages == base {
		n.setPagesLocked(v)
	} else {
		n.setPagesLocked(0) // an open or another write meanwhile, or failed
	}
	n.mu.Unlock()
	return err
}

// Fsync commits a deferred create and the writes held (deferred.go), and
// returns their error, or that of held writes an earlier request
// committed.
func (n *node) Fsync(ctx context.Context, _ fs.FileHandle, _ uint32) syscall.Errno {
	ctx, cancel := detach(ctx)
	defer cancel()
	n.createMu.Lock()
	defer n.createMu.Unlock()
	return n.commitLocked(ctx)
}

// commitLocked commits n's deferred create and held writes, and returns
// their error, or else that of held writes whose commit failed before
// (once, deferred.go invariant 5). n.createMu is held.
func (n *node) commitLocked(ctx context.Context) syscall.Errno {
	if errno := n.settleLocked(ctx); errno != 0 {
		return errno
	}
	return n.takeWriteErr()
}

// Flush, at each close of a descriptor that may have written, commits as
// Fsync does: close(2) returns once what was written through the mount
// is committed (close-to-open), and fails if it could not be. Then it
// gives up the closing process's POSIX locks on the file (locks.go).
func (n *node) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	if hook := opHook.Load(); hook != nil {
		if p, ok := n.path(); ok {
			(*hook)("flush", p)
		}
	}
	errno := n.Fsync(ctx, fh, 0)
	if e := n.flushLocks(ctx); errno == 0 {
		errno = e
	}
	return errno
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, cancel := detach(ctx)
	defer cancel()
	p, errno := n.child(name)
	if errno != 0 {
		return nil, errno
	}
	n.settleChildren(ctx, name)
	change := n.change()
	defer change.end()
	a, err := n.fs.Symlink(ctx, target, p, owner(ctx, 0o777))
	if err != nil {
		return nil, tyrfs.Errno(err)
	}
	change.create(name, a)
	return n.newChild(ctx, name, a, out, false), 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx, cancel := detach(ctx)
	defer cancel()
	p, ok := n.path()
	if !ok {
		return nil, syscall.ENOENT
	}
	target, err := n.fs.Readlink(ctx, p)
	if err != nil {
		return nil, tyrfs.Errno(err)
	}
	return []byte(target), 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx, cancel := detach(ctx)
	defer cancel()
	from, errno := n.child(name)
	if errno != 0 {
		return errno
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	to, errno := np.child(newName)
	if errno != 0 {
		return errno
	}
	n.settleMount(ctx)
	changed := []*node{n, np}
	if ch := n.GetChild(name); ch != nil {
		if c, ok := ch.Operations().(*node); ok {
			changed = append(changed, c) // a directory's ctime moves
		}
	}
	for _, c := range changed {
		defer c.change().end()
	}
	return np.renameOver(ctx, from, newName, to, flags)
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ctx, cancel := detach(ctx)
	defer cancel()
	p, ok := n.path()
	if !ok {
		return nil, syscall.ENOENT
	}
	n.settleChildren(ctx, "")
	es, err := n.fs.Readdir(ctx, p)
	if err != nil {
		return nil, tyrfs.Errno(err)
	}
	out := make([]fuse.DirEntry, len(es))
	for i, e := range es {
		out[i] = fuse.DirEntry{Name: e.Name, Mode: typeBits(e.Kind)}
	}
	return fs.NewListDirStream(out), 0
}

// filesReported is the inode count statfs reports: blobs are not a
// bounded resource, so a large constant, as network file systems do.
const filesReported = 1 << 40

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	ctx, cancel := detach(ctx)
	defer cancel()
	s, err := n.fs.Statfs(ctx)
	if err != nil {
		return tyrfs.Errno(err)
	}
	out.Bsize = blockBytes
	out.Frsize = blockBytes
	out.Blocks = s.CapacityBytes / blockBytes
	out.Bfree = s.FreeBytes / blockBytes
	out.Bavail = out.Bfree
	out.Files = filesReported
	out.Ffree = filesReported - min(s.Blobs, filesReported)
	out.NameLen = tyrfs.NameBytesMax
	return 0
}

// Link refuses hard links: a file is the blob of its one path.
func (n *node) Link(context.Context, fs.InodeEmbedder, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// fallocKeepSize is FALLOC_FL_KEEP_SIZE.
const fallocKeepSize = 1

// Allocate extends the file for mode 0 and does nothing for
// FALLOC_FL_KEEP_SIZE (blobs reserve no space); other modes (punching
// holes, zeroing or collapsing ranges) are refused with EOPNOTSUPP.
func (n *node) Allocate(ctx context.Context, _ fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	ctx, cancel := detach(ctx)
	defer cancel()
	n.settle(ctx) // a failed create leaves no file
	p, ok := n.path()
	if !ok {
		return syscall.ENOENT
	}
	switch mode {
	case 0:
		return tyrfs.Errno(n.fs.Extend(ctx, p, off+size))
	case fallocKeepSize:
		return 0
	}
	return syscall.EOPNOTSUPP
}

// Mknod makes FIFOs, sockets and device nodes; regular files too, as
// mknod(2) may.
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx, cancel := detach(ctx)
	defer cancel()
	p, errno := n.child(name)
	if errno != 0 {
		return nil, errno
	}
	n.settleChildren(ctx, name)
	change := n.change()
	defer change.end()
	var k tyrfs.Kind
	switch mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		k = tyrfs.KindFifo
	case syscall.S_IFSOCK:
		k = tyrfs.KindSocket
	case syscall.S_IFCHR:
		k = tyrfs.KindChar
	case syscall.S_IFBLK:
		k = tyrfs.KindBlock
	case syscall.S_IFREG, 0:
		a, err := n.fs.Create(ctx, p, owner(ctx, mode))
		if err != nil {
			return nil, tyrfs.Errno(err)
		}
		change.create(name, a)
		return n.newChild(ctx, name, a, out, false), 0
	default:
		return nil, syscall.EINVAL
	}
	a, err := n.fs.Mknod(ctx, p, k, owner(ctx, mode), rdev)
	if err != nil {
		return nil, tyrfs.Errno(err)
	}
	change.create(name, a)
	return n.newChild(ctx, name, a, out, false), 0
}
