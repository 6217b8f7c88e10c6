package fusefs

// The model test applies one seeded random sequence of file-system
// operations (mkdir, create, write at offsets, overwrite with O_TRUNC,
// truncate, append, unlink, rmdir, rename, chmod, symlink, unlinks of open
// files, flock, record and OFD locks between two descriptors), through the os
// package, both to a mount and to a local temporary directory, the model.
// After each operation the two must answer with the same errno, and every
// few operations the two trees must hold the same names, kinds, permission
// bits, sizes, contents and symbolic link targets.
//
// CI runs modelSeeds. TYRFS_MODEL_SEEDS=N runs N more, from random seeds;
// a failure names its seed, and TYRFS_MODEL_SEED=S runs that one alone:
//
//	TYRFS_MODEL_SEED=S go test -race -run 'TestModel$' ./internal/fusefs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/testserver"
)

// modelSeeds are the seeds CI runs; modelOps operations each.
var modelSeeds = []uint64{1, 2, 3, 4}

const (
	modelOps = 300
	// modelCheckEvery is how many operations pass between tree
	// comparisons.
	modelCheckEvery = 10
	// modelFileBytesMax bounds the offsets and sizes the operations use.
	modelFileBytesMax = 200 << 10
)

func TestModel(t *testing.T) {
	needFUSE(t)
	seeds := slices.Clone(modelSeeds)
	if s := os.Getenv("TYRFS_MODEL_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TYRFS_MODEL_SEED=%q: %v", s, err)
		}
		seeds = []uint64{seed}
	}
	if s := os.Getenv("TYRFS_MODEL_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("TYRFS_MODEL_SEEDS=%q: %v", s, err)
		}
		for range n {
			seeds = append(seeds, rand.Uint64())
		}
	}
	c := testserver.Start(t).Client()
	for i, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			ks := fmt.Sprintf("model-%d", i)
			newKeyspace(t, c, ks, 1, false)
			runModel(t, seed, modelOps, mount(t, c, ks), t.TempDir())
		})
	}
	// Directories cached for longer than the test runs: through one
	// mount, the kernel keeps what it caches right (it drops a
	// directory's attributes when it changes one of its entries), so the
	// model holds as without the cache.
	t.Run("dir-cache", func(t *testing.T) {
		newKeyspace(t, c, "model-dir-cache", 1, false)
		runModel(t, seeds[0], modelOps, mountWith(t, c, "model-dir-cache", Options{DirCacheTimeout: time.Hour}), t.TempDir())
	})
	// Names, attributes and pages cached for longer than the test runs,
	// each open checking the file's version: through one mount the model
	// holds as without the cache.
	t.Run("cache", func(t *testing.T) {
		newKeyspace(t, c, "model-cache", 1, false)
		runModel(t, seeds[0], modelOps, mountWith(t, c, "model-cache", Options{CacheTimeout: time.Hour}), t.TempDir())
	})
	// Every renamed file stapled (fslayout, invariant 5): the calls that
	// follow staples, and free their data blobs' names, give the same
	// tree, and the invariant holds after.
	// The server brings no staple home here, so the check sees them.
	t.Run("staples", func(t *testing.T) {
		stapleAll(t)
		c := testserver.Start(t, "--fs-home-bytes=0").Client()
		for i, seed := range seeds[:2] {
			ks := fmt.Sprintf("model-staples-%d", i)
			newKeyspace(t, c, ks, 1, false)
			runModel(t, seed, modelOps, mount(t, c, ks), t.TempDir())
			if n := checkStaples(t, c, ks); n == 0 {
				t.Fatalf("no staple left to check: the model renamed no file")
			}
		}
	})
}

// stapleAll makes every rename of a file staple it, until the test ends.
func stapleAll(t *testing.T) {
	old := fslayout.StapleBytesMin
	fslayout.StapleBytesMin = 0
	t.Cleanup(func() { fslayout.StapleBytesMin = old })
}

// checkStaples checks invariant 5 over every blob of keyspace ks, and
// returns how many staples there are. The servers must bring none home
// meanwhile.
func checkStaples(t *testing.T, c *client.Client, ks string) int {
	t.Helper()
	blobs, _, err := c.List(t.Context(), ks, "", "", client.ListLimitMax)
	if err != nil {
		t.Fatal(err)
	}
	heads := map[string][]byte{}
	staples := 0
	for _, b := range blobs {
		h, err := c.Read(t.Context(), ks, b.Key, 0, 1024)
		if err != nil {
			t.Fatal(err)
		}
		heads[b.Key] = h
		if _, ok := fslayout.StapleOf(b.Key); ok {
			staples++
		}
	}
	if err := fslayout.CheckStaples(heads); err != nil {
		t.Fatalf("invariant 5: %v", err)
	}
	t.Logf("%d blobs, %d staples", len(blobs), staples)
	return staples
}

// modelNames are the names operations pick from: few, so that operations
// collide (create over an existing name, rmdir of a full directory...).
var modelNames = []string{"a", "b", "c", "dd", "e"}

// modelDepthMax bounds the directories' nesting.
const modelDepthMax = 3

func runModel(t *testing.T, seed uint64, ops int, mnt, model string) {
	t.Logf("seed %d, %d operations; mount %s, model %s", seed, ops, mnt, model)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	randPath := func() string {
		// Four paths in five name a child of a directory that exists in
		// the model (walked in lexical order, so the choice depends on
		// the seed alone); the others are random, mostly shallow, paths.
		if r.IntN(5) > 0 {
			var dirs []string
			_ = filepath.WalkDir(model, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					if rel, err := filepath.Rel(model, p); err == nil && strings.Count(rel, "/") < modelDepthMax-1 {
						dirs = append(dirs, rel)
					}
				}
				return nil
			})
			if len(dirs) > 0 {
				return filepath.Join(dirs[r.IntN(len(dirs))], modelNames[r.IntN(len(modelNames))])
			}
		}
		depth := 1 + r.IntN(1+r.IntN(modelDepthMax))
		parts := make([]string, depth)
		for i := range parts {
			parts[i] = modelNames[r.IntN(len(modelNames))]
		}
		return filepath.Join(parts...)
	}
	randData := func() []byte {
		b := make([]byte, 1+r.IntN(r.IntN(64<<10)+1))
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return b
	}
	counts, succeededBy := map[string]int{}, map[string]int{}
	succeeded := 0
	for i := range ops {
		var (
			name string
			do   func(root string) error
		)
		p, q := randPath(), randPath()
		switch op := r.IntN(25); {
		case op < 3: // 3 in 25
			name = "mkdir " + p
			mode := fs.FileMode(0o700 + r.IntN(0o100))
			do = func(root string) error { return os.Mkdir(filepath.Join(root, p), mode) }
		case op < 7: // 4
			off, data := r.Int64N(modelFileBytesMax), randData()
			name = fmt.Sprintf("write %s at %d, %d bytes", p, off, len(data))
			do = func(root string) error {
				f, err := os.OpenFile(filepath.Join(root, p), os.O_CREATE|os.O_WRONLY, 0o644)
				if err != nil {
					return err
				}
				_, err = f.WriteAt(data, off)
				return errors.Join(err, f.Close())
			}
		case op < 9: // 2
			data := randData()
			name = fmt.Sprintf("append %s, %d bytes", p, len(data))
			do = func(root string) error {
				f, err := os.OpenFile(filepath.Join(root, p), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
				if err != nil {
					return err
				}
				_, err = f.Write(data)
				return errors.Join(err, f.Close())
			}
		case op < 11: // 2
			size := r.Int64N(modelFileBytesMax)
			name = fmt.Sprintf("truncate %s to %d", p, size)
			do = func(root string) error { return os.Truncate(filepath.Join(root, p), size) }
		case op < 13: // 2
			name = "unlink " + p
			do = func(root string) error { return syscall.Unlink(filepath.Join(root, p)) }
		case op < 14: // 1: most rmdirs would find the directory full
			name = "rmdir " + p
			do = func(root string) error { return syscall.Rmdir(filepath.Join(root, p)) }
		case op < 17: // 3
			name = "rename " + p + " " + q
			do = func(root string) error { return syscall.Rename(filepath.Join(root, p), filepath.Join(root, q)) }
		case op < 18: // 1
			mode := uint32(0o400 + r.IntN(0o400))
			name = fmt.Sprintf("chmod %s %o", p, mode)
			do = func(root string) error { return syscall.Chmod(filepath.Join(root, p), mode) }
		case op < 19: // 1
			data := randData()
			name = fmt.Sprintf("overwrite %s, %d bytes", p, len(data))
			do = func(root string) error { return os.WriteFile(filepath.Join(root, p), data, 0o640) }
		case op < 21: // 2
			off, data := r.Int64N(modelFileBytesMax), randData()
			name = fmt.Sprintf("unlink-open %s, write at %d, %d bytes", p, off, len(data))
			do = func(root string) error { return unlinkOpenOp(root, p, off, data, root == mnt) }
		case op < 23: // 2
			kind, write1, write2 := lockKinds[r.IntN(len(lockKinds))], r.IntN(2) == 0, r.IntN(2) == 0
			name = fmt.Sprintf("lock %s %s write %v, then write %v", p, kind, write1, write2)
			do = func(root string) error { return lockOp(filepath.Join(root, p), kind, write1, write2) }
		default: // 2
			// Targets stay in the link's directory, so following a link
			// never leaves the tree.
			target := modelNames[r.IntN(len(modelNames))]
			name = "symlink " + target + " " + p
			do = func(root string) error { return os.Symlink(target, filepath.Join(root, p)) }
		}
		counts[strings.Fields(name)[0]]++
		want, got := errnoOf(do(model)), errnoOf(do(mnt))
		if want != got {
			t.Fatalf("seed %d, op %d, %s: mount answers %v (%d), model %v (%d)", seed, i, name, got, got, want, want)
		}
		if got == 0 {
			succeeded++
			succeededBy[strings.Fields(name)[0]]++
		}
		if (i+1)%modelCheckEvery == 0 || i == ops-1 {
			if err := sameTree(model, mnt); err != nil {
				t.Fatalf("seed %d, after op %d (%s): %v", seed, i, name, err)
			}
		}
	}
	entries := 0
	_ = filepath.WalkDir(model, func(string, fs.DirEntry, error) error { entries++; return nil })
	t.Logf("seed %d: operations %v, %d succeeded %v (the rest failed alike on both); %d entries in the final tree",
		seed, counts, succeeded, succeededBy, entries-1)
}

// unlinkOpenOp opens the file at p under root to read and write, unlinks
// it, writes data at off through the descriptor and reads the whole file
// back through it: EBADMSG if that is not the file as read before with
// the write applied. Through a mount (mounted), it then waits for the
// hidden name the unlink gave the file to go after the close
// (unlinked.go), ETIMEDOUT if it stays.
func unlinkOpenOp(root, p string, off int64, data []byte, mounted bool) error {
	path := filepath.Join(root, p)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	before, err := io.ReadAll(f)
	if err == nil {
		err = syscall.Unlink(path)
	}
	if err == nil {
		_, err = f.WriteAt(data, off)
	}
	var after []byte
	if err == nil {
		after = make([]byte, max(int64(len(before)), off+int64(len(data)))+1)
		var n int
		n, err = f.ReadAt(after, 0)
		if errors.Is(err, io.EOF) {
			after, err = after[:n], nil
		}
	}
	if err := errors.Join(err, f.Close()); err != nil {
		return err
	}
	want := make([]byte, max(len(before), int(off)+len(data)))
	copy(want, before)
	copy(want[off:], data)
	if !bytes.Equal(after, want) {
		return syscall.EBADMSG
	}
	if !mounted {
		return nil
	}
	for range 1000 {
		names, err := dirNames(filepath.Dir(path))
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, ".tyr-unlinked-") }) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return syscall.ETIMEDOUT
}

// lockKinds are the advisory locks lockOp takes.
var lockKinds = []string{"flock", "posix", "ofd"}

// lock takes a lock of kind on all of f, exclusive if write, without
// waiting.
func lock(f *os.File, kind string, write bool) error {
	switch kind {
	case "flock":
		how := syscall.LOCK_SH
		if write {
			how = syscall.LOCK_EX
		}
		return syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	default:
		typ := int16(unix.F_RDLCK)
		if write {
			typ = unix.F_WRLCK
		}
		cmd := unix.F_SETLK
		if kind == "ofd" {
			cmd = unix.F_OFD_SETLK
		}
		return unix.FcntlFlock(f.Fd(), cmd, &unix.Flock_t{Type: typ})
	}
}

// lockOp opens the file at path twice to read and write, takes a lock of
// kind through the first descriptor and tries another through the second
// without waiting, and returns what that try gives (flock and OFD locks
// of two open file descriptions conflict, a process's record locks do
// not), once it closed both. A lock taken after the closes then must not
// wait long: the mount gives flock and OFD locks up just after the close
// (ETIMEDOUT otherwise).
func lockOp(path, kind string, write1, write2 bool) error {
	f1, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	f2, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return errors.Join(err, f1.Close())
	}
	err = lock(f1, kind, write1)
	if err == nil {
		err = lock(f2, kind, write2)
	}
	if err := errors.Join(err, f1.Close(), f2.Close()); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for range 500 {
		if err := lock(f, kind, true); !errors.Is(err, syscall.EAGAIN) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return syscall.ETIMEDOUT
}

// errnoOf returns the errno err carries, 0 for nil, and EIO for an error
// with none (so it still differs from success).
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// sameTree compares the trees under want and got: names, kinds,
// permission bits, link counts (a directory's count its subdirectories),
// sizes, file contents and link targets.
func sameTree(want, got string) error {
	return filepath.WalkDir(want, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(want, p)
		if err != nil {
			return err
		}
		g := filepath.Join(got, rel)
		wi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		gi, err := os.Lstat(g)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if wi.Mode().Type() != gi.Mode().Type() {
			return fmt.Errorf("%s: type %v, want %v", rel, gi.Mode().Type(), wi.Mode().Type())
		}
		if wi.Mode().Type() != fs.ModeSymlink && wi.Mode().Perm() != gi.Mode().Perm() {
			return fmt.Errorf("%s: mode %v, want %v", rel, gi.Mode(), wi.Mode())
		}
		if wn, gn := wi.Sys().(*syscall.Stat_t).Nlink, gi.Sys().(*syscall.Stat_t).Nlink; wn != gn {
			return fmt.Errorf("%s: %d links, want %d", rel, gn, wn)
		}
		switch {
		case d.IsDir():
			wn, err := dirNames(p)
			if err != nil {
				return err
			}
			gn, err := dirNames(g)
			if err != nil {
				return err
			}
			if !slices.Equal(wn, gn) {
				return fmt.Errorf("%s: entries %v, want %v", rel, gn, wn)
			}
		case wi.Mode().Type() == fs.ModeSymlink:
			wt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			gt, err := os.Readlink(g)
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			if wt != gt {
				return fmt.Errorf("%s: link to %q, want %q", rel, gt, wt)
			}
		default:
			if wi.Size() != gi.Size() {
				return fmt.Errorf("%s: size %d, want %d", rel, gi.Size(), wi.Size())
			}
			wb, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			gb, err := os.ReadFile(g)
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			if !bytes.Equal(wb, gb) {
				return fmt.Errorf("%s: contents differ", rel)
			}
		}
		return nil
	})
}

func dirNames(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name()
	}
	return out, nil
}
