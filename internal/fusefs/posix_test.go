package fusefs

// TestPosix runs go-fuse's posixtest suite on a mount of a real server,
// each test in its own directory of one mount, then again on a mount that
// caches (the default of `tyr mount`). The tests TýrFS cannot pass
// are skipped by name in posixSkips, each with its reason. Reproduce one
// with `go test -race -run 'TestPosix/NAME' ./internal/fusefs`.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/testserver"
	"github.com/tyrstore/tyr/tyrfs"
)

// posixSkips are the posixtest tests TýrFS fails by design, with why.
var posixSkips = map[string]string{
	"Link":             "no hard links: a file is the blob of its one path (link(2) answers EPERM)",
	"LinkUnlinkRename": "no hard links",
	"NlinkZero":        "uses link(2): no hard links",
	"FcntlFlockLocksFile": "the test wants a second descriptor of the same process refused a lock; POSIX record " +
		"locks belong to the process, so the kernel sends both locks with one owner and the mount grants the second, as ext4 does",
	"XAttr":      "extended attributes are not stored (ENOTSUP)",
	"XAttrLarge": "extended attributes are not stored (ENOTSUP)",
}

func TestPosix(t *testing.T) {
	needFUSE(t)
	c := testserver.Start(t).Client()
	newKeyspace(t, c, "posix", 1, false)
	mnt := mount(t, c, "posix")
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	slices.Sort(names)
	suite := func(t *testing.T, mnt string) {
		for _, name := range names {
			t.Run(name, func(t *testing.T) {
				if why, ok := posixSkips[name]; ok {
					t.Skip(why)
				}
				dir := filepath.Join(mnt, name)
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				posixtest.All[name](t, dir)
			})
		}
	}
	suite(t, mnt)
	// The suite again on a mount as `tyr mount` makes one by default:
	// names, attributes and pages cached for a second, creates deferred.
	t.Run("cache", func(t *testing.T) {
		newKeyspace(t, c, "posix-cache", 1, false)
		suite(t, mountWith(t, c, "posix-cache", Options{CacheTimeout: time.Second}))
	})
	t.Run("Statfs", func(t *testing.T) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks == 0 || st.Bfree > st.Blocks || st.Bsize != 4096 || st.Namelen != 255 {
			t.Fatalf("statfs: %+v", st)
		}
	})
	// A large file is renamed by rename(2), stapled; a directory of more
	// small files than one transaction copies fails with EXDEV, and mv(1)
	// then copies and deletes.
	t.Run("RenameLarge", func(t *testing.T) {
		if _, err := exec.LookPath("mv"); err != nil {
			t.Skip("no mv")
		}
		data := bytes.Repeat([]byte("0123456789abcdef"), (tyrfs.MoveBytesMax+1<<20)/16)
		from, to := filepath.Join(mnt, "large"), filepath.Join(mnt, "large-moved")
		if err := os.WriteFile(from, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(from, to); err != nil {
			t.Fatalf("rename of %d bytes: %v", len(data), err)
		}
		if got, err := os.ReadFile(to); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("after rename: %d bytes, %v", len(got), err)
		}
		if _, err := os.Lstat(from); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after rename, the old name: %v", err)
		}
		if err := os.WriteFile(from, []byte("new"), 0o644); err != nil {
			t.Fatalf("the old name reused: %v", err)
		}
		if got, err := os.ReadFile(to); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("after the old name was reused: %d bytes, %v", len(got), err)
		}
		dir, dirTo := filepath.Join(mnt, "smalls"), filepath.Join(mnt, "smalls-moved")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		small := data[:fslayout.StapleBytesMin-1]
		for i := range tyrfs.MoveBytesMax/len(small) + 1 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), small, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Rename(dir, dirTo); !errors.Is(err, syscall.EXDEV) {
			t.Fatalf("rename of a directory of %d bytes of small files: %v, want EXDEV", tyrfs.MoveBytesMax/len(small)*len(small)+len(small), err)
		}
		if out, err := exec.Command("mv", dir, dirTo).CombinedOutput(); err != nil {
			t.Fatalf("mv: %v: %s", err, out)
		}
		if got, err := os.ReadFile(filepath.Join(dirTo, "0")); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("after mv: %d bytes, %v", len(got), err)
		}
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after mv, the old name: %v", err)
		}
	})
	// Extended attributes are refused with ENOTSUP, whatever the call,
	// and a refused set stores nothing.
	t.Run("XAttrRefused", func(t *testing.T) {
		p := filepath.Join(mnt, "xattr")
		if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Setxattr(p, "user.a", []byte("1"), 0); !errors.Is(err, syscall.ENOTSUP) {
			t.Fatalf("setxattr: %v, want ENOTSUP", err)
		}
		if _, err := syscall.Getxattr(p, "user.a", make([]byte, 16)); !errors.Is(err, syscall.ENOTSUP) {
			t.Fatalf("getxattr: %v, want ENOTSUP", err)
		}
		if err := syscall.Removexattr(p, "user.a"); !errors.Is(err, syscall.ENOTSUP) {
			t.Fatalf("removexattr: %v, want ENOTSUP", err)
		}
		if _, err := syscall.Listxattr(p, make([]byte, 16)); !errors.Is(err, syscall.ENOTSUP) {
			t.Fatalf("listxattr: %v, want ENOTSUP", err)
		}
		if got, err := os.ReadFile(p); err != nil || string(got) != "data" {
			t.Fatalf("after the refusals: %q, %v", got, err)
		}
	})
	t.Run("NoFlush", func(t *testing.T) {
		noFlush(t, mnt, false, false)
		noFlush(t, mountWith(t, c, "posix", Options{LocalLocks: true}), false, true)
	})
	t.Run("Fsync", func(t *testing.T) {
		f, err := os.Create(filepath.Join(mnt, "fsync"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write([]byte("data")); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	})
}

// noFlush checks that the close of a descriptor sends a FLUSH request only
// when it may have something to do: never for one opened to read only;
// for one opened to write, on a mount that caches (caching: deferred.go
// holds its writes), or with locks across mounts (the close gives up the
// process's locks, locks.go invariant 3), and not otherwise, as every
// write is committed when it returns. What was written through each
// reads back.
func noFlush(t *testing.T, mnt string, caching, localLocks bool) {
	flushes := countOps(t, "flush", "/noflush")
	perWriter := int64(1)
	if !caching && localLocks {
		perWriter = 0
	}
	p := filepath.Join(mnt, "noflush")
	if err := os.WriteFile(p, []byte("data"), 0o644); err != nil { // O_CREAT|O_TRUNC
		t.Fatal(err)
	}
	if n := flushes.Load(); n != perWriter {
		t.Fatalf("%d FLUSH requests at the close of a file created without O_EXCL, want %d", n, perWriter)
	}
	for range 3 {
		if got, err := os.ReadFile(p); err != nil || string(got) != "data" {
			t.Fatalf("read: %q, %v", got, err)
		}
	}
	if n := flushes.Load() - perWriter; n != 0 {
		t.Fatalf("%d FLUSH requests at the closes of 3 descriptors opened to read only, want none", n)
	}
	writeClose := func(flag int, data string) {
		f, err := os.OpenFile(p, flag, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(data); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	writeClose(os.O_WRONLY, "DA")
	writeClose(os.O_RDWR|os.O_APPEND, "+")
	if got, err := os.ReadFile(p); err != nil || string(got) != "DAta+" {
		t.Fatalf("after a write and an append: %q, %v", got, err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	writeClose(os.O_WRONLY|os.O_CREATE|os.O_EXCL, "new")
	if n := flushes.Load() - perWriter; n != 3*perWriter {
		t.Fatalf("%d FLUSH requests at the closes of 3 more descriptors opened to write, want %d", n, 3*perWriter)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "new" {
		t.Fatalf("after an O_EXCL create: %q, %v", got, err)
	}
}

// countOps counts the calls of opHook with op and path p until the test
// ends.
func countOps(t *testing.T, op, p string) *atomic.Int64 {
	var n atomic.Int64
	count := func(o, q string) {
		if o == op && q == p {
			n.Add(1)
		}
	}
	opHook.Store(&count)
	t.Cleanup(func() { opHook.Store(nil) })
	return &n
}
