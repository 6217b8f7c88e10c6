package fusefs

// TestCluster runs three checks on a 3-node cluster. On keyspaces of
// replication 1, so a file's blob and its directory's blob sit on
// different nodes and every entry change is a transaction across nodes:
// the model test of model_test.go (seed modelSeeds[0]), and two mounts
// through two nodes seeing each other's changes with close-to-open
// consistency. Last, on a keyspace of replication 3, kill -9 of the node a
// mount's client talks to: the mount may fail calls but never returns
// wrong data, and works again once the node is back. Reproduce with
// `go test -race -run TestCluster ./internal/fusefs`.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
	"github.com/tyrstore/tyr/tyrfs"
)

func TestCluster(t *testing.T) {
	needFUSE(t)
	cl := testserver.UpCluster(t, 3)
	clients := make([]*client.Client, 3)
	for i := range clients {
		c, err := client.Dial(cl.Endpoints[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
		cl.Settled(i + 1)
	}
	t.Run("model", func(t *testing.T) {
		newKeyspace(t, clients[0], "model-cluster", 1, true)
		runModel(t, modelSeeds[0], modelOps, mount(t, clients[0], "model-cluster"), t.TempDir())
		// The blobs are spread: more than one node keeps some.
		holding := 0
		for i, c := range clients {
			k, err := c.Keyspace(t.Context(), "model-cluster")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("node%d keeps %d blobs", i+1, k.Blobs)
			if k.Blobs > 0 {
				holding++
			}
		}
		if holding < 2 {
			t.Fatalf("%d nodes keep blobs of the keyspace, want the blobs spread over 2 or more", holding)
		}
	})
	t.Run("model-staples", func(t *testing.T) {
		stapleAll(t)
		newKeyspace(t, clients[0], "model-staples", 1, true)
		runModel(t, modelSeeds[1], modelOps, mount(t, clients[0], "model-staples"), t.TempDir())
		// The servers bring every staple home (the model's files are
		// small); then the blobs hold still, and invariant 5 holds.
		testserver.Eventually(t, time.Minute, "every staple home", func() (bool, string) {
			pointers, _, err := clients[0].List(t.Context(), "model-staples", "~", "", client.ListLimitMax)
			if err != nil {
				t.Fatal(err)
			}
			return len(pointers) == 0, fmt.Sprintf("%d staples", len(pointers))
		})
		checkStaples(t, clients[0], "model-staples")
	})
	t.Run("two-mounts", func(t *testing.T) {
		newKeyspace(t, clients[0], "two-mounts", 1, true)
		// The keyspace reaches the second node's catalog by gossip.
		testserver.WaitKeyspace(t, "two-mounts", clients[1])
		a := mount(t, clients[0], "two-mounts")
		b := mount(t, clients[1], "two-mounts")
		twoMounts(t, a, b)
	})
	t.Run("two-mounts-dir-cache", func(t *testing.T) {
		newKeyspace(t, clients[0], "two-mounts-dir-cache", 1, true)
		testserver.WaitKeyspace(t, "two-mounts-dir-cache", clients[1])
		o := Options{DirCacheTimeout: dirCacheWindow}
		twoMountsDirCache(t, mountWith(t, clients[0], "two-mounts-dir-cache", o), mountWith(t, clients[1], "two-mounts-dir-cache", o))
	})
	t.Run("two-mounts-cache", func(t *testing.T) {
		newKeyspace(t, clients[0], "two-mounts-cache", 1, true)
		testserver.WaitKeyspace(t, "two-mounts-cache", clients[1])
		// Writes held a minute, so no check of holding depends on the
		// test's speed; c holds them briefly, to check the timer.
		o := Options{CacheTimeout: time.Hour, HoldFor: time.Minute}
		a, b := mountWith(t, clients[0], "two-mounts-cache", o), mountWith(t, clients[1], "two-mounts-cache", o)
		twoMountsCache(t, a, b)
		deferredCreates(t, a, b)
		testserver.WaitKeyspace(t, "two-mounts-cache", clients[2])
		writesHeld(t, a, b, mountWith(t, clients[2], "two-mounts-cache", Options{CacheTimeout: time.Hour, HoldFor: time.Second}))
		keptDirAttrs(t, clients[0], "two-mounts-cache", a)
		noFlush(t, a, true, false)
		noFlush(t, mountWith(t, clients[0], "two-mounts-cache", Options{CacheTimeout: time.Hour, LocalLocks: true}), true, true)
	})
	t.Run("locks", func(t *testing.T) {
		newKeyspace(t, clients[0], "locks", 1, true)
		testserver.WaitKeyspace(t, "locks", clients[1])
		locksAcross(t, clients[0], "locks", mount(t, clients[0], "locks"), mount(t, clients[1], "locks"))
		// Pages kept and writes held: a lock drops the pages, and an
		// unlock commits the writes first.
		o := Options{CacheTimeout: time.Hour, HoldFor: time.Minute}
		locksAcross(t, clients[0], "locks", mountWith(t, clients[0], "locks", o), mountWith(t, clients[1], "locks", o))
		locksRenamed(t, clients[0], "locks", mountWith(t, clients[0], "locks", Options{LockLease: 2 * time.Second}), mount(t, clients[1], "locks"), 2*time.Second)
	})
	t.Run("unlinked-open", func(t *testing.T) {
		newKeyspace(t, clients[0], "unlinked-open", 1, true)
		testserver.WaitKeyspace(t, "unlinked-open", clients[1])
		b := mount(t, clients[1], "unlinked-open")
		unlinkedOpen(t, mount(t, clients[0], "unlinked-open"), b)
		unlinkedOpen(t, mountWith(t, clients[0], "unlinked-open", Options{CacheTimeout: time.Second}), b)
	})
	t.Run("kill-endpoint", func(t *testing.T) {
		newKeyspace(t, clients[0], "kill-endpoint", 3, true)
		killEndpoint(t, cl, mount(t, clients[0], "kill-endpoint"))
	})
	// As `tyr mount` mounts by default: pages kept, creates deferred;
	// at replication 2, so the files are not all on every node.
	t.Run("kill-endpoint-cache", func(t *testing.T) {
		newKeyspace(t, clients[0], "kill-endpoint-cache", 2, true)
		killEndpoint(t, cl, mountWith(t, clients[0], "kill-endpoint-cache", Options{CacheTimeout: time.Second}))
	})
}

// killEndpoint writes files through mnt, kills node 1 (the mount's
// endpoint) with SIGKILL, reads and writes through the mount for a while,
// checking every read that succeeds, starts node 1 again and waits until
// the mount serves every acknowledged file, and a new one.
func killEndpoint(t *testing.T, cl *testserver.LocalCluster, mnt string) {
	want := map[string]string{}
	for i := range 5 {
		name := fmt.Sprintf("before-%d", i)
		want[name] = strings.Repeat(name, 100*(i+1))
		if err := os.WriteFile(filepath.Join(mnt, name), []byte(want[name]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	errnos := map[syscall.Errno]int{}
	check := func(phase string) (failed int) {
		t.Helper()
		for name, data := range want {
			got, err := os.ReadFile(filepath.Join(mnt, name))
			if err != nil {
				errnos[errnoOf(err)]++
				failed++
				continue
			}
			if string(got) != data {
				t.Fatalf("%s: %s holds %d bytes %.40q..., want %d bytes %.40q...", phase, name, len(got), got, len(data), data)
			}
		}
		return failed
	}
	cl.Signal(1, syscall.SIGKILL)
	var readErrors, writeErrors, writes int
	for i, start := 0, time.Now(); time.Since(start) < 10*time.Second; i++ {
		readErrors += check("endpoint down")
		name := fmt.Sprintf("during-%d", i)
		data := strings.Repeat(name, 50)
		if err := os.WriteFile(filepath.Join(mnt, name), []byte(data), 0o644); err != nil {
			errnos[errnoOf(err)]++
			writeErrors++
			continue
		}
		writes++
		want[name] = data
	}
	t.Logf("endpoint down: %d reads failed, %d writes acknowledged, %d failed; errnos %v", readErrors, writes, writeErrors, errnos)
	cl.Start(1)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		failed := check("endpoint back")
		err := os.WriteFile(filepath.Join(mnt, "after"), []byte("after"), 0o644)
		if failed == 0 && err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2 minutes after node 1 restarted: %d files unreadable, write: %v", failed, err)
		}
		time.Sleep(time.Second)
	}
}

// twoMounts checks close-to-open consistency between mounts a and b: what
// one mount committed before a close (every write, create, rename and
// removal is committed when its system call returns) the other sees at its
// next open, stat or directory read.
func twoMounts(t *testing.T, a, b string) {
	write, read := fileHelpers(t)
	gone := func(root, name string) {
		t.Helper()
		if _, err := os.Lstat(filepath.Join(root, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s/%s: %v, want it gone", root, name, err)
		}
	}
	names := func(root, dir string, want ...string) {
		t.Helper()
		if got := listNames(t, root, dir); !slices.Equal(got, want) {
			t.Fatalf("%s/%s holds %v, want %v", root, dir, got, want)
		}
	}
	write(a, "f", "first version")
	read(b, "f", "first version")
	// b has f's pages cached; the next open drops them.
	write(a, "f", "second")
	read(b, "f", "second")
	write(b, "f", "third, from b")
	read(a, "f", "third, from b")

	if err := os.Rename(filepath.Join(a, "f"), filepath.Join(a, "g")); err != nil {
		t.Fatal(err)
	}
	gone(b, "f")
	read(b, "g", "third, from b")

	if err := os.MkdirAll(filepath.Join(b, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(b, "d/e/x", "x")
	names(a, "d/e", "x")
	if err := os.Rename(filepath.Join(a, "d"), filepath.Join(a, "d2")); err != nil {
		t.Fatal(err)
	}
	gone(b, "d")
	read(b, "d2/e/x", "x")
	names(b, "", "d2", "g")

	if err := os.Chmod(filepath.Join(b, "g"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(a, "g")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode after chmod on the other mount: %v, %v", fi, err)
	}
	if err := os.Remove(filepath.Join(a, "g")); err != nil {
		t.Fatal(err)
	}
	gone(b, "g")
	if err := os.RemoveAll(filepath.Join(b, "d2")); err != nil {
		t.Fatal(err)
	}
	names(a, "")

	// Appends through both mounts, each to a descriptor opened before
	// either wrote, land whole and none overwrites another.
	var files [2]*os.File
	for i, root := range []string{a, b} {
		f, err := os.OpenFile(filepath.Join(root, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	var want []string
	for i := range 20 {
		rec := fmt.Sprintf("record %02d from mount %d\n", i, i%2)
		if _, err := files[i%2].WriteString(rec); err != nil {
			t.Fatal(err)
		}
		want = append(want, rec)
	}
	read(a, "log", strings.Join(want, ""))
}

// fileHelpers returns a function that writes a file under a mount and one
// that reads one and checks what it holds, each failing t.
func fileHelpers(t *testing.T) (write, read func(root, name, data string)) {
	write = func(root, name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read = func(root, name, want string) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || !bytes.Equal(got, []byte(want)) {
			t.Fatalf("%s/%s: %q, %v; want %q", root, name, got, err, want)
		}
	}
	return write, read
}

// listNames returns the names in directory dir under root, in order.
func listNames(t *testing.T, root, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	return got
}

// twoMountsCache checks close-to-open between mounts a and b whose kernels
// keep names, attributes and pages for longer than the test runs: an open
// sees every change the other mount committed before it, whatever the
// kernel kept, and a file unchanged since the last open is read from the
// kernel's pages, without a read in the cluster.
func twoMountsCache(t *testing.T, a, b string) {
	write, read := fileHelpers(t)
	var reads, stats atomic.Int64
	count := func(op, _ string) {
		switch op {
		case "read":
			reads.Add(1)
		case "getattr":
			stats.Add(1)
		}
	}
	opHook.Store(&count)
	t.Cleanup(func() { opHook.Store(nil) })
	callsOf := func(f func()) (int64, int64) {
		t.Helper()
		r, s := reads.Load(), stats.Load()
		f()
		return reads.Load() - r, stats.Load() - s
	}

	// A small file b never saw: its lookup and its open, which brings its
	// bytes, and nothing else; the kernel's attributes from the lookup
	// are of the version the open found.
	write(a, "small", "small file")
	if r, s := callsOf(func() { read(b, "small", "small file") }); r != 0 || s != 0 {
		t.Fatalf("the first read of a small file through b made %d reads and %d stats in the cluster, want none", r, s)
	}

	// Larger than what an open gives the kernel, so the first read
	// through b reads the rest in the cluster.
	big := strings.Repeat("first version ", openReadBytes/7)
	write(a, "f", big)
	if r, _ := callsOf(func() { read(b, "f", big) }); r == 0 {
		t.Fatalf("the first read of f through b made no read in the cluster")
	}
	// (A stat may go to the cluster: the kernel drops its access time of a
	// file after each read it sends.)
	if r, _ := callsOf(func() { read(b, "f", big) }); r != 0 {
		t.Fatalf("reading unchanged f again through b made %d reads in the cluster, want none", r)
	}
	// Same size, longer, shorter: each time the pages and the attributes
	// b's kernel kept are dropped at the open, so a program that reads as
	// many bytes as fstat reports reads them all.
	readSized := func(root, name, want string) {
		t.Helper()
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil || fi.Size() != int64(len(want)) {
			t.Fatalf("%s/%s: fstat after the open: %v, %v; want size %d", root, name, fi, err, len(want))
		}
		got := make([]byte, fi.Size())
		if _, err := io.ReadFull(f, got); err != nil || string(got) != want {
			t.Fatalf("%s/%s: %q, %v; want %q", root, name, got, err, want)
		}
	}
	for _, data := range []string{"other version", "a longer third version of f", "4th"} {
		write(a, "f", data)
		readSized(b, "f", data)
		readSized(b, "f", data)
	}
	// A name looked up as absent is not cached so.
	if _, err := os.Lstat(filepath.Join(b, "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("b/new before a creates it: %v", err)
	}
	write(a, "new", "made by a")
	read(b, "new", "made by a")
	// Replaced by a rename, then removed, through a: b's kernel still
	// has the name f, but an open of it finds what the cluster holds.
	if err := os.Rename(filepath.Join(a, "new"), filepath.Join(a, "f")); err != nil {
		t.Fatal(err)
	}
	read(b, "f", "made by a")
	if err := os.Remove(filepath.Join(a, "f")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(b, "f")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("b/f after a removed it: %q, %v; want ENOENT", got, err)
	}
	// b's own writes: read back through b, and through a. b's kernel
	// keeps the bytes written through it (whole pages), of the version
	// the writes made, so b reads them back without a read in the
	// cluster.
	page := strings.Repeat("b", 4096)
	write(b, "g", page)
	if r, _ := callsOf(func() { read(b, "g", page) }); r != 0 {
		t.Fatalf("reading back what b wrote made %d reads in the cluster, want none", r)
	}
	read(a, "g", page)
	// A write through b after one through a: b's pages are no longer of
	// the file's version before b's write, so b's next open drops them and
	// reads a's bytes too.
	fb, err := os.OpenFile(filepath.Join(b, "g"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	fa, err := os.OpenFile(filepath.Join(a, "g"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fa.WriteAt([]byte("A"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fb.WriteAt([]byte("B"), 1); err != nil {
		t.Fatal(err)
	}
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(b, "g")); err != nil || string(got) != "AB"+page[2:] {
		t.Fatalf("b/g after writes through a then b: %.8q... (%d bytes), %v; want \"ABbbbbbb\"... (%d bytes)", got, len(got), err, len(page))
	}
}

// deferredCreates checks the invariants of deferred creates (deferred.go)
// between mounts a and b, both with the cache: a file created and written
// through a is committed at its close, or at once when a is asked
// anything else about it.
// sameTimes fails t unless a stat of name through mount a shows the size
// and times a stat through mount b shows.
func sameTimes(t *testing.T, a, b, name string) {
	t.Helper()
	var sa, sb syscall.Stat_t
	if err := syscall.Stat(filepath.Join(a, name), &sa); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(b, name), &sb); err != nil {
		t.Fatal(err)
	}
	if sa.Size != sb.Size || sa.Ctim != sb.Ctim || sa.Mtim != sb.Mtim {
		t.Fatalf("%s through a: size %d ctime %v mtime %v; through b: size %d ctime %v mtime %v",
			name, sa.Size, sa.Ctim, sa.Mtim, sb.Size, sb.Ctim, sb.Mtim)
	}
}

// keptDirAttrs checks the directory attributes a --cache mount keeps
// (dirattr.go): after each create through mount a of keyspace ks, of a
// file with O_EXCL (committed at the create) or not (deferred to the
// close), a directory, a symbolic link and a FIFO, a stat of the directory
// matches the cluster's, though only the first reads them from the
// cluster, and so after an unlink and an rmdir; after a rename, the next
// stat reads them again.
func keptDirAttrs(t *testing.T, c *client.Client, ks, a string) {
	f, err := tyrfs.New(t.Context(), c, ks)
	if err != nil {
		t.Fatal(err)
	}
	stats := countOps(t, "getattr", "/kept")
	dir := filepath.Join(a, "kept")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	same := func(when string) {
		t.Helper()
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		want, err := f.Stat(t.Context(), "/kept", tyrfs.KindDir)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if uint64(st.Size) != want.Size || st.Mtim.Nano() != want.Mtime || st.Ctim.Nano() != want.Ctime || st.Mode&0o7777 != want.Mode || st.Nlink != uint64(want.Nlink) {
			t.Fatalf("the directory after %s: size %d, mtime %d, ctime %d, mode %o, %d links; the cluster's: size %d, mtime %d, ctime %d, mode %o, %d links",
				when, st.Size, st.Mtim.Nano(), st.Ctim.Nano(), st.Mode&0o7777, st.Nlink, want.Size, want.Mtime, want.Ctime, want.Mode, want.Nlink)
		}
	}
	const creates = 6
	for i := range creates {
		flags := os.O_CREATE | os.O_WRONLY | os.O_EXCL
		if i%2 == 1 {
			flags = os.O_CREATE | os.O_WRONLY | os.O_TRUNC // deferred to the close
		}
		file, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("file-%d", i)), flags, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := file.Write([]byte("data")); err != nil {
			t.Fatal(err)
		}
		if err := file.Close(); err != nil {
			t.Fatal(err)
		}
		same(fmt.Sprintf("create %d", i))
	}
	// Directories, symbolic links and special files are created alike.
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	same("a mkdir")
	if err := os.Symlink("file-1", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	same("a symlink")
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	same("a mkfifo")
	if n := stats.Load(); n != 1 {
		t.Fatalf("%d stats of the directory read the cluster over %d creates, want 1: the mount kept none", n, creates+3)
	}
	// Removals alike: an unlink, and an rmdir, which takes a link away.
	if err := os.Remove(filepath.Join(dir, "file-0")); err != nil {
		t.Fatal(err)
	}
	same("an unlink")
	if err := os.Remove(filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	same("an rmdir")
	if n := stats.Load(); n != 1 {
		t.Fatalf("%d stats of the directory read the cluster after an unlink and an rmdir, want 1: the mount did not keep them", n)
	}
	if err := os.Rename(filepath.Join(dir, "file-2"), filepath.Join(dir, "file-9")); err != nil {
		t.Fatal(err)
	}
	same("a rename")
	if n := stats.Load(); n != 2 {
		t.Fatalf("%d stats of the directory read the cluster after a rename, want 2: the rename did not drop the kept attributes", n)
	}
}

func deferredCreates(t *testing.T, a, b string) {
	write, read := fileHelpers(t)
	absent := func(root, name string) {
		t.Helper()
		if _, err := os.Lstat(filepath.Join(root, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s/%s: %v, want ENOENT", root, name, err)
		}
	}
	create := func(root, name, data string) *os.File {
		t.Helper()
		f, err := os.Create(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		// Closed before the mounts stop if the test fails first: a
		// close after would wait for them forever.
		t.Cleanup(func() { _ = f.Close() })
		if _, err := f.WriteString(data); err != nil {
			t.Fatal(err)
		}
		return f
	}
	closed := func(f *os.File) {
		t.Helper()
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	mkdir := func(root, name string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(root, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// The times a stat through a shows once the file is closed are the
	// ones its commit gave it, as through b, not the ones the create
	// told the kernel before.
	f := create(a, "new0", "")
	time.Sleep(10 * time.Millisecond) // the commit's times are later
	closed(f)
	sameTimes(t, a, b, "new0")

	// Not in the cluster before the close; all of it after.
	f = create(a, "new1", "deferred")
	absent(b, "new1")
	closed(f)
	read(b, "new1", "deferred")

	// Through a, the file shows at once: a stat of it, or a listing of
	// its directory, commits it, so b sees it before the close too.
	f = create(a, "new2", "stat")
	if fi, err := os.Stat(filepath.Join(a, "new2")); err != nil || fi.Size() != 4 {
		t.Fatalf("a/new2 before its close: %v, %v; want 4 bytes", fi, err)
	}
	read(b, "new2", "stat")
	closed(f)
	f = create(a, "new3", "listed")
	if names := listNames(t, a, "."); !slices.Contains(names, "new3") {
		t.Fatalf("a's listing before new3's close: %q, want new3 in it", names)
	}
	read(b, "new3", "listed")
	closed(f)

	// Removed, and moved with its directory, through a before the close.
	f = create(a, "new4", "removed")
	if err := os.Remove(filepath.Join(a, "new4")); err != nil {
		t.Fatal(err)
	}
	closed(f)
	absent(a, "new4")
	absent(b, "new4")
	mkdir(a, "dir1")
	f = create(a, "dir1/f", "moved")
	if err := os.Rename(filepath.Join(a, "dir1"), filepath.Join(a, "dir2")); err != nil {
		t.Fatal(err)
	}
	closed(f)
	read(b, "dir2/f", "moved")
	absent(b, "dir1")

	// Made meanwhile through b: a's close opens b's file as open(2)
	// with O_TRUNC would, and writes a's bytes.
	f = create(a, "new5", "from a")
	write(b, "new5", "from b, longer")
	closed(f)
	read(b, "new5", "from a")
	// The same unwritten: a's kernel drops the attributes its create gave
	// it, and shows the file as b does.
	f = create(a, "new6", "")
	write(b, "new6", "from b")
	closed(f)
	sameTimes(t, a, b, "new6")

	// Its directory removed through b before the close (it is empty in
	// the cluster): the close fails, and no file is left.
	mkdir(a, "dir3")
	f = create(a, "dir3/f", "lost")
	if err := os.Remove(filepath.Join(b, "dir3")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("close of a file whose directory was removed before its create was committed: %v, want ENOENT", err)
	}
	absent(b, "dir3")
	testserver.Eventually(t, 10*time.Second, "a forgets dir3/f", func() (bool, string) {
		_, err := os.Lstat(filepath.Join(a, "dir3/f"))
		return errors.Is(err, fs.ErrNotExist), fmt.Sprint(err)
	})
}

// dirCacheWindow is the directory cache timeout of the two-mounts-dir-cache
// test.
const dirCacheWindow = 2 * time.Second

// twoMountsDirCache checks what mounts a and b guarantee each other with
// directories cached for dirCacheWindow: files keep close-to-open
// (contents, names, attributes), listings are fresh, and a directory
// renamed through one mount shows as it was in the other for no longer
// than the window.
func twoMountsDirCache(t *testing.T, a, b string) {
	write, read := fileHelpers(t)
	exists := func(root, name string) bool {
		t.Helper()
		_, err := os.Lstat(filepath.Join(root, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s/%s: %v", root, name, err)
		}
		return err == nil
	}
	if err := os.MkdirAll(filepath.Join(b, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Files in a directory both mounts cache: close-to-open, as without
	// the cache.
	write(a, "d/e/f", "first version")
	read(b, "d/e/f", "first version")
	write(a, "d/e/f", "second")
	read(b, "d/e/f", "second")
	if err := os.Rename(filepath.Join(b, "d/e/f"), filepath.Join(b, "d/e/g")); err != nil {
		t.Fatal(err)
	}
	if exists(a, "d/e/f") {
		t.Fatal("a renamed file still shows under its old name on the other mount")
	}
	read(a, "d/e/g", "second")
	if err := os.Chmod(filepath.Join(b, "d/e/g"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(a, "d/e/g")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a file's mode after chmod on the other mount: %v, %v", fi, err)
	}

	// A directory renamed through b: a's listing shows it at once, and
	// the files under its new name; its old name may still show in a
	// (a caches it), for no longer than the window.
	if !exists(a, "d") {
		t.Fatal("d missing on a")
	}
	if err := os.Rename(filepath.Join(b, "d"), filepath.Join(b, "d2")); err != nil {
		t.Fatal(err)
	}
	renamed := time.Now()
	if got := listNames(t, a, ""); !slices.Equal(got, []string{"d2"}) {
		t.Fatalf("listing on a after the rename: %v, want [d2]", got)
	}
	read(a, "d2/e/g", "second")
	if exists(a, "d/e/g") {
		t.Fatal("a file shows under its directory's old name on the other mount")
	}
	// a looked d up before the rename: the cache answers for it, which is
	// what the cache is for.
	if !exists(a, "d") {
		t.Fatal("the renamed directory's old name was not answered from a's cache right after the rename")
	}
	for exists(a, "d") {
		if time.Since(renamed) > dirCacheWindow+time.Second {
			t.Fatalf("the renamed directory still shows on a %v after the rename, window %v", time.Since(renamed), dirCacheWindow)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the old name was answered from the cache for %v", time.Since(renamed).Round(time.Millisecond))
}

// writesHeld checks the writes a caching mount holds until the close
// (deferred.go, invariant 5), through a (held a minute), with b as another
// mount and c a third that holds them a second: none is seen through b
// before the close, or before a stat or c's timer commits them; all are
// after; a write that does not continue the ones held commits those
// first; and a commit that fails fails the close.
func writesHeld(t *testing.T, a, b, c string) {
	_, read := fileHelpers(t)
	openIn := func(root, name string, flag int) *os.File {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(root, name), flag, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		// Closed before the mount goes, should the test fail with it
		// open: this process serves the mount, and the close's FLUSH
		// would wait for it at the process's exit.
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	open := func(name string, flag int) *os.File { t.Helper(); return openIn(a, name, flag) }
	writeAt := func(f *os.File, data string, off int64) {
		t.Helper()
		if _, err := f.WriteAt([]byte(data), off); err != nil {
			t.Fatal(err)
		}
	}

	// Created with O_EXCL (committed at once, empty), then written in
	// three writes: b sees it empty until the close.
	f := open("held", os.O_CREATE|os.O_EXCL|os.O_WRONLY)
	for i, part := range []string{"one ", "two ", "three"} {
		writeAt(f, part, int64(4*i))
	}
	read(b, "held", "")
	// A write elsewhere commits the ones held first.
	writeAt(f, "far", 20)
	read(b, "held", "one two three")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	read(b, "held", "one two three\x00\x00\x00\x00\x00\x00\x00far")

	// A stat through a commits them (the kernel asks for the size).
	f = open("held", os.O_WRONLY|os.O_TRUNC)
	writeAt(f, "stat", 0)
	read(b, "held", "")
	if fi, err := os.Stat(filepath.Join(a, "held")); err != nil || fi.Size() != 4 {
		t.Fatalf("a/held after a write of 4 bytes: %v, %v", fi, err)
	}
	read(b, "held", "stat")
	f.Close()

	// Written through c, which holds writes a second, and not closed:
	// the timer commits it.
	// Polled rather than slept for, so a loaded machine cannot fail it;
	// a mount that never commits the write fails it after 30 s.
	f = openIn(c, "held", os.O_WRONLY)
	writeAt(f, "TIME", 0)
	testserver.Eventually(t, 30*time.Second, "b/held after a write c holds a second, never closed", func() (bool, string) {
		got, err := os.ReadFile(filepath.Join(b, "held"))
		return err == nil && string(got) == "TIME", fmt.Sprintf("%q, %v; want %q", got, err, "TIME")
	})
	f.Close()

	// Removed through b while a holds a write: a's close fails, and
	// nothing of it is seen.
	f = open("held", os.O_WRONLY)
	writeAt(f, "lost", 0)
	if err := os.Remove(filepath.Join(b, "held")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("close of a file removed through another mount while a write was held: %v, want ENOENT", err)
	}
	if _, err := os.Stat(filepath.Join(b, "held")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("b/held after a held write to it was refused: %v", err)
	}
}
