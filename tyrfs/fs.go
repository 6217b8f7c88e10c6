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

// Stat returns the attributes of p, which holds kind k (KindDir, or
// KindFile for a file or symbolic link). One read of the blob's header.
func (f *FS) Stat(ctx context.Context, p string, k Kind) (Attr, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return Attr{}, err
	}
	return f.stat(ctx, fslayout.KeyOf(p, k))
}

func (f *FS) stat(ctx context.Context, key string) (Attr, error) {
	b, info, err := f.c.ReadPart(ctx, f.ks, key, 0, HeaderBytes)
	if err != nil {
		return Attr{}, err
	}
	return fslayout.DecodeHeader(key, b, info.Size)
}

// Lookup returns the attributes of whatever p is: a file or symbolic link
// (one read), else a directory (a second read). ENOENT if neither.
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
	if p != "/" {
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
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return Attr{}, nil, err
	}
	b, info, errno, err := f.c.FSFetch(ctx, f.ks, p, f.cred.UID, f.cred.GIDs, client.PayloadBytesMax)
	return f.fetched(ctx, p, client.FSFetchResult{Data: b, Info: info, Errno: errno, Err: err})
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
	if len(paths) > FetchManyMax {
		return nil, errnof(syscall.EINVAL, "a fetch of %d paths, above %d", len(paths), FetchManyMax)
	}
	out := make([]FetchResult, len(paths))
	var clean []string
	var at []int
	for i, p := range paths {
		cp, err := fslayout.CleanPath(p)
		if err != nil {
			out[i].Err = err
			continue
		}
		clean, at = append(clean, cp), append(at, i)
	}
	rs, err := f.c.FSFetchMany(ctx, f.ks, clean, f.cred.UID, f.cred.GIDs, client.PayloadBytesMax)
	if err != nil {
		return nil, err
	}
	for k, r := range rs {
		a, data, err := f.fetched(ctx, clean[k], r)
		out[at[k]] = FetchResult{Attr: a, Data: data, Err: err}
	}
	return out, nil
}

// fetched is what a fetch of the clean path p answered, for the caller:
// the file's attributes and bytes (the rest of a file longer than the
// fetch's read, read at its version), or an errno error for a refusal.
func (f *FS) fetched(ctx context.Context, p string, r client.FSFetchResult) (Attr, []byte, error) {
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
		// gone already, the whole blob again, at one version.
		whole := make([]byte, info.Size)
		err := f.c.ReadVersion(ctx, f.ks, key, info.Version, uint64(len(b)), whole[copy(whole, b):])
		switch {
		case err == nil:
			b = whole
		case errors.Is(err, client.ErrConflict):
			if b, err = f.c.Read(ctx, f.ks, key, 0, client.BlobBytesMax); err != nil {
				return Attr{}, nil, err
			}
			info.Size = uint64(len(b))
		default:
			return Attr{}, nil, err
		}
	}
	a, err := fslayout.DecodeHeader(key, b, info.Size)
	if err != nil {
		return Attr{}, nil, err
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

// fileTimes are the access and modification times a node is created with
// (ns since the epoch), where not now.
type fileTimes struct{ atime, mtime int64 }

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
	a := Attr{Kind: k, Mode: o.Mode & 07777, UID: o.UID, GID: o.GID, Atime: t, Mtime: t, Ctime: t, Btime: t,
		Rdev: rdev, Size: uint64(len(data))}
	if times != nil {
		a.Atime, a.Mtime = times.atime, times.mtime
	}
	key, other := fslayout.FileKey(p), fslayout.DirKey(p)
	if k == KindDir {
		key, other = other, key
	}
	// One request: the name's other key (a directory for a file, a file
	// for a directory) is checked absent as the commit applies.
	_, err = f.c.CommitIf(ctx, f.ks, []client.Check{{Key: other}}, append(newBlobOps(key, append(fslayout.EncodeHeader(a), data...)),
		client.AppendOp(fslayout.DirKey(parent), fslayout.EncodeRecord(fslayout.RecordAdd, k, name), false),
		touchParent(parent, t))...)
	switch {
	case errors.Is(err, client.ErrExists), errors.Is(err, client.ErrConflict):
		return Attr{}, errnof(syscall.EEXIST, "%s", p)
	case errors.Is(err, client.ErrNotFound):
		return Attr{}, f.missingDir(ctx, parent)
	case err != nil:
		return Attr{}, err
	}
	return a, nil
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
	return f.c.Read(ctx, f.ks, fslayout.FileKey(p), HeaderBytes+off, n)
}

// WriteAt writes data at off into the file at p and sets its mtime and
// ctime: one atomic commit for up to client.PayloadBytesMax bytes, one
// commit per such part beyond.
func (f *FS) WriteAt(ctx context.Context, p string, off uint64, data []byte) error {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return err
	}
	if off+uint64(len(data)) > FileBytesMax {
		return errnof(syscall.EFBIG, "write to %d bytes, above %d", off+uint64(len(data)), uint64(FileBytesMax))
	}
	key := fslayout.FileKey(p)
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), client.PayloadBytesMax)
		t := f.now()
		if _, err := f.c.Commit(ctx, f.ks, client.WriteOp(key, HeaderBytes+off, data[:n], false),
			client.WriteOp(key, fslayout.OffMtime, times(t, t), false)); err != nil {
			return err
		}
		off += uint64(n)
		data = data[n:]
	}
	return nil
}

// Append writes data at the end of the file at p, atomically, and returns
// the offset where it landed. At most client.PayloadBytesMax bytes.
func (f *FS) Append(ctx context.Context, p string, data []byte) (uint64, error) {
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return 0, err
	}
	key := fslayout.FileKey(p)
	t := f.now()
	r, err := f.c.Commit(ctx, f.ks, client.AppendOp(key, data, false), client.WriteOp(key, fslayout.OffMtime, times(t, t), false))
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
	var ops []client.Op
	u32 := func(off int, v uint32) {
		b := make([]byte, 4)
		binary.LittleEndian.PutUint32(b, v)
		ops = append(ops, client.WriteOp(key, uint64(off), b, false))
	}
	i64 := func(off int, v int64) {
		b := make([]byte, 8)
		fslayout.PutTime(b, v)
		ops = append(ops, client.WriteOp(key, uint64(off), b, false))
	}
	if s.Size != nil {
		if k == KindDir {
			return Attr{}, errnof(syscall.EISDIR, "%s", p)
		}
		if *s.Size > FileBytesMax {
			return Attr{}, errnof(syscall.EFBIG, "size %d, above %d", *s.Size, uint64(FileBytesMax))
		}
		ops = append(ops, client.TruncateOp(key, HeaderBytes+*s.Size))
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
	if _, err := f.c.Commit(ctx, f.ks, ops...); err != nil {
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
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return err
	}
	if p == "/" {
		return errnof(syscall.EISDIR, "/")
	}
	parent, name := fslayout.Split(p)
	t := f.now()
	_, err = f.c.Commit(ctx, f.ks, client.DeleteOp(fslayout.FileKey(p)),
		client.AppendOp(fslayout.DirKey(parent), fslayout.EncodeRecord(fslayout.RecordRemove, KindFile, name), false),
		touchParent(parent, t))
	if errors.Is(err, client.ErrNotFound) {
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
	p, err := fslayout.CleanPath(p)
	if err != nil {
		return err
	}
	if p == "/" {
		return errnof(syscall.EBUSY, "/")
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
			touchParent(parent, f.now()))
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
// old name or the new one, never both nor neither. The blobs are copied:
// a file of up to MoveBytesMax bytes, a directory whose subtree holds up to
// MoveBlobsMax blobs of up to MoveBytesMax bytes in all; a larger one fails
// with EXDEV (mv(1) then copies and deletes, not atomically).
func (f *FS) Rename(ctx context.Context, oldPath, newPath string, flags uint32) error {
	oldPath, err := fslayout.CleanPath(oldPath)
	if err != nil {
		return err
	}
	newPath, err = fslayout.CleanPath(newPath)
	if err != nil {
		return err
	}
	if flags&RenameExchange != 0 || flags&^(RenameNoReplace|RenameExchange) != 0 {
		return errnof(syscall.EINVAL, "rename flags %#x not supported", flags)
	}
	if oldPath == "/" || newPath == "/" {
		return errnof(syscall.EBUSY, "rename of the root")
	}
	if strings.HasPrefix(newPath, oldPath+"/") {
		return errnof(syscall.EINVAL, "rename of %s into itself", oldPath)
	}
	oldParent, oldName := fslayout.Split(oldPath)
	newParent, newName := fslayout.Split(newPath)
	var srcKind Kind
	err = f.c.RunTx(ctx, f.ks, func(tx *client.Tx) error {
		var err error
		srcKind, err = kindIn(ctx, tx, oldPath)
		if err != nil {
			return err
		}
		if srcKind == 0 {
			return errnof(syscall.ENOENT, "%s", oldPath)
		}
		if oldPath == newPath {
			return nil
		}
		dstKind, err := kindIn(ctx, tx, newPath)
		if err != nil {
			return err
		}
		if dstKind != 0 {
			if flags&RenameNoReplace != 0 {
				return errnof(syscall.EEXIST, "%s", newPath)
			}
			if srcKind == KindDir && dstKind != KindDir {
				return errnof(syscall.ENOTDIR, "%s", newPath)
			}
			if srcKind != KindDir && dstKind == KindDir {
				return errnof(syscall.EISDIR, "%s", newPath)
			}
		}
		m := mover{tx: tx, blobsLeft: MoveBlobsMax, bytesLeft: MoveBytesMax}
		if dstKind == KindDir {
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
		if dstKind != 0 {
			// The same key as the moved blob's new one (kinds match, or
			// the checks above refused): emptied, then written.
			ops = append(ops, client.TruncateOp(fslayout.KeyOf(newPath, dstKind), 0))
		}
		if err := m.collect(ctx, fslayout.KeyOf(oldPath, srcKind), fslayout.KeyOf(newPath, srcKind), t); err != nil {
			return err
		}
		ops = append(ops, m.ops...)
		ops = append(ops, client.AppendOp(fslayout.DirKey(oldParent), fslayout.EncodeRecord(fslayout.RecordRemove, srcKind, oldName), false),
			touchParent(oldParent, t))
		if dstKind != 0 {
			ops = append(ops, client.AppendOp(fslayout.DirKey(newParent), fslayout.EncodeRecord(fslayout.RecordRemove, dstKind, newName), false))
		}
		ops = append(ops, client.AppendOp(fslayout.DirKey(newParent), fslayout.EncodeRecord(fslayout.RecordAdd, srcKind, newName), false),
			touchParent(newParent, t))
		return tx.Do(ops...)
	}, txOptions)
	if errors.Is(err, client.ErrNotFound) {
		return f.missingDir(ctx, newParent)
	}
	if err != nil || srcKind != KindDir || oldPath == newPath {
		return err
	}
	// The directories under oldPath are gone, and one replaced at
	// newPath has the moved one's header.
	if err := f.invalidate(ctx, oldPath); err != nil {
		return err
	}
	return f.invalidate(ctx, newPath)
}

// kindIn returns the kind of p as tx sees it; 0 if absent.
func kindIn(ctx context.Context, tx *client.Tx, p string) (Kind, error) {
	b, err := tx.Read(ctx, fslayout.FileKey(p), 0, HeaderBytes)
	if err == nil {
		a, err := fslayout.DecodeHeader(fslayout.FileKey(p), b, max(uint64(len(b)), HeaderBytes))
		return a.Kind, err
	}
	if !errors.Is(err, client.ErrNotFound) {
		return 0, err
	}
	if _, err := tx.Size(ctx, fslayout.DirKey(p)); err == nil {
		return KindDir, nil
	} else if !errors.Is(err, client.ErrNotFound) {
		return 0, err
	}
	return 0, nil
}

// mover gathers the ops that move a blob and, for a directory, every blob
// under it, within the rename limits.
type mover struct {
	tx        *client.Tx
	ops       []client.Op
	blobsLeft int
	bytesLeft int
}

// moveOpsMax bounds the ops of one rename's moves: its transaction carries
// at most client.OpsPerTxMax, and the rename adds a few to the parents.
const moveOpsMax = client.OpsPerTxMax - 16

// collect adds the ops moving blob from to to, setting its ctime to t, and
// then its descendants' if it is a directory.
func (m *mover) collect(ctx context.Context, from, to string, t int64) error {
	m.blobsLeft--
	if m.blobsLeft < 0 {
		return errnof(syscall.EXDEV, "rename of more than %d blobs", MoveBlobsMax)
	}
	dir := strings.HasSuffix(from, "/")
	size, err := m.tx.Size(ctx, from)
	if err != nil {
		return err
	}
	if dir && size >= fslayout.DirLogOffset {
		size -= fslayout.DirLogOffset - HeaderBytes // its hole, at most
	}
	if size > uint64(m.bytesLeft) {
		return errnof(syscall.EXDEV, "rename of more than %d bytes", MoveBytesMax)
	}
	b, err := readAll(ctx, m.tx, from)
	if err != nil {
		return err
	}
	if len(b) < HeaderBytes {
		return fmt.Errorf("%w: %q has no header", ErrCorrupt, from)
	}
	// A directory's header and log are copied apart, so that its hole
	// stays one (fslayout, invariant 4); a file's bytes go as they are.
	start, body := uint64(0), b
	if dir {
		if body, err = fslayout.DirLogOf(from, b); err != nil {
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
	if dir {
		m.ops = append(m.ops, client.WriteOp(to, 0, b[:HeaderBytes], true), client.TruncateOp(to, start))
	}
	for off := 0; off == 0 && !dir || off < len(body); off += client.PayloadBytesMax {
		m.ops = append(m.ops, client.WriteOp(to, start+uint64(off), body[off:min(len(body), off+client.PayloadBytesMax)], true))
	}
	m.ops = append(m.ops, client.DeleteOp(from))
	if len(m.ops) > moveOpsMax {
		return errnof(syscall.EXDEV, "rename of more than %d operations", moveOpsMax)
	}
	if !dir {
		return nil
	}
	l, err := fslayout.ReplayLog(from, body)
	if err != nil {
		return err
	}
	for _, e := range l.List() {
		if err := m.collect(ctx, fslayout.KeyOf(strings.TrimSuffix(from, "/")+"/"+e.Name, e.Kind), fslayout.KeyOf(strings.TrimSuffix(to, "/")+"/"+e.Name, e.Kind), 0); err != nil {
			return err
		}
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
	key := fslayout.FileKey(p)
	return f.c.RunTx(ctx, f.ks, func(tx *client.Tx) error {
		cur, err := tx.Size(ctx, key)
		if err != nil || cur >= HeaderBytes+size {
			return err
		}
		t := f.now()
		return tx.Do(client.TruncateOp(key, HeaderBytes+size), client.WriteOp(key, fslayout.OffMtime, times(t, t), false))
	}, txOptions)
}
