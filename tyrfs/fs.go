package tyrfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/fslock"
	"github.com/tyrstore/tyr/internal/limits"
)

// FS is a file system in keyspace ks. It keeps no state between calls but
// the client: every call reads what it needs from the cluster, so two FS
// values (two mounts, on two nodes) over the same keyspace see each
// other's committed changes at once. It is safe for concurrent use.
//
// Paths are absolute and clean ("/a/b"); "." and ".." are the caller's to
// resolve. Errors wrap a syscall.Errno (see Errno).
type FS struct {
	c  *client.Client
	ks string
	// now returns the time in ns since the epoch; tests may replace it.
	now func() int64
	// cred is who Fetch acts for (As); root unless set.
	cred Cred
	// afterCopy, if set, runs between a relocation's copy and its commit
	// (tests race a sweep against it).
	afterCopy func(hidden string)
}

// Owner is who creates a file: its owner and the permission bits.
type Owner struct {
	UID, GID uint32
	Mode     uint32 // permission bits, 07777
}

// New returns the file system in keyspace ks, creating its root directory
// (mode 0755, owned by root) if missing. The keyspace must exist.
func New(ctx context.Context, c *client.Client, ks string) (*FS, error) {
	f := &FS{c: c, ks: ks, now: func() int64 { return time.Now().UnixNano() }}
	if _, err := c.Keyspace(ctx, ks); err != nil {
		return nil, fmt.Errorf("tyrfs: keyspace %q: %w", ks, err)
	}
	t := f.now()
	h := fslayout.EncodeHeader(Attr{Kind: KindDir, Mode: 0o755, Atime: t, Mtime: t, Ctime: t, Btime: t})
	_, err := c.Commit(ctx, ks, newBlobOps(fslayout.DirKey("/"), h)...)
	if err != nil && !errors.Is(err, client.ErrExists) {
		return nil, fmt.Errorf("tyrfs: creating the root directory: %w", err)
	}
	return f, nil
}

// Errno returns the errno err carries: its own if it wraps a
// syscall.Errno, else one for the client's error class (EIO for an
// unavailable cluster or an unknown error).
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, client.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, client.ErrExists):
		return syscall.EEXIST
	case errors.Is(err, client.ErrTooLarge), errors.Is(err, client.ErrOutOfRange):
		return syscall.EFBIG
	case errors.Is(err, client.ErrNoSpace):
		return syscall.ENOSPC
	case errors.Is(err, client.ErrInvalidArgument):
		return syscall.EINVAL
	case errors.Is(err, client.ErrConflict):
		return syscall.EAGAIN
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	}
	return syscall.EIO
}

// errnof returns an error with a message that wraps errno.
func errnof(errno syscall.Errno, format string, args ...any) error {
	return fmt.Errorf("tyrfs: %s: %w", fmt.Sprintf(format, args...), errno)
}

// times returns mtime and ctime encoded for the header at offMtime.
func times(mtime, ctime int64) []byte {
	b := make([]byte, 16)
	fslayout.PutTime(b, mtime)
	fslayout.PutTime(b[8:], ctime)
	return b
}

// touchParent returns the op setting the mtime and ctime of the directory
// at parent to t, as adding or removing an entry does.
func touchParent(parent string, t int64) client.Op {
	return client.WriteOp(fslayout.DirKey(parent), fslayout.OffMtime, times(t, t), false)
}

// subdirsOp returns the op moving the count of subdirectories of the
// directory at dir by delta (fslayout, invariant 6).
func subdirsOp(dir string, delta int32) client.Op {
	return client.AtomicOp(fslayout.DirKey(dir), fslayout.OffSubdirs, 4, client.FuncAdd, uint64(uint32(delta)))
}

// touchParentAt returns the ops moving the mtime and ctime of the
// directory at parent forward to t, an earlier time than the commit's (a
// create answered before it was committed): a change the directory saw
// after t keeps its times.
func touchParentAt(parent string, t int64) []client.Op {
	key := fslayout.DirKey(parent)
	return []client.Op{client.AtomicOp(key, fslayout.OffMtime, 8, client.FuncMaxSigned, uint64(t)),
		client.AtomicOp(key, fslayout.OffCtime, 8, client.FuncMaxSigned, uint64(t))}
}

// Stat returns the attributes of p, which holds kind k (KindDir, or
// KindFile for a file or symbolic link). One read of the blob's header.
func (f *FS) Stat(ctx context.Context, p string, k Kind) (Attr, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return Attr{}, err
	}
	return f.stat(ctx, fslayout.KeyOf(p, k))
}

// stat reads the header of blob key. A data blob (fslayout, invariant 5)
// is no file: not found; a staple's size is its data blob's.
func (f *FS) stat(ctx context.Context, key string) (Attr, error) {
	return retryRaces(key, func() (Attr, error) {
		b, info, err := f.c.ReadPart(ctx, f.ks, key, 0, HeaderBytes)
		if err != nil {
			return Attr{}, err
		}
		a, err := fslayout.DecodeHeader(key, b, info.Size)
		if err != nil {
			return Attr{}, err
		}
		a.Version = info.Version
		switch fl := flagsOf(b); {
		case fl&fslayout.FlagMovedOut != 0:
			return Attr{}, fmt.Errorf("tyrfs: %q holds a renamed file's data: %w", key, client.ErrNotFound)
		case fl&fslayout.FlagStapled != 0:
			return f.stapleAttr(ctx, key, a)
		}
		return a, nil
	})
}

// Lookup returns the attributes of whatever p is: a file or symbolic link
// (one request), else a directory (a second one). ENOENT if neither (as
// root, one request: a fetch of no bytes, whose node checks the directory
// key itself).
func (f *FS) Lookup(ctx context.Context, p string) (Attr, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return Attr{}, err
	}
	return f.lookup(ctx, p)
}

// LookupGuess is Lookup reading first the key of kind guess (KindDir, or
// KindFile for the others): one read when p is what the caller last saw
// there, a directory included.
func (f *FS) LookupGuess(ctx context.Context, p string, guess Kind) (Attr, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return Attr{}, err
	}
	if guess != KindDir || p == "/" {
		return f.lookup(ctx, p)
	}
	// The directory first, then the file: each key read once.
	a, err := f.stat(ctx, fslayout.DirKey(p))
	if !errors.Is(err, client.ErrNotFound) {
		return a, err
	}
	a, err = f.stat(ctx, fslayout.FileKey(p))
	if errors.Is(err, client.ErrNotFound) {
		return Attr{}, errnof(syscall.ENOENT, "%s", p)
	}
	return a, err
}

func (f *FS) lookup(ctx context.Context, p string) (Attr, error) {
	if p != "/" && f.cred.UID == 0 {
		// One request for a file and for no file: a fetch of no bytes
		// (root's are refused nothing), whose node reads the directory
		// key when it finds no file (EISDIR, ENOENT).
		a, _, err := f.FetchHead(ctx, p, 0)
		if !errors.Is(err, syscall.EISDIR) {
			return a, err
		}
	} else if p != "/" {
		a, err := f.stat(ctx, fslayout.FileKey(p))
		if !errors.Is(err, client.ErrNotFound) {
			return a, err
		}
	}
	a, err := f.stat(ctx, fslayout.DirKey(p))
	if errors.Is(err, client.ErrNotFound) {
		return Attr{}, errnof(syscall.ENOENT, "%s", p)
	}
	return a, err
}

// Fetch opens and reads the whole file at p in one request, to the node
// that serves the file's first chunk, for a file of up to
// client.PayloadBytesMax-HeaderBytes bytes; the rest of a larger one is
// read after, at the version the first request found. That node checks,
// for f's credentials (see As), search permission on every directory
// above p and read permission on p (EACCES), from its
// own store or its copies of popular directories' permissions
// (internal/fsmeta), so a fetch under a busy directory needs no other
// request. EISDIR for a directory.
func (f *FS) Fetch(ctx context.Context, p string) (Attr, []byte, error) {
	return f.FetchInto(ctx, p, nil)
}

// FetchInto is Fetch reading the file into buf's memory when the file and
// its header fit in buf's capacity (HeaderBytes more than the file's
// size), so that a program reading many files reuses one buffer. The
// data returned then lies in buf, after the header; a file that does not
// fit, one read over gRPC, or a renamed file's data read through its
// forwarding record (a staple) is read into new memory. buf may be nil.
func (f *FS) FetchInto(ctx context.Context, p string, buf []byte) (Attr, []byte, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return Attr{}, nil, err
	}
	b, info, errno, err := f.c.FSFetchInto(ctx, f.ks, p, f.cred.UID, f.cred.GIDs, client.PayloadBytesMax, buf)
	return f.fetched(ctx, p, client.FSFetchResult{Data: b, Info: info, Errno: errno, Err: err}, buf)
}

// FetchHead reads the attributes of the file at p and at most n of its
// first bytes, as Fetch does, in one request unless the file is stapled
// (then its attributes alone, with no bytes, in two). It is what a mount
// needs to open a file and answer the first read from the bytes given
// to the kernel. n is capped at client.PayloadBytesMax-HeaderBytes.
func (f *FS) FetchHead(ctx context.Context, p string, n uint64) (Attr, []byte, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return Attr{}, nil, err
	}
	n = min(n, client.PayloadBytesMax-HeaderBytes)
	b, info, errno, err := f.c.FSFetch(ctx, f.ks, p, f.cred.UID, f.cred.GIDs, HeaderBytes+n)
	if err != nil {
		return Attr{}, nil, err
	}
	if errno != 0 {
		return Attr{}, nil, errnof(syscall.Errno(errno), "%s", p)
	}
	key := fslayout.FileKey(p)
	a, err := fslayout.DecodeHeader(key, b, info.Size)
	if err != nil {
		return Attr{}, nil, err
	}
	if flagsOf(b) != 0 {
		// Stapled, or moved out by a rename under way: stat follows it.
		a, err := f.stat(ctx, key)
		return a, nil, err
	}
	a.Version = info.Version
	return a, b[HeaderBytes:], nil
}

// FetchResult is one path's answer in FetchMany, as Fetch gives it.
type FetchResult struct {
	Attr Attr
	Data []byte
	Err  error
}

// FetchManyMax bounds the paths of one FetchMany.
const FetchManyMax = client.FSFetchManyMax

// FetchMany is Fetch of every path of paths at once, answered in the order
// given, each as Fetch answers it (Err an errno error for a refusal). The
// fetches bound for one node travel pipelined on one connection and the
// nodes are asked in parallel (client.FSFetchMany), so a batch of small
// files costs about a round trip per node instead of one per file. The
// error is for the batch: more than FetchManyMax paths (EINVAL).
func (f *FS) FetchMany(ctx context.Context, paths []string) ([]FetchResult, error) {
	return f.FetchManyInto(ctx, paths, nil)
}

// FetchManyInto is FetchMany reading the file at paths[i] into bufs[i] as
// FetchInto reads into its buffer. bufs is nil or holds a buffer for
// every path (EINVAL otherwise), no two sharing memory. Nothing is
// written into bufs once it returns.
func (f *FS) FetchManyInto(ctx context.Context, paths []string, bufs [][]byte) ([]FetchResult, error) {
	if len(paths) > FetchManyMax {
		return nil, errnof(syscall.EINVAL, "a fetch of %d paths, above %d", len(paths), FetchManyMax)
	}
	if bufs != nil && len(bufs) != len(paths) {
		return nil, errnof(syscall.EINVAL, "a fetch of %d paths into %d buffers", len(paths), len(bufs))
	}
	out := make([]FetchResult, len(paths))
	var clean []string
	var at []int
	var into [][]byte
	for i, p := range paths {
		cp, err := fslayout.CleanPath(p)
		if err != nil {
			out[i].Err = err
			continue
		}
		clean, at = append(clean, cp), append(at, i)
		if bufs != nil {
			into = append(into, bufs[i])
		}
	}
	rs, err := f.c.FSFetchManyInto(ctx, f.ks, clean, f.cred.UID, f.cred.GIDs, client.PayloadBytesMax, into)
	if err != nil {
		return nil, err
	}
	for k, r := range rs {
		var buf []byte
		if into != nil {
			buf = into[k]
		}
		a, data, err := f.fetched(ctx, clean[k], r, buf)
		out[at[k]] = FetchResult{Attr: a, Data: data, Err: err}
	}
	return out, nil
}

// fetched is what a fetch of the clean path p answered, for the caller:
// the file's attributes and bytes (the rest of a file longer than the
// fetch's read, read at its version, into buf when it fits there), or an
// errno error for a refusal.
func (f *FS) fetched(ctx context.Context, p string, r client.FSFetchResult, buf []byte) (Attr, []byte, error) {
	if r.Err != nil {
		return Attr{}, nil, r.Err
	}
	if r.Errno != 0 {
		return Attr{}, nil, errnof(syscall.Errno(r.Errno), "%s", p)
	}
	key := fslayout.FileKey(p)
	b, info := r.Data, r.Info
	if uint64(len(b)) < info.Size {
		// The rest, at the version the fetch read; if that version is
		// gone already, the whole file again.
		var err error
		if b, _, err = f.readRest(ctx, key, b, info, buf); errors.Is(err, client.ErrConflict) {
			return f.readFile(ctx, p)
		} else if err != nil {
			return Attr{}, nil, err
		}
	}
	a, data, err := f.fileOf(ctx, p, b)
	if errors.Is(err, errRaced) {
		return f.readFile(ctx, p)
	} else if err != nil {
		return Attr{}, nil, err
	}
	a.Version = info.Version
	return a, data, nil
}

// readFile reads the whole file at clean path p, at one version, following
// a staple.
func (f *FS) readFile(ctx context.Context, p string) (Attr, []byte, error) {
	type file struct {
		a    Attr
		data []byte
	}
	r, err := retryRaces(p, func() (file, error) {
		b, info, err := f.readWhole(ctx, fslayout.FileKey(p))
		if errors.Is(err, client.ErrConflict) {
			return file{}, errRaced
		}
		if err != nil {
			return file{}, err
		}
		a, data, err := f.fileOf(ctx, p, b)
		if err != nil {
			return file{}, err
		}
		a.Version = info.Version
		return file{a, data}, nil
	})
	return r.a, r.data, err
}

// fileOf returns the attributes and data of the file at clean path p
// whose blob is b, whole: a staple's data read through its pointer; ENOENT
// for a data blob.
func (f *FS) fileOf(ctx context.Context, p string, b []byte) (Attr, []byte, error) {
	key := fslayout.FileKey(p)
	a, err := fslayout.DecodeHeader(key, b, uint64(len(b)))
	if err != nil {
		return Attr{}, nil, err
	}
	switch fl := flagsOf(b); {
	case fl&fslayout.FlagMovedOut != 0:
		return Attr{}, nil, errnof(syscall.ENOENT, "%s", p)
	case fl&fslayout.FlagStapled != 0:
		var data []byte
		err := f.viaPointer(ctx, p, func(d string) error {
			var err error
			data, _, err = f.readWhole(ctx, d)
			if err == nil && len(data) < HeaderBytes {
				err = fmt.Errorf("%w: %q has no header", ErrCorrupt, d)
			}
			return err
		})
		if err != nil {
			return Attr{}, nil, err
		}
		a.Size = uint64(len(data) - HeaderBytes)
		return a, data[HeaderBytes:], nil
	}
	return a, b[HeaderBytes:], nil
}

// Cred is who an FS's Fetch acts for: its user and groups. The server
// takes them as given (tyr does not authenticate users), as NFS's AUTH_SYS
// does; UID 0 is root.
type Cred struct {
	UID  uint32
	GIDs []uint32
}

// As returns a copy of f whose Fetch checks permissions for c. New returns
// an FS acting as root. The other calls check no permissions: the mount
// leaves them to the kernel (default_permissions).
func (f *FS) As(c Cred) *FS {
	g := *f
	g.cred = Cred{UID: c.UID, GIDs: slices.Clone(c.GIDs)}
	return &g
}

// invalidate makes every server drop its copies of the permissions of the
// directory at clean path p and those under it, after a change to them
// committed (client.FSInvalidate).
func (f *FS) invalidate(ctx context.Context, p string) error {
	return f.c.FSInvalidate(ctx, f.ks, fslayout.DirKey(p))
}

// create adds p, of kind k with header attributes o and content data after
// the header, to its parent, in one commit that checks the name is free
// (neither a file nor a directory).
func (f *FS) create(ctx context.Context, p string, k Kind, o Owner, data []byte) (Attr, error) {
	return f.createNode(ctx, p, k, o, 0, data, nil)
}

// fileTimes are the times a node is created with (ns since the epoch),
// where not now: access and modification times, and, unless 0, the time
// of the create itself (the node's birth and change times, and its
// directory's modification and change times).
type fileTimes struct{ atime, mtime, at int64 }

// createNode is create with a device number for a device node, and the
// times given (nil: now).
func (f *FS) createNode(ctx context.Context, p string, k Kind, o Owner, rdev uint32, data []byte, times *fileTimes) (Attr, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return Attr{}, err
	}
	if p == "/" {
		return Attr{}, errnof(syscall.EEXIST, "/")
	}
	parent, name := fslayout.Split(p)
	t := f.now()
	if times != nil && times.at != 0 {
		t = times.at
	}
	a := Attr{Kind: k, Mode: o.Mode & 07777, UID: o.UID, GID: o.GID, Atime: t, Mtime: t, Ctime: t, Btime: t,
		Rdev: rdev, Size: uint64(len(data)), Nlink: 1}
	if times != nil {
		a.Atime, a.Mtime = times.atime, times.mtime
	}
	key, other := fslayout.FileKey(p), fslayout.DirKey(p)
	if k == KindDir {
		key, other = other, key
	}
	touch := []client.Op{touchParent(parent, t)}
	if times != nil && times.at != 0 {
		touch = touchParentAt(parent, t)
	}
	if k == KindDir {
		a.Nlink, a.LinksCounted = 2, true // EncodeHeader writes DirVersion
		touch = append(touch, subdirsOp(parent, 1))
	}
	var r []client.OpResult
	for range racesMax {
		// One request: the name's other key (a directory for a file, a
		// file for a directory) is checked absent as the commit applies.
		ops := append(newBlobOps(key, append(fslayout.EncodeHeader(a), data...)),
			client.AppendOp(fslayout.DirKey(parent), fslayout.EncodeRecord(fslayout.RecordAdd, k, name), false))
		r, err = f.c.CommitIf(ctx, f.ks, []client.Check{{Key: other}}, append(ops, touch...)...)
		if !errors.Is(err, client.ErrExists) && !errors.Is(err, client.ErrConflict) {
			break
		}
		// The name is held, maybe by a staple's data blob only.
		if freed, ferr := f.freeIfData(ctx, p); ferr != nil {
			return Attr{}, ferr
		} else if !freed {
			return Attr{}, errnof(syscall.EEXIST, "%s", p)
		}
	}
	switch {
	case errors.Is(err, client.ErrExists), errors.Is(err, client.ErrConflict):
		return Attr{}, errnof(syscall.EAGAIN, "%s: its name kept being taken", p)
	case errors.Is(err, client.ErrNotFound):
		return Attr{}, f.missingDir(ctx, parent)
	case err != nil:
		return Attr{}, err
	}
	a.Version = r[0].Version // the results' first is the new blob's
	return a, nil
}

// freeIfData frees the file key of clean path p if a staple's data blob
// holds it (freeName), and reports whether it did.
func (f *FS) freeIfData(ctx context.Context, p string) (bool, error) {
	key := fslayout.FileKey(p)
	h, _, err := f.c.ReadPart(ctx, f.ks, key, 0, HeaderBytes)
	if err != nil || flagsOf(h)&fslayout.FlagMovedOut == 0 {
		return false, nil
	}
	return true, f.freeName(ctx, key)
}

// newBlobOps returns the ops creating blob key holding blob (a header and
// a file's data); a directory's then reaches its log's start, a hole.
func newBlobOps(key string, blob []byte) []client.Op {
	ops := []client.Op{client.CreateOp(key), client.WriteOp(key, 0, blob, false)}
	if strings.HasSuffix(key, "/") {
		ops = append(ops, client.TruncateOp(key, fslayout.LogStart(blob)))
	}
	return ops
}

// missingDir returns the error for a directory dir found missing: ENOTDIR
// if a file holds its path, else ENOENT.
func (f *FS) missingDir(ctx context.Context, dir string) error {
	if _, err := f.stat(ctx, fslayout.FileKey(dir)); err == nil {
		return errnof(syscall.ENOTDIR, "%s", dir)
	}
	return errnof(syscall.ENOENT, "%s", dir)
}

// DirEntryBytes is how much a create of name adds to the size of its
// directory (its log's length): the entry's record, until the directory's
// log is compacted.
func DirEntryBytes(name string) uint64 {
	return uint64(fslayout.RecordBytes(name))
}

// Create makes an empty file at p: EEXIST if p exists, ENOENT if its
// parent does not.
func (f *FS) Create(ctx context.Context, p string, o Owner) (Attr, error) {
	return f.create(ctx, p, KindFile, o, nil)
}

// WriteFile makes a file at p holding data, as Create then WriteAt do,
// but in one transaction for up to WriteFileBytesMax bytes, so no one sees
// the file empty; the rest of a larger file is written after, in parts.
// EEXIST if p exists, ENOENT if its parent does not.
func (f *FS) WriteFile(ctx context.Context, p string, o Owner, data []byte) (Attr, error) {
	first := data[:min(len(data), WriteFileBytesMax)]
	a, err := f.create(ctx, p, KindFile, o, first)
	if err != nil || len(first) == len(data) {
		return a, err
	}
	if err := f.WriteAt(ctx, p, uint64(len(first)), data[len(first):]); err != nil {
		return Attr{}, err
	}
	return f.Stat(ctx, p, KindFile)
}

// CreateAt creates an empty file at p as Create does, as though at time t
// (ns since the epoch, from the caller's clock): all four of its times
// are t, and its directory's modification and change times move forward
// to t (a change the directory saw after t keeps its own). For a caller
// that answered a create before committing it (a mount's deferred
// create), and told the times then.
func (f *FS) CreateAt(ctx context.Context, p string, o Owner, t int64) (Attr, error) {
	if t == 0 {
		return Attr{}, errnof(syscall.EINVAL, "%s: a create at time 0", p)
	}
	return f.createNode(ctx, p, KindFile, o, 0, nil, &fileTimes{atime: t, mtime: t, at: t})
}

// WriteFileBytesMax is how much of a file WriteFile writes in the
// transaction that creates it: a commit's payload, less the header.
const WriteFileBytesMax = client.PayloadBytesMax - HeaderBytes

// Mkdir makes an empty directory at p: EEXIST if p exists.
func (f *FS) Mkdir(ctx context.Context, p string, o Owner) (Attr, error) {
	return f.create(ctx, p, KindDir, o, nil)
}

// Mknod makes a FIFO, a socket or a device node (of device rdev) at p: a
// blob of a header alone, under p's file key. EINVAL for another kind.
func (f *FS) Mknod(ctx context.Context, p string, k Kind, o Owner, rdev uint32) (Attr, error) {
	if !k.Special() {
		return Attr{}, errnof(syscall.EINVAL, "mknod of a %s", k)
	}
	if k != KindChar && k != KindBlock {
		rdev = 0
	}
	return f.createNode(ctx, p, k, o, rdev, nil, nil)
}

// Symlink makes a symbolic link at p to target (mode 0777).
func (f *FS) Symlink(ctx context.Context, target, p string, o Owner) (Attr, error) {
	if len(target) > SymlinkBytesMax {
		return Attr{}, errnof(syscall.ENAMETOOLONG, "symbolic link target of %d bytes, above %d", len(target), SymlinkBytesMax)
	}
	if target == "" {
		return Attr{}, errnof(syscall.ENOENT, "empty symbolic link target")
	}
	o.Mode = 0o777
	return f.create(ctx, p, KindSymlink, o, []byte(target))
}

// Readlink returns the target of the symbolic link at p: EINVAL if p is
// not one.
func (f *FS) Readlink(ctx context.Context, p string) (string, error) {
	a, data, err := f.Fetch(ctx, p)
	if errors.Is(err, syscall.EISDIR) {
		return "", errnof(syscall.EINVAL, "%s is a directory", p)
	}
	if err != nil {
		return "", err
	}
	if a.Kind != KindSymlink {
		return "", errnof(syscall.EINVAL, "%s is not a symbolic link", p)
	}
	return string(data), nil
}

// ReadAt reads up to n bytes of the file at p from off; short at the end.
// The bytes come from one commit.
func (f *FS) ReadAt(ctx context.Context, p string, off, n uint64) ([]byte, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return nil, err
	}
	if off > FileBytesMax {
		return nil, nil
	}
	return retryRaces(p, func() ([]byte, error) { return f.readAt(ctx, p, off, n) })
}

// readAt is ReadAt of clean path p. A plain file costs one request: from
// offset 0 the header comes with the data and shows its flags; further on,
// only a blob of a header alone (an empty file, or a staple) is looked at
// again.
func (f *FS) readAt(ctx context.Context, p string, off, n uint64) ([]byte, error) {
	key := fslayout.FileKey(p)
	if n > client.PayloadBytesMax-HeaderBytes {
		return f.readLarge(ctx, p, off, n)
	}
	if off == 0 {
		b, info, err := f.c.ReadPart(ctx, f.ks, key, 0, HeaderBytes+n)
		if err != nil {
			return nil, err
		}
		if r, done, err := f.followStaple(ctx, p, b, info, off, n); done {
			return r, err
		}
		return b[HeaderBytes:], nil
	}
	b, info, err := f.c.ReadPart(ctx, f.ks, key, HeaderBytes+off, n)
	if err != nil || info.Size != HeaderBytes {
		return b, err
	}
	// A header alone: an empty file, or a staple.
	h, hinfo, err := f.c.ReadPart(ctx, f.ks, key, 0, HeaderBytes)
	if err != nil {
		return nil, err
	}
	if r, done, err := f.followStaple(ctx, p, h, hinfo, off, n); done {
		return r, err
	}
	if hinfo.Version != info.Version {
		return nil, errRaced // no longer empty, maybe
	}
	return nil, nil
}

// readLarge is readAt of more than one request's bytes: the header first,
// then the data, in parts, at one version; a read that comes out short is
// checked against the header's version, since a plain file turned staple
// meanwhile reads short.
func (f *FS) readLarge(ctx context.Context, p string, off, n uint64) ([]byte, error) {
	key := fslayout.FileKey(p)
	h, info, err := f.c.ReadPart(ctx, f.ks, key, 0, HeaderBytes)
	if err != nil {
		return nil, err
	}
	if r, done, err := f.followStaple(ctx, p, h, info, off, n); done {
		return r, err
	}
	b, err := f.c.Read(ctx, f.ks, key, HeaderBytes+off, n)
	if err != nil || uint64(len(b)) == n {
		return b, err
	}
	if _, again, err := f.c.ReadPart(ctx, f.ks, key, 0, 0); err != nil {
		return nil, err
	} else if again.Version != info.Version {
		return nil, errRaced
	}
	return b, nil
}

// followStaple checks b, the start of the blob of the file at p (info its
// size and version): for a plain file it is not done; for a staple it
// reads n bytes from off through the pointer; for a data blob it answers
// ENOENT.
func (f *FS) followStaple(ctx context.Context, p string, b []byte, info client.BlobInfo, off, n uint64) ([]byte, bool, error) {
	if _, err := fslayout.DecodeHeader(fslayout.FileKey(p), b, info.Size); err != nil {
		return nil, true, err
	}
	switch fl := flagsOf(b); {
	case fl&fslayout.FlagMovedOut != 0:
		return nil, true, errnof(syscall.ENOENT, "%s", p)
	case fl&fslayout.FlagStapled != 0:
		r, err := f.readStapled(ctx, p, off, n)
		return r, true, err
	}
	return nil, false, nil
}

// readStapled reads the staple at p's data through its pointer.
func (f *FS) readStapled(ctx context.Context, p string, off, n uint64) ([]byte, error) {
	var b []byte
	err := f.viaPointer(ctx, p, func(data string) error {
		var err error
		b, err = f.c.Read(ctx, f.ks, data, HeaderBytes+off, n)
		return err
	})
	return b, err
}

// WriteAt writes data at off into the file at p and sets its mtime and
// ctime: one atomic commit for up to client.PayloadBytesMax bytes, one
// commit per such part beyond.
func (f *FS) WriteAt(ctx context.Context, p string, off uint64, data []byte) error {
	_, err := f.WriteAtFrom(ctx, p, off, data, 0)
	return err
}

// WriteAtFrom is WriteAt for a caller that knows a version of the file,
// base (Attr.Version; 0: none). It returns the file's version after the
// write when the file was at base before it, so that the write alone made
// the difference (as NFS's weak cache consistency tells a client whether
// its cached pages are still the file's), in the same requests. It
// returns 0 when base is 0, when the file had changed, and for a file
// whose data is behind a staple.
func (f *FS) WriteAtFrom(ctx context.Context, p string, off uint64, data []byte, base uint64) (uint64, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return 0, err
	}
	if off+uint64(len(data)) > FileBytesMax {
		return 0, errnof(syscall.EFBIG, "write to %d bytes, above %d", off+uint64(len(data)), uint64(FileBytesMax))
	}
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), client.PayloadBytesMax)
		t := f.now()
		if _, base, err = f.commitFileFrom(ctx, p, base, func(dk, mk string) []client.Op {
			return []client.Op{client.WriteOp(dk, HeaderBytes+off, data[:n], false), client.WriteOp(mk, fslayout.OffMtime, times(t, t), false)}
		}); err != nil {
			return 0, err
		}
		off += uint64(n)
		data = data[n:]
	}
	return base, nil
}

// Append writes data at the end of the file at p, atomically, and returns
// the offset where it landed. At most client.PayloadBytesMax bytes.
func (f *FS) Append(ctx context.Context, p string, data []byte) (uint64, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return 0, err
	}
	t := f.now()
	r, err := f.commitFile(ctx, p, func(dk, mk string) []client.Op {
		return []client.Op{client.AppendOp(dk, data, false), client.WriteOp(mk, fslayout.OffMtime, times(t, t), false)}
	})
	if err != nil {
		return 0, err
	}
	return r[0].Offset - HeaderBytes, nil
}

// SetAttr lists the attributes Setattr changes; nil fields stay.
type SetAttr struct {
	Mode         *uint32 // permission bits
	UID, GID     *uint32
	Atime, Mtime *int64 // ns since the epoch
	Size         *uint64
}

// Setattr changes the attributes of p, of kind k (see Stat), and its ctime,
// in one commit, and returns the new attributes. A size truncates or
// extends (with zeros) a file: EISDIR for a directory, EINVAL for a
// symbolic link.
func (f *FS) Setattr(ctx context.Context, p string, k Kind, s SetAttr) (Attr, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return Attr{}, err
	}
	key := fslayout.KeyOf(p, k)
	t := f.now()
	// The header's fields are collected first; a size goes to the blob
	// with the data (a staple's data blob).
	type field struct {
		off uint64
		b   []byte
	}
	var fields []field
	u32 := func(off int, v uint32) {
		b := make([]byte, 4)
		binary.LittleEndian.PutUint32(b, v)
		fields = append(fields, field{uint64(off), b})
	}
	i64 := func(off int, v int64) {
		b := make([]byte, 8)
		fslayout.PutTime(b, v)
		fields = append(fields, field{uint64(off), b})
	}
	if s.Size != nil {
		if k == KindDir {
			return Attr{}, errnof(syscall.EISDIR, "%s", p)
		}
		if *s.Size > FileBytesMax {
			return Attr{}, errnof(syscall.EFBIG, "size %d, above %d", *s.Size, uint64(FileBytesMax))
		}
		if s.Mtime == nil {
			i64(fslayout.OffMtime, t)
		}
	}
	if s.Mode != nil {
		u32(fslayout.OffMode, *s.Mode&07777)
	}
	if s.UID != nil {
		u32(fslayout.OffUID, *s.UID)
	}
	if s.GID != nil {
		u32(fslayout.OffGID, *s.GID)
	}
	if s.Atime != nil {
		i64(fslayout.OffAtime, *s.Atime)
	}
	if s.Mtime != nil {
		i64(fslayout.OffMtime, *s.Mtime)
	}
	i64(fslayout.OffCtime, t)
	change := func(dk, mk string) []client.Op {
		var ops []client.Op
		if s.Size != nil {
			ops = append(ops, client.TruncateOp(dk, HeaderBytes+*s.Size))
		}
		for _, fd := range fields {
			ops = append(ops, client.WriteOp(mk, fd.off, fd.b, false))
		}
		return ops
	}
	if k == KindDir {
		_, err = f.c.Commit(ctx, f.ks, change(key, key)...)
	} else {
		_, err = f.commitFile(ctx, p, change)
	}
	if err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return Attr{}, errnof(syscall.ENOENT, "%s", p)
		}
		return Attr{}, err
	}
	if k == KindDir && (s.Mode != nil || s.UID != nil || s.GID != nil) {
		if err := f.invalidate(ctx, p); err != nil {
			return Attr{}, err
		}
	}
	return f.stat(ctx, key)
}

// Truncate sets the size of the file at p.
func (f *FS) Truncate(ctx context.Context, p string, size uint64) error {
	_, err := f.Setattr(ctx, p, KindFile, SetAttr{Size: &size})
	return err
}

// Unlink removes the file or symbolic link at p and its parent's entry in
// one commit: EISDIR for a directory, ENOENT if absent.
func (f *FS) Unlink(ctx context.Context, p string) error {
	return f.UnlinkAt(ctx, p, f.now())
}

// UnlinkAt is Unlink setting the parent directory's mtime and ctime to t
// (nanoseconds since the epoch) rather than to now, so that a caller
// keeping the directory's attributes knows them once it succeeded.
func (f *FS) UnlinkAt(ctx context.Context, p string, t int64) error {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return err
	}
	if p == "/" {
		return errnof(syscall.EISDIR, "/")
	}
	if t == 0 {
		return errnof(syscall.EINVAL, "%s: an unlink at time 0", p)
	}
	parent, name := fslayout.Split(p)
	_, err = f.commitFile(ctx, p, func(dk, mk string) []client.Op {
		ops := []client.Op{client.DeleteOp(mk)}
		if dk != mk {
			ops = dropStapleOps(p, dk)
		}
		return append(ops, client.AppendOp(fslayout.DirKey(parent), fslayout.EncodeRecord(fslayout.RecordRemove, KindFile, name), false),
			touchParent(parent, t))
	})
	if errors.Is(err, client.ErrNotFound) || errors.Is(err, syscall.ENOENT) {
		if _, derr := f.stat(ctx, fslayout.DirKey(p)); derr == nil {
			return errnof(syscall.EISDIR, "%s", p)
		}
		return errnof(syscall.ENOENT, "%s", p)
	}
	return err
}

// txOptions let a transaction of the file system run again more often than
// RunTx's default: a conflict means another change to the same blobs went
// first, and system calls have no conflict errno to report it with (one
// that still conflicts after these fails with EAGAIN).
var txOptions = &client.TxOptions{MaxRetries: 50, MaxBackoff: 100 * time.Millisecond}

// readDir reads and replays the log of the directory at clean path p.
func (f *FS) readDir(ctx context.Context, p string) (fslayout.DirLog, error) {
	key := fslayout.DirKey(p)
	b, err := f.c.Read(ctx, f.ks, key, 0, client.BlobBytesMax)
	if errors.Is(err, client.ErrNotFound) {
		return fslayout.DirLog{}, f.missingDir(ctx, p)
	}
	if err != nil {
		return fslayout.DirLog{}, err
	}
	return fslayout.ReplayDir(key, b)
}

// Readdir returns the entries of the directory at p in the order they were
// added, "." and ".." excluded. The servers compact the log in the
// background once removals dominate it (fslayout, invariant 3).
func (f *FS) Readdir(ctx context.Context, p string) ([]Entry, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return nil, err
	}
	l, err := f.readDir(ctx, p)
	if err != nil {
		return nil, err
	}
	return l.List(), nil
}

// readAll reads the whole blob key in tx, in parts.
func readAll(ctx context.Context, tx *client.Tx, key string) ([]byte, error) {
	size, err := tx.Size(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, size)
	for uint64(len(out)) < size {
		b, err := tx.Read(ctx, key, uint64(len(out)), min(size-uint64(len(out)), client.PayloadBytesMax))
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			break
		}
		out = append(out, b...)
	}
	return out, nil
}

// replayIn reads the whole blob of directory key in tx and replays its
// log.
func replayIn(ctx context.Context, tx *client.Tx, key string) (fslayout.DirLog, error) {
	b, err := readAll(ctx, tx, key)
	if err != nil {
		return fslayout.DirLog{}, err
	}
	return fslayout.ReplayDir(key, b)
}

// Rmdir removes the empty directory at p and its parent's entry in one
// transaction: ENOTEMPTY if it has entries, ENOTDIR if p is a file, EBUSY
// for the root.
func (f *FS) Rmdir(ctx context.Context, p string) error {
	return f.RmdirAt(ctx, p, f.now())
}

// RmdirAt is Rmdir setting the parent directory's mtime and ctime to t, as
// UnlinkAt does.
func (f *FS) RmdirAt(ctx context.Context, p string, t int64) error {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return err
	}
	if p == "/" {
		return errnof(syscall.EBUSY, "/")
	}
	if t == 0 {
		return errnof(syscall.EINVAL, "%s: an rmdir at time 0", p)
	}
	parent, name := fslayout.Split(p)
	key := fslayout.DirKey(p)
	err = f.c.RunTx(ctx, f.ks, func(tx *client.Tx) error {
		l, err := replayIn(ctx, tx, key)
		if err != nil {
			return err
		}
		if l.Len() > 0 {
			return errnof(syscall.ENOTEMPTY, "%s", p)
		}
		return tx.Do(client.DeleteOp(key),
			client.AppendOp(fslayout.DirKey(parent), fslayout.EncodeRecord(fslayout.RecordRemove, KindDir, name), false),
			touchParent(parent, t), subdirsOp(parent, -1))
	}, txOptions)
	if errors.Is(err, client.ErrNotFound) {
		return f.missingDir(ctx, p)
	}
	if err != nil {
		return err
	}
	return f.invalidate(ctx, p)
}

// Rename flags, as renameat2(2) takes them.
const (
	RenameNoReplace = 1 << 0 // RENAME_NOREPLACE
	RenameExchange  = 1 << 1 // RENAME_EXCHANGE, not supported (EINVAL)
)

// Rename moves oldPath to newPath in one transaction, replacing a file at
// newPath or an empty directory there, as rename(2) does: observers see the
// old name or the new one, never both nor neither. A file of at least
// fslayout.StapleBytesMin bytes, or one renamed before (a staple), is
// stapled: no data moves (fslayout, invariant 5). Other blobs are copied:
// a directory whose subtree holds up to MoveBlobsMax blobs, with up to
// MoveBytesMax bytes of headers, logs and small files in all; a larger one
// fails with EXDEV (mv(1) then copies and deletes, not atomically).
func (f *FS) Rename(ctx context.Context, oldPath, newPath string, flags uint32) error {
	_, err := f.RenameKeeping(ctx, oldPath, newPath, "", flags)
	return err
}

// RenameKeeping is Rename, but a file it replaces at newPath that it
// copies, a regular file under fslayout.StapleBytesMin bytes and no
// staple, is not removed: it moves to the name keep in newPath's
// directory, in the same transaction, as a rename would move it there
// (keep must be free: EEXIST). It reports whether it kept a file so; a
// larger one, a staple, or another kind is replaced as Rename replaces
// it. An empty keep keeps nothing. A mount keeps so a file replaced while
// open, for the descriptors open on it (internal/fusefs, unlinked.go).
func (f *FS) RenameKeeping(ctx context.Context, oldPath, newPath, keep string, flags uint32) (bool, error) {
	oldPath, err := fslayout.CleanPath(oldPath)
	if err != nil {
		return false, err
	}
	newPath, err = fslayout.CleanPath(newPath)
	if err != nil {
		return false, err
	}
	if keep != "" {
		if err := fslayout.CheckName(keep); err != nil {
			return false, err
		}
		parent, _ := fslayout.Split(newPath)
		if _, err := fslayout.CleanPath(fslayout.Join(parent, keep)); err != nil {
			return false, err
		}
	}
	if flags&RenameExchange != 0 || flags&^(RenameNoReplace|RenameExchange) != 0 {
		return false, errnof(syscall.EINVAL, "rename flags %#x not supported", flags)
	}
	if oldPath == "/" || newPath == "/" {
		return false, errnof(syscall.EBUSY, "rename of the root")
	}
	if strings.HasPrefix(newPath, oldPath+"/") {
		return false, errnof(syscall.EINVAL, "rename of %s into itself", oldPath)
	}
	var r renamed
	for range racesMax {
		r, err = f.rename(ctx, oldPath, newPath, keep, flags)
		if errors.Is(err, client.ErrNotFound) && len(r.held) == 0 && f.renameRaced(ctx, oldPath, newPath) {
			continue
		}
		if len(r.held) == 0 {
			break
		}
		// Names the rename needs are held by staples' data blobs.
		for _, key := range r.held {
			if err := f.freeName(ctx, key); err != nil {
				return false, err
			}
		}
	}
	if err == nil && len(r.held) > 0 {
		return false, errnof(syscall.EAGAIN, "rename to %s: names under it kept being taken", newPath)
	}
	if errors.Is(err, client.ErrNotFound) {
		newParent, _ := fslayout.Split(newPath)
		return false, f.missingDir(ctx, newParent)
	}
	if err != nil || r.kind != KindDir || oldPath == newPath {
		return r.kept, err
	}
	// The directories under oldPath are gone, and one replaced at
	// newPath has the moved one's header.
	if err := f.invalidate(ctx, oldPath); err != nil {
		return false, err
	}
	return false, f.invalidate(ctx, newPath)
}

// renameRaced reports whether a rename that failed as not found should run
// again: its source and its destination's parent are there, so a blob its
// transaction read went before its commit applied (see fileTx).
func (f *FS) renameRaced(ctx context.Context, oldPath, newPath string) bool {
	newParent, _ := fslayout.Split(newPath)
	if _, err := f.Lookup(ctx, oldPath); err != nil {
		return false
	}
	_, err := f.stat(ctx, fslayout.DirKey(newParent))
	return err == nil
}

// renamed is what one try of a rename did: the source's kind, the file
// keys the rename needs that staples' data blobs hold (the caller frees
// them and tries again), and whether it kept the file it replaced
// (RenameKeeping).
type renamed struct {
	kind Kind
	held []string
	kept bool
}

// rename is one try of RenameKeeping.
func (f *FS) rename(ctx context.Context, oldPath, newPath, keep string, flags uint32) (renamed, error) {
	oldParent, oldName := fslayout.Split(oldPath)
	newParent, newName := fslayout.Split(newPath)
	var src node
	var r renamed
	err := f.c.RunTx(ctx, f.ks, func(tx *client.Tx) error {
		var err error
		r = renamed{}
		src, err = nodeIn(ctx, tx, oldPath)
		if err != nil {
			return err
		}
		if src.kind == 0 {
			return errnof(syscall.ENOENT, "%s", oldPath)
		}
		if oldPath == newPath {
			return nil
		}
		dst, err := nodeIn(ctx, tx, newPath)
		if err != nil {
			return err
		}
		if dst.kind != 0 {
			if flags&RenameNoReplace != 0 {
				return errnof(syscall.EEXIST, "%s", newPath)
			}
			if src.kind == KindDir && dst.kind != KindDir {
				return errnof(syscall.ENOTDIR, "%s", newPath)
			}
			if src.kind != KindDir && dst.kind == KindDir {
				return errnof(syscall.EISDIR, "%s", newPath)
			}
		}
		if dst.dataHere && src.data != fslayout.FileKey(newPath) && src.kind != KindDir {
			r.held = append(r.held, fslayout.FileKey(newPath))
			return nil
		}
		// The replaced file is kept when a copy moves it (no staple).
		keepPath := fslayout.Join(newParent, keep)
		r.kept = keep != "" && dst.kind == KindFile && dst.data == "" && dst.size < fslayout.StapleBytesMin
		if r.kept {
			if k, err := nodeIn(ctx, tx, keepPath); err != nil {
				return err
			} else if k.kind != 0 || k.dataHere {
				return errnof(syscall.EEXIST, "%s", keepPath)
			}
		}
		m := mover{fs: f, tx: tx, blobsLeft: MoveBlobsMax, bytesLeft: MoveBytesMax}
		if dst.kind == KindDir {
			l, err := replayIn(ctx, tx, fslayout.DirKey(newPath))
			if err != nil {
				return err
			}
			if l.Len() > 0 {
				return errnof(syscall.ENOTEMPTY, "%s", newPath)
			}
		}
		t := f.now()
		var ops []client.Op
		switch {
		case r.kept:
			// Moved first: its key is deleted before the source's
			// bytes are written to it.
			if err := m.collect(ctx, newPath, keepPath, KindFile, t); err != nil {
				return err
			}
		case dst.data != "":
			ops = append(ops, dropStapleOps(newPath, dst.data)...)
		case dst.kind != 0:
			// The same key as the moved blob's new one (kinds match, or
			// the checks above refused): emptied, then written.
			ops = append(ops, client.TruncateOp(fslayout.KeyOf(newPath, dst.kind), 0))
		}
		if dst.kind != 0 && !r.kept {
			drop, err := dropLocksOps(ctx, tx, newPath)
			if err != nil {
				return err
			}
			ops = append(ops, drop...)
		}
		if err := m.collect(ctx, oldPath, newPath, src.kind, t); err != nil {
			return err
		}
		if r.held = m.held; len(r.held) > 0 {
			return nil
		}
		ops = append(ops, m.ops...)
		ops = append(ops, client.AppendOp(fslayout.DirKey(oldParent), fslayout.EncodeRecord(fslayout.RecordRemove, src.kind, oldName), false),
			touchParent(oldParent, t))
		if dst.kind != 0 {
			ops = append(ops, client.AppendOp(fslayout.DirKey(newParent), fslayout.EncodeRecord(fslayout.RecordRemove, dst.kind, newName), false))
		}
		if r.kept {
			ops = append(ops, client.AppendOp(fslayout.DirKey(newParent), fslayout.EncodeRecord(fslayout.RecordAdd, dst.kind, keep), false))
		}
		ops = append(ops, client.AppendOp(fslayout.DirKey(newParent), fslayout.EncodeRecord(fslayout.RecordAdd, src.kind, newName), false),
			touchParent(newParent, t))
		// Subdirectories counted (invariant 6): the moved one leaves its
		// parent for the new one, and one replaced there goes.
		var moved, replaced int32
		if src.kind == KindDir && oldParent != newParent {
			moved = 1
			ops = append(ops, subdirsOp(oldParent, -1))
		}
		if dst.kind == KindDir {
			replaced = 1
		}
		if moved != replaced {
			ops = append(ops, subdirsOp(newParent, moved-replaced))
		}
		return tx.Do(ops...)
	}, txOptions)
	r.kind = src.kind
	return r, err
}

// node is what a transaction finds at a path.
type node struct {
	kind   Kind
	header []byte // a file's header
	size   uint64 // a file's data bytes, a staple's 0
	// data is a staple's data blob ("" for a plain file).
	data string
	// dataHere: the path's file key is a staple's data blob, so no file
	// (the path holds a directory, or nothing).
	dataHere bool
}

// nodeIn returns what tx finds at clean path p; kind 0 if nothing.
func nodeIn(ctx context.Context, tx *client.Tx, p string) (node, error) {
	key := fslayout.FileKey(p)
	var n node
	b, err := tx.Read(ctx, key, 0, HeaderBytes)
	if err == nil {
		size, err := tx.Size(ctx, key)
		if err != nil {
			return node{}, err
		}
		a, err := fslayout.DecodeHeader(key, b, size)
		if err != nil {
			return node{}, err
		}
		switch fl := flagsOf(b); {
		case fl&fslayout.FlagMovedOut != 0:
			n.dataHere = true
		case fl&fslayout.FlagStapled != 0:
			d, err := tx.Read(ctx, fslayout.PointerKey(p), 0, limits.KeyBytesMax)
			if err != nil {
				return node{}, err
			}
			return node{kind: a.Kind, header: b, data: string(d)}, nil
		default:
			return node{kind: a.Kind, header: b, size: a.Size}, nil
		}
	} else if !errors.Is(err, client.ErrNotFound) {
		return node{}, err
	}
	if _, err := tx.Size(ctx, fslayout.DirKey(p)); err == nil {
		n.kind = KindDir
	} else if !errors.Is(err, client.ErrNotFound) {
		return node{}, err
	}
	return n, nil
}

// mover gathers the ops that move a blob and, for a directory, every blob
// under it, within the rename limits.
type mover struct {
	fs        *FS
	tx        *client.Tx
	ops       []client.Op
	blobsLeft int
	bytesLeft int
	// held lists the file keys under the destination that staples' data
	// blobs hold: the rename cannot go on until they are freed.
	held []string
}

// moveOpsMax bounds the ops of one rename's moves: its transaction carries
// at most client.OpsPerTxMax, and the rename adds a few to the parents.
const moveOpsMax = client.OpsPerTxMax - 16

// collect adds the ops moving the node of kind k at clean path from to
// clean path to, setting its ctime to t, and then its descendants' if it
// is a directory (their ctimes stay). A file is stapled when large or a
// staple already; other blobs are copied.
func (m *mover) collect(ctx context.Context, from, to string, k Kind, t int64) error {
	m.blobsLeft--
	if m.blobsLeft < 0 {
		return errnof(syscall.EXDEV, "rename of more than %d blobs", MoveBlobsMax)
	}
	if t != 0 {
		// The renamed node (descendants have t 0): its locks, and those
		// of everything under it, go with it.
		if err := m.moveLocks(ctx, from, to); err != nil {
			return err
		}
		if k == KindDir {
			if err := m.moveLocksUnder(ctx, from, to); err != nil {
				return err
			}
		}
	}
	if k != KindDir {
		n, err := nodeIn(ctx, m.tx, from)
		if err != nil {
			return err
		}
		if t == 0 {
			// A descendant: its new key may be a data blob's still; a
			// staple's own comes home.
			if h, err := m.tx.Read(ctx, fslayout.FileKey(to), 0, HeaderBytes); err == nil && flagsOf(h)&fslayout.FlagMovedOut != 0 && n.data != fslayout.FileKey(to) {
				m.held = append(m.held, fslayout.FileKey(to))
			} else if err != nil && !errors.Is(err, client.ErrNotFound) {
				return err
			}
		}
		if n.kind == KindFile && (n.data != "" || n.size >= fslayout.StapleBytesMin) {
			h := append([]byte(nil), n.header...)
			if t != 0 {
				fslayout.PutTime(h[fslayout.OffCtime:], t)
			}
			data := n.data
			if data == "" {
				data = fslayout.FileKey(from)
			}
			return m.add(stapleOps(from, to, h, data, n.data != "")...)
		}
	}
	fromKey, toKey := fslayout.KeyOf(from, k), fslayout.KeyOf(to, k)
	dir := k == KindDir
	size, err := m.tx.Size(ctx, fromKey)
	if err != nil {
		return err
	}
	if dir && size >= fslayout.DirLogOffset {
		size -= fslayout.DirLogOffset - HeaderBytes // its hole, at most
	}
	if size > uint64(m.bytesLeft) {
		return errnof(syscall.EXDEV, "rename of more than %d bytes", MoveBytesMax)
	}
	b, err := readAll(ctx, m.tx, fromKey)
	if err != nil {
		return err
	}
	if len(b) < HeaderBytes {
		return fmt.Errorf("%w: %q has no header", ErrCorrupt, fromKey)
	}
	// A directory's header and log are copied apart, so that its hole
	// stays one (fslayout, invariant 4); a file's bytes go as they are.
	start, body := uint64(0), b
	if dir {
		if body, err = fslayout.DirLogOf(fromKey, b); err != nil {
			return err
		}
		start = fslayout.LogStart(b)
	}
	stored := len(body)
	if dir {
		stored += HeaderBytes
	}
	if m.bytesLeft -= stored; m.bytesLeft < 0 {
		return errnof(syscall.EXDEV, "rename of more than %d bytes", MoveBytesMax)
	}
	if t != 0 {
		fslayout.PutTime(b[fslayout.OffCtime:], t)
	}
	var ops []client.Op
	if dir {
		ops = append(ops, client.WriteOp(toKey, 0, b[:HeaderBytes], true), client.TruncateOp(toKey, start))
	}
	for off := 0; off == 0 && !dir || off < len(body); off += client.PayloadBytesMax {
		ops = append(ops, client.WriteOp(toKey, start+uint64(off), body[off:min(len(body), off+client.PayloadBytesMax)], true))
	}
	if err := m.add(append(ops, client.DeleteOp(fromKey))...); err != nil || !dir {
		return err
	}
	l, err := fslayout.ReplayLog(fromKey, body)
	if err != nil {
		return err
	}
	for _, e := range l.List() {
		if err := m.collect(ctx, fslayout.Join(from, e.Name), fslayout.Join(to, e.Name), e.Kind, 0); err != nil {
			return err
		}
	}
	return nil
}

// moveLocks adds the ops moving the lock table of clean path from, if it
// has one, to clean path to, so that the locks go with the node (a table
// at to is replaced).
func (m *mover) moveLocks(ctx context.Context, from, to string) error {
	key := fslayout.LockKey(from)
	b, err := readAll(ctx, m.tx, key)
	if errors.Is(err, client.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// The table remembers from, so that a holder that knows the file by
	// it, through another mount than this rename's, finds its locks
	// (FindMovedLocks).
	t, moved, err := fslock.DecodeMoved(b)
	if err != nil {
		return fmt.Errorf("tyrfs: locks of %s: %w", from, err)
	}
	if len(t) == 0 {
		return m.add(client.DeleteOp(key))
	}
	b = t.EncodeMoved(fslock.Moved(moved, from))
	dst := fslayout.LockKey(to)
	return m.add(client.WriteOp(dst, 0, b, true), client.TruncateOp(dst, uint64(len(b))), client.DeleteOp(key))
}

// moveLocksUnder adds the ops moving the lock tables under directory
// from to the same names under to. The tables are found by a listing,
// which the commit does not check: one made under from while the rename
// runs may stay behind (a take checks its file is still there after it
// commits, which may be before the rename commits). Each table counts as
// a blob moved.
func (m *mover) moveLocksUnder(ctx context.Context, from, to string) error {
	prefix := fslayout.LockKey(from + "/")
	if len(prefix) >= limits.KeyBytesMax {
		return nil // no name fits under from, so no table either
	}
	tables, next, err := m.fs.c.List(ctx, m.fs.ks, prefix, "", m.blobsLeft+1)
	if err != nil {
		return err
	}
	if next != "" || len(tables) > m.blobsLeft {
		return errnof(syscall.EXDEV, "rename of more than %d blobs", MoveBlobsMax)
	}
	m.blobsLeft -= len(tables)
	for _, tb := range tables {
		rest := strings.TrimPrefix(tb.Key, prefix)
		if err := m.moveLocks(ctx, from+"/"+rest, to+"/"+rest); err != nil {
			return err
		}
	}
	return nil
}

// dropLocksOps returns the ops deleting the lock table of clean path p,
// if it has one: the locks of a node a rename replaces go with it.
func dropLocksOps(ctx context.Context, tx *client.Tx, p string) ([]client.Op, error) {
	key := fslayout.LockKey(p)
	if _, err := tx.Size(ctx, key); errors.Is(err, client.ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return []client.Op{client.DeleteOp(key)}, nil
}

// add adds ops to the rename's, within moveOpsMax.
func (m *mover) add(ops ...client.Op) error {
	m.ops = append(m.ops, ops...)
	if len(m.ops) > moveOpsMax {
		return errnof(syscall.EXDEV, "rename of more than %d operations", moveOpsMax)
	}
	return nil
}

// Statfs describes the space of the node the client is connected to.
type Statfs struct {
	CapacityBytes, FreeBytes uint64
	Blobs                    uint64 // blobs of the keyspace on that node
}

// Statfs returns the figures of the endpoint node: its capacity and free
// space, and how many blobs of the keyspace it keeps.
func (f *FS) Statfs(ctx context.Context) (Statfs, error) {
	u, err := f.c.NodeUsage(ctx)
	if err != nil {
		return Statfs{}, err
	}
	s := Statfs{CapacityBytes: u.CapacityBytes, FreeBytes: min(u.FreeBytes, u.CapacityBytes)}
	if k, err := f.c.Keyspace(ctx, f.ks); err == nil {
		s.Blobs = k.Blobs
	}
	return s, nil
}

// Extend grows the file at p to size bytes (zeros) if it is smaller, in a
// transaction, as fallocate(2) without flags does; space is not reserved.
func (f *FS) Extend(ctx context.Context, p string, size uint64) error {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return err
	}
	if size > FileBytesMax {
		return errnof(syscall.EFBIG, "size %d, above %d", size, uint64(FileBytesMax))
	}
	_, err = f.fileTx(ctx, p, func(tx *client.Tx, dk, mk string) error {
		cur, err := tx.Size(ctx, dk)
		if err != nil || cur >= HeaderBytes+size {
			return err
		}
		t := f.now()
		return tx.Do(client.TruncateOp(dk, HeaderBytes+size), client.WriteOp(mk, fslayout.OffMtime, times(t, t), false))
	})
	return err
}
