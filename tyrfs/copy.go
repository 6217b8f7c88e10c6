package tyrfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fslayout"
)

// CopyStats counts what Import or Export did so far.
type CopyStats struct {
	Dirs, Files, Symlinks int
	Bytes                 uint64 // file bytes copied
	// Unchanged counts files left alone as already copied (same size and
	// mtime), which is what makes an interrupted copy resumable.
	Unchanged int
	// Skipped counts entries import and export leave out: device nodes,
	// FIFOs and sockets, which name things of one machine.
	Skipped int
}

func (s CopyStats) String() string {
	return fmt.Sprintf("%d dirs, %d files (%d bytes), %d symlinks, %d unchanged, %d skipped",
		s.Dirs, s.Files, s.Bytes, s.Symlinks, s.Unchanged, s.Skipped)
}

// copyChunkBytes is how much of a file one write of a copy carries.
const copyChunkBytes = client.PayloadBytesMax

// CopyWorkers is how many files Import and Export copy at once; each
// holds a buffer of up to 4 MiB.
const CopyWorkers = 8

// copier runs the file copies of an Import or Export on CopyWorkers
// goroutines, beside the walk that finds them, and counts what was done.
type copier struct {
	g        *errgroup.Group
	ctx      context.Context // ends at the first error
	mu       sync.Mutex
	st       CopyStats
	progress func(CopyStats)
}

func newCopier(ctx context.Context, progress func(CopyStats)) *copier {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(CopyWorkers)
	return &copier{g: g, ctx: gctx, progress: progress}
}

// count applies fn to the stats, then reports progress.
func (c *copier) count(fn func(st *CopyStats)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(&c.st)
	if c.progress != nil {
		c.progress(c.st)
	}
}

// copied counts a file copied (of size bytes) or left alone.
func (c *copier) copied(copied bool, size uint64) {
	c.count(func(st *CopyStats) {
		if copied {
			st.Files++
			st.Bytes += size
		} else {
			st.Unchanged++
		}
	})
}

// wait waits for the copies under way and returns the stats and the
// first error: a copy's (which also stops the walk), else the walk's.
func (c *copier) wait(walkErr error) (CopyStats, error) {
	err := c.g.Wait()
	if err == nil {
		err = walkErr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st, err
}

// dirAttrs is a directory whose mode and times are set once its entries
// are copied (adding them changes its mtime).
type dirAttrs struct {
	path         string
	mode         uint32
	uid, gid     uint32
	atime, mtime int64
}

// Import copies the local tree under src into the file system under dst
// (made if missing), keeping names, kinds, permission bits, owners and
// times. A file whose copy has the same size and mtime is left alone, so
// running Import again after an interruption resumes it: the mtime is set
// last, so a file copied half-way is copied again (a new file of up to
// WriteFileBytesMax bytes is made whole, times included, in one commit).
// CopyWorkers files are copied at once, each directory made before what
// is under it. progress, if not nil, is called after each entry, one call
// at a time. The error is the first one met; what was copied stays.
func (f *FS) Import(ctx context.Context, src, dst string, progress func(CopyStats)) (CopyStats, error) {
	dst, err := fslayout.CleanPath(dst)
	if err != nil {
		return CopyStats{}, err
	}
	if err := f.mkdirAll(ctx, dst); err != nil {
		return CopyStats{}, err
	}
	c := newCopier(ctx, progress)
	var dirs []dirAttrs
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := c.ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := dst
		if rel != "." {
			target = fslayout.Join(dst, filepath.ToSlash(rel))
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		sys, _ := info.Sys().(*syscall.Stat_t)
		if sys == nil {
			return fmt.Errorf("tyrfs: %s: no stat_t", p)
		}
		o := Owner{UID: sys.Uid, GID: sys.Gid, Mode: uint32(sys.Mode) & 07777}
		atime, mtime := sys.Atim.Nano(), sys.Mtim.Nano()
		switch {
		case d.IsDir():
			// Made before anything under it is copied: the walk
			// visits a directory before its entries.
			if rel != "." {
				if _, err := f.Mkdir(c.ctx, target, o); err != nil && !errors.Is(err, syscall.EEXIST) {
					return err
				}
			}
			dirs = append(dirs, dirAttrs{target, o.Mode, o.UID, o.GID, atime, mtime})
			c.count(func(st *CopyStats) { st.Dirs++ })
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			c.g.Go(func() error {
				if err := f.importSymlink(c.ctx, link, target, o, atime, mtime); err != nil {
					return err
				}
				c.count(func(st *CopyStats) { st.Symlinks++ })
				return nil
			})
		case info.Mode().IsRegular():
			size := uint64(info.Size())
			c.g.Go(func() error {
				copied, err := f.importFile(c.ctx, p, target, o, size, atime, mtime)
				if err != nil {
					return err
				}
				c.copied(copied, size)
				return nil
			})
		default:
			c.count(func(st *CopyStats) { st.Skipped++ })
		}
		return nil
	})
	st, err := c.wait(err)
	if err != nil {
		return st, err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if _, err := f.Setattr(ctx, d.path, KindDir, SetAttr{Mode: &d.mode, UID: &d.uid, GID: &d.gid, Atime: &d.atime, Mtime: &d.mtime}); err != nil {
			return st, err
		}
	}
	return st, nil
}

// mkdirAll makes the directory p and its missing parents (mode 0755).
func (f *FS) mkdirAll(ctx context.Context, p string) error {
	if p == "/" {
		return nil
	}
	a, err := f.Lookup(ctx, p)
	if err == nil {
		if a.Kind != KindDir {
			return errnof(syscall.ENOTDIR, "%s", p)
		}
		return nil
	}
	if !errors.Is(err, syscall.ENOENT) {
		return err
	}
	parent, _ := fslayout.Split(p)
	if err := f.mkdirAll(ctx, parent); err != nil {
		return err
	}
	if _, err := f.Mkdir(ctx, p, Owner{Mode: 0o755}); err != nil && !errors.Is(err, syscall.EEXIST) {
		return err
	}
	return nil
}

func (f *FS) importSymlink(ctx context.Context, link, target string, o Owner, atime, mtime int64) error {
	if old, err := f.Readlink(ctx, target); err == nil && old == link {
		return nil
	} else if err == nil {
		if err := f.Unlink(ctx, target); err != nil {
			return err
		}
	}
	if _, err := f.Symlink(ctx, link, target, o); err != nil {
		return err
	}
	_, err := f.Setattr(ctx, target, KindFile, SetAttr{Atime: &atime, Mtime: &mtime})
	return err
}

// importFile copies the local file p to target unless target has its size
// and mtime already, and reports whether it copied.
func (f *FS) importFile(ctx context.Context, p, target string, o Owner, size uint64, atime, mtime int64) (bool, error) {
	a, err := f.Lookup(ctx, target)
	switch {
	case err == nil && a.Kind == KindFile && a.Size == size && a.Mtime == mtime:
		return false, nil
	case err == nil && a.Kind != KindFile:
		return false, errnof(syscall.EEXIST, "%s is a %s", target, a.Kind)
	case err == nil:
		var zero uint64
		if _, err := f.Setattr(ctx, target, KindFile, SetAttr{Size: &zero}); err != nil {
			return false, err
		}
	case errors.Is(err, syscall.ENOENT) && size <= WriteFileBytesMax:
		// One commit: the file, its bytes, owner, mode and times.
		data, err := os.ReadFile(p)
		if err != nil {
			return false, err
		}
		_, err = f.createNode(ctx, target, KindFile, o, 0, data, &fileTimes{atime: atime, mtime: mtime})
		return true, err
	case errors.Is(err, syscall.ENOENT):
		if _, err := f.Create(ctx, target, o); err != nil {
			return false, err
		}
	default:
		return false, err
	}
	in, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer in.Close()
	buf := make([]byte, copyChunkBytes)
	for off := uint64(0); ; {
		n, err := io.ReadFull(in, buf)
		if n > 0 {
			if werr := f.WriteAt(ctx, target, off, buf[:n]); werr != nil {
				return false, werr
			}
			off += uint64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return false, err
		}
	}
	_, err = f.Setattr(ctx, target, KindFile, SetAttr{Mode: &o.Mode, UID: &o.UID, GID: &o.GID, Atime: &atime, Mtime: &mtime})
	return true, err
}

// Export copies the tree under src in the file system into the local
// directory dst (made if missing), keeping names, kinds, permission bits
// and times, and owners when run as root. A local file with the same size
// and mtime is left alone, so Export resumes as Import does; CopyWorkers
// files are copied at once, and progress is called as Import calls it.
func (f *FS) Export(ctx context.Context, src, dst string, progress func(CopyStats)) (CopyStats, error) {
	src, err := fslayout.CleanPath(src)
	if err != nil {
		return CopyStats{}, err
	}
	a, err := f.Stat(ctx, src, KindDir)
	if err != nil {
		return CopyStats{}, err
	}
	c := newCopier(ctx, progress)
	var dirs []dirAttrs
	var walk func(p, local string, a Attr) error
	walk = func(p, local string, a Attr) error {
		if err := os.MkdirAll(local, 0o700); err != nil {
			return err
		}
		dirs = append(dirs, dirAttrs{local, a.Mode, a.UID, a.GID, a.Atime, a.Mtime})
		c.count(func(st *CopyStats) { st.Dirs++ })
		entries, err := f.Readdir(c.ctx, p)
		if err != nil {
			return err
		}
		for _, e := range entries {
			child, lchild := fslayout.Join(p, e.Name), filepath.Join(local, e.Name)
			if e.Kind == KindDir {
				ca, err := f.Stat(c.ctx, child, e.Kind)
				if err != nil {
					return err
				}
				if err := walk(child, lchild, ca); err != nil {
					return err
				}
				continue
			}
			if err := c.ctx.Err(); err != nil {
				return err
			}
			c.g.Go(func() error { return f.exportEntry(c, child, lchild, e.Kind) })
		}
		return nil
	}
	st, err := c.wait(walk(src, dst, a))
	if err != nil {
		return st, err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := setLocal(d.path, d.mode, d.uid, d.gid, d.atime, d.mtime, false); err != nil {
			return st, err
		}
	}
	return st, nil
}

// exportEntry copies the entry p of kind k, not a directory, to local, and
// counts it.
func (f *FS) exportEntry(c *copier, p, local string, k Kind) error {
	a, err := f.Stat(c.ctx, p, k)
	if err != nil {
		return err
	}
	switch a.Kind {
	case KindSymlink:
		if err := f.exportSymlink(c.ctx, p, local, a); err != nil {
			return err
		}
		c.count(func(st *CopyStats) { st.Symlinks++ })
	case KindFifo, KindSocket, KindChar, KindBlock:
		c.count(func(st *CopyStats) { st.Skipped++ })
	default:
		copied, err := f.exportFile(c.ctx, p, local, a)
		if err != nil {
			return err
		}
		c.copied(copied, a.Size)
	}
	return nil
}

// setLocal sets a local entry's owner (as root only), mode (not for a
// link) and times.
func setLocal(p string, mode, uid, gid uint32, atime, mtime int64, link bool) error {
	if os.Geteuid() == 0 {
		if err := os.Lchown(p, int(uid), int(gid)); err != nil {
			return err
		}
	}
	if !link {
		if err := os.Chmod(p, fs.FileMode(mode&0o777)|modeBits(mode)); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime), unix.NsecToTimespec(mtime)}
	flags := 0
	if link {
		flags = unix.AT_SYMLINK_NOFOLLOW
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, flags); err != nil {
		return &os.PathError{Op: "utimensat", Path: p, Err: err}
	}
	return nil
}

// modeBits turns the setuid, setgid and sticky bits into fs.FileMode's.
func modeBits(mode uint32) fs.FileMode {
	var m fs.FileMode
	if mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func (f *FS) exportSymlink(ctx context.Context, p, local string, a Attr) error {
	link, err := f.Readlink(ctx, p)
	if err != nil {
		return err
	}
	if old, err := os.Readlink(local); err == nil && old == link {
		return nil
	}
	if err := os.Remove(local); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Symlink(link, local); err != nil {
		return err
	}
	return setLocal(local, a.Mode, a.UID, a.GID, a.Atime, a.Mtime, true)
}

func (f *FS) exportFile(ctx context.Context, p, local string, a Attr) (bool, error) {
	if info, err := os.Lstat(local); err == nil && info.Mode().IsRegular() &&
		uint64(info.Size()) == a.Size && info.ModTime().Equal(time.Unix(0, a.Mtime)) {
		return false, nil
	}
	out, err := os.OpenFile(local, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return false, err
	}
	for off := uint64(0); off < a.Size; {
		b, err := f.ReadAt(ctx, p, off, min(a.Size-off, copyChunkBytes))
		if err == nil && len(b) == 0 {
			err = errnof(syscall.EIO, "%s shrank to %d bytes while copied", p, off)
		}
		if err == nil {
			_, err = out.Write(b)
		}
		if err != nil {
			_ = out.Close()
			return false, err
		}
		off += uint64(len(b))
	}
	if err := out.Close(); err != nil {
		return false, err
	}
	return true, setLocal(local, a.Mode, a.UID, a.GID, a.Atime, a.Mtime, false)
}
