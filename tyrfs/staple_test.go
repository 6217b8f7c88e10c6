package tyrfs

// Staples (fslayout, invariant 5): a rename of a large file moves no data,
// and every call follows the staple. TestStapleRename runs on one server,
// TestStapleCluster on 3 nodes at replication 1 (staple, pointer and data
// blob on different nodes); checkTree walks the invariants after each step.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/testserver"
)

// pattern returns n bytes that differ from those of another seed.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7+i/4099)
	}
	return b
}

// writeBig makes a file at p holding data, in parts.
func writeBig(t *testing.T, ctx context.Context, f *FS, p string, data []byte) {
	t.Helper()
	must[Attr](t)(f.WriteFile(ctx, p, Owner{UID: 3, GID: 4, Mode: 0o640}, data))
}

// sameFile checks the file at p reads as want, through ReadAt at the
// start, the middle and the end, Fetch and FetchMany, and stats to its
// size.
func sameFile(t *testing.T, ctx context.Context, f *FS, p string, want []byte) {
	t.Helper()
	if a := must[Attr](t)(f.Stat(ctx, p, KindFile)); a.Size != uint64(len(want)) {
		t.Fatalf("%s: stat size %d, want %d", p, a.Size, len(want))
	}
	if a := must[Attr](t)(f.Lookup(ctx, p)); a.Size != uint64(len(want)) || a.Kind != KindFile {
		t.Fatalf("%s: lookup %+v, want a file of %d bytes", p, a, len(want))
	}
	n := uint64(len(want))
	for _, at := range []uint64{0, n / 2, n - min(n, 1000), n} {
		got := must[[]byte](t)(f.ReadAt(ctx, p, at, 128<<10))
		if w := want[at:min(n, at+128<<10)]; !bytes.Equal(got, w) {
			t.Fatalf("%s: ReadAt(%d): %d bytes, want %d equal", p, at, len(got), len(w))
		}
	}
	a, got, err := f.Fetch(ctx, p)
	if err != nil || !bytes.Equal(got, want) || a.Size != n {
		t.Fatalf("%s: fetch: %d bytes (attr size %d), %v; want %d", p, len(got), a.Size, err, n)
	}
	rs := must[[]FetchResult](t)(f.FetchMany(ctx, []string{p}))
	if rs[0].Err != nil || !bytes.Equal(rs[0].Data, want) {
		t.Fatalf("%s: FetchMany: %d bytes, %v", p, len(rs[0].Data), rs[0].Err)
	}
}

// gone checks no file is at p, for every call.
func gone(t *testing.T, ctx context.Context, f *FS, p string) {
	t.Helper()
	_, err := f.Lookup(ctx, p)
	wantErrno(t, err, syscall.ENOENT)
	_, _, err = f.Fetch(ctx, p)
	wantErrno(t, err, syscall.ENOENT)
	_, err = f.ReadAt(ctx, p, 0, 10)
	wantErrno(t, err, syscall.ENOENT)
	wantErrno(t, f.WriteAt(ctx, p, 0, []byte("x")), syscall.ENOENT)
	wantErrno(t, f.Unlink(ctx, p), syscall.ENOENT)
}

// stapleOf returns the data blob the staple at p points to; it fails the
// test if p is no staple.
func stapleOf(t *testing.T, ctx context.Context, c *client.Client, p string) string {
	t.Helper()
	h := must[[]byte](t)(c.Read(ctx, "tfs", p, 0, HeaderBytes))
	if fslayout.Flags(h) != fslayout.FlagStapled {
		t.Fatalf("%s: flags %#x, want a staple", p, fslayout.Flags(h))
	}
	return string(must[[]byte](t)(c.Read(ctx, "tfs", fslayout.PointerKey(p), 0, 1024)))
}

// mustRename renames from to to, or fails the test.
func mustRename(t *testing.T, ctx context.Context, f *FS, from, to string) {
	t.Helper()
	if err := f.Rename(ctx, from, to, 0); err != nil {
		t.Fatalf("rename %s %s: %v", from, to, err)
	}
}

// waitHome waits until the server brought the staple at p home.
func waitHome(t *testing.T, ctx context.Context, c *client.Client, p string) {
	t.Helper()
	testserver.Eventually(t, time.Minute, p+"'s data home", func() (bool, string) {
		h := must[[]byte](t)(c.Read(ctx, "tfs", p, 0, HeaderBytes))
		return fslayout.Flags(h) == 0, fmt.Sprintf("flags %#x", fslayout.Flags(h))
	})
}

// plain checks p is a plain file's blob.
func plain(t *testing.T, ctx context.Context, c *client.Client, p string) {
	t.Helper()
	if h := must[[]byte](t)(c.Read(ctx, "tfs", p, 0, HeaderBytes)); fslayout.Flags(h) != 0 || h[fslayout.OffVersion] != fslayout.FormatVersion {
		t.Fatalf("%s: flags %#x in version %d, want a plain file", p, fslayout.Flags(h), h[fslayout.OffVersion])
	}
}

// noHoming keeps the servers from bringing staples home, so the tests see
// the staples their renames made.
const noHoming = "--fs-home-bytes=0"

func TestStapleRename(t *testing.T) {
	ctx, c, f := newFS(t, noHoming)
	staples(t, ctx, c, f)
}

func TestStapleCluster(t *testing.T) {
	ctx, c, f, _ := stapleCluster(t, noHoming)
	staples(t, ctx, c, f)
}

// stapleCluster is newClusterFS where the first staple's blobs are not
// all on one node.
func stapleCluster(t *testing.T, upArgs ...string) (context.Context, *client.Client, *FS, *testserver.LocalCluster) {
	ctx, c, f, lc := newClusterFS(t, upArgs...)
	// The first staple, its pointer and its data blob are not all on
	// one node.
	place := lc.Placer()
	nodes := map[int]bool{}
	for _, key := range []string{"/a/big", "/b/big", fslayout.PointerKey("/b/big")} {
		nodes[place.Holders("tfs", key, 1)[0]] = true
	}
	t.Logf("the first staple's blobs are on %d nodes", len(nodes))
	if len(nodes) < 2 {
		t.Fatalf("the first staple's three blobs are all on one node: the test proves less than it should")
	}
	return ctx, c, f, lc
}

// TestStapleHome: on 3 nodes at replication 1, the node that coordinated a
// rename brings the staple's data home in the background: the file is a
// plain file again, with the attributes it took while stapled and its
// bytes, and pointer, data blob and back name are gone. A file above
// --fs-home-bytes, queued first, stays stapled, until it is shrunk and
// fetched.
func TestStapleHome(t *testing.T) {
	ctx, c, f, _ := stapleCluster(t)
	o := Owner{Mode: 0o755}
	for _, d := range []string{"/a", "/b"} {
		must[Attr](t)(f.Mkdir(ctx, d, o))
	}
	large := pattern(5, fslayout.HomeBytesLimit+1<<20)
	writeBig(t, ctx, f, "/a/large", large)
	small := pattern(6, 2<<20+3)
	writeBig(t, ctx, f, "/a/big", small)
	for _, name := range []string{"large", "big"} {
		mustRename(t, ctx, f, "/a/"+name, "/b/"+name)
	}
	mode := uint32(0o604)
	if _, err := f.Setattr(ctx, "/b/big", KindFile, SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	waitHome(t, ctx, c, "/b/big")
	plain(t, ctx, c, "/b/big")
	sameFile(t, ctx, f, "/b/big", small)
	if a := must[Attr](t)(f.Stat(ctx, "/b/big", KindFile)); a.Mode != mode || a.UID != 3 {
		t.Fatalf("attributes after homing: %+v", a)
	}
	for _, key := range []string{fslayout.PointerKey("/b/big"), "/a/big", fslayout.BackKey("/a/big")} {
		if _, err := c.Stat(ctx, "tfs", key); Errno(err) != syscall.ENOENT {
			t.Fatalf("blob %q after homing: %v", key, err)
		}
	}
	// The large one was checked before (one queue, in order), and left.
	if d := stapleOf(t, ctx, c, "/b/large"); d != "/a/large" {
		t.Fatalf("/b/large points to %q", d)
	}
	sameFile(t, ctx, f, "/b/large", large)
	checkTree(t, ctx, c, f)
	// Shrunk through the staple, no commit queues it again; a fetch
	// of a staple does.
	if err := f.Truncate(ctx, "/b/large", 3<<20); err != nil {
		t.Fatal(err)
	}
	sameFile(t, ctx, f, "/b/large", large[:3<<20])
	waitHome(t, ctx, c, "/b/large")
	sameFile(t, ctx, f, "/b/large", large[:3<<20])
	checkTree(t, ctx, c, f)
}

// staples renames large files, their directories and staples, and uses
// them through every call, checking the tree after each step.
func staples(t *testing.T, ctx context.Context, c *client.Client, f *FS) {
	o := Owner{Mode: 0o755}
	for _, d := range []string{"/a", "/b", "/c"} {
		must[Attr](t)(f.Mkdir(ctx, d, o))
	}
	// Above MoveBytesMax, which a copy could not move.
	big := pattern(1, MoveBytesMax+3<<20)
	writeBig(t, ctx, f, "/a/big", big)
	plain(t, ctx, c, "/a/big")
	mustRename(t, ctx, f, "/a/big", "/b/big")
	if d := stapleOf(t, ctx, c, "/b/big"); d != "/a/big" {
		t.Fatalf("staple /b/big points to %q, want /a/big", d)
	}
	checkTree(t, ctx, c, f)
	sameFile(t, ctx, f, "/b/big", big)
	gone(t, ctx, f, "/a/big")
	if a := must[Attr](t)(f.Stat(ctx, "/b/big", KindFile)); a.Mode != 0o640 || a.UID != 3 || a.GID != 4 {
		t.Fatalf("the staple's attributes: %+v", a)
	}
	// A directory renamed to the data blob's path is a directory there.
	must[Attr](t)(f.Mkdir(ctx, "/dir", o))
	mustRename(t, ctx, f, "/dir", "/a/big")
	_, _, err := f.Fetch(ctx, "/a/big")
	wantErrno(t, err, syscall.EISDIR)
	if a := must[Attr](t)(f.Lookup(ctx, "/a/big")); a.Kind != KindDir {
		t.Fatalf("lookup of a directory at a data blob's path: %+v", a)
	}
	checkTree(t, ctx, c, f)
	if err := f.Rmdir(ctx, "/a/big"); err != nil {
		t.Fatal(err)
	}

	// FetchHead of a staple: its attributes without bytes; its version
	// moves with a write through the staple.
	head := func() Attr {
		t.Helper()
		a, data, err := f.FetchHead(ctx, "/b/big", 1<<10)
		if err != nil || len(data) != 0 || a.Size != uint64(len(big)) || a.Kind != KindFile {
			t.Fatalf("FetchHead of the staple: %+v, %d bytes, %v; want %d bytes' attributes, no bytes", a, len(data), err, len(big))
		}
		if st := must[Attr](t)(f.Stat(ctx, "/b/big", KindFile)); st.Version != a.Version {
			t.Fatalf("FetchHead of the staple: version %d, stat %d", a.Version, st.Version)
		}
		return a
	}
	before := head()

	// Every change through the staple. WriteAtFrom cannot tell whether
	// its write alone changed a staple: the version it returns is 0.
	if v, err := f.WriteAtFrom(ctx, "/b/big", 5<<20, []byte("written through"), before.Version); err != nil || v != 0 {
		t.Fatalf("WriteAtFrom through the staple: version %d, %v; want 0, nil", v, err)
	}
	if after := head(); after.Version <= before.Version {
		t.Fatalf("a write through the staple left its version at %d (was %d)", after.Version, before.Version)
	}
	copy(big[5<<20:], "written through")
	off := must[uint64](t)(f.Append(ctx, "/b/big", []byte("appended")))
	if off != uint64(len(big)) {
		t.Fatalf("append at %d, want %d", off, len(big))
	}
	big = append(big, "appended"...)
	if err := f.Truncate(ctx, "/b/big", uint64(len(big)-100)); err != nil {
		t.Fatal(err)
	}
	big = big[:len(big)-100]
	if err := f.Extend(ctx, "/b/big", uint64(len(big)+50)); err != nil {
		t.Fatal(err)
	}
	big = append(big, make([]byte, 50)...)
	mode := uint32(0o600)
	if a := must[Attr](t)(f.Setattr(ctx, "/b/big", KindFile, SetAttr{Mode: &mode})); a.Mode != mode || a.Size != uint64(len(big)) {
		t.Fatalf("chmod of a staple: %+v", a)
	}
	sameFile(t, ctx, f, "/b/big", big)
	checkTree(t, ctx, c, f)

	// The old name is reused: the data moves to a hidden blob first.
	small := pattern(2, 1000)
	writeBig(t, ctx, f, "/a/big", small)
	if d := stapleOf(t, ctx, c, "/b/big"); d[0] != '%' {
		t.Fatalf("after /a/big was reused, the staple points to %q, want a hidden blob", d)
	}
	checkTree(t, ctx, c, f)
	sameFile(t, ctx, f, "/a/big", small)
	sameFile(t, ctx, f, "/b/big", big)

	// A staple renamed moves as a staple; a plain file renamed over it
	// takes its data with it.
	mustRename(t, ctx, f, "/b/big", "/c/big")
	stapleOf(t, ctx, c, "/c/big")
	checkTree(t, ctx, c, f)
	sameFile(t, ctx, f, "/c/big", big)
	gone(t, ctx, f, "/b/big")
	mustRename(t, ctx, f, "/a/big", "/c/big")
	plain(t, ctx, c, "/c/big")
	checkTree(t, ctx, c, f)
	sameFile(t, ctx, f, "/c/big", small)

	// A staple renamed back onto its data blob's path comes home.
	two := pattern(3, 2<<20+5)
	writeBig(t, ctx, f, "/a/two", two)
	mustRename(t, ctx, f, "/a/two", "/b/two")
	stapleOf(t, ctx, c, "/b/two")
	mustRename(t, ctx, f, "/b/two", "/a/two")
	plain(t, ctx, c, "/a/two")
	checkTree(t, ctx, c, f)
	sameFile(t, ctx, f, "/a/two", two)

	// A staple unlinked takes its data with it; so does a staple renamed
	// over another.
	mustRename(t, ctx, f, "/a/two", "/b/two")
	writeBig(t, ctx, f, "/a/three", pattern(4, 3<<20))
	mustRename(t, ctx, f, "/a/three", "/b/three")
	mustRename(t, ctx, f, "/b/three", "/b/two")
	checkTree(t, ctx, c, f)
	sameFile(t, ctx, f, "/b/two", pattern(4, 3<<20))
	if err := f.Unlink(ctx, "/b/two"); err != nil {
		t.Fatal(err)
	}
	checkTree(t, ctx, c, f)

	// Directories: large files under them are stapled, small ones copied;
	// renamed back, the staples come home; a name under the destination
	// held by a data blob is freed first.
	must[Attr](t)(f.Mkdir(ctx, "/e", o))
	writeBig(t, ctx, f, "/e/big", two)
	writeBig(t, ctx, f, "/e/small", small)
	mustRename(t, ctx, f, "/e", "/f")
	stapleOf(t, ctx, c, "/f/big")
	plain(t, ctx, c, "/f/small")
	checkTree(t, ctx, c, f)
	sameFile(t, ctx, f, "/f/big", two)
	must[Attr](t)(f.Mkdir(ctx, "/e", o)) // its old path, free again
	mustRename(t, ctx, f, "/f", "/e")
	plain(t, ctx, c, "/e/big")
	checkTree(t, ctx, c, f)
	sameFile(t, ctx, f, "/e/big", two)
	mustRename(t, ctx, f, "/e/big", "/c/moved") // "/e/big" now holds its data
	must[Attr](t)(f.Mkdir(ctx, "/g", o))
	writeBig(t, ctx, f, "/g/big", big)
	if err := f.Rename(ctx, "/g", "/e", RenameNoReplace); Errno(err) != syscall.EEXIST {
		t.Fatalf("rename over a directory with RENAME_NOREPLACE: %v", err)
	}
	if err := f.Unlink(ctx, "/e/small"); err != nil {
		t.Fatal(err)
	}
	mustRename(t, ctx, f, "/g", "/e")
	checkTree(t, ctx, c, f)
	sameFile(t, ctx, f, "/e/big", big)
	sameFile(t, ctx, f, "/c/moved", two)

	// Mkdir at a data blob's path frees the name too.
	mustRename(t, ctx, f, "/c/moved", "/c/again")
	must[Attr](t)(f.Mkdir(ctx, "/c/moved", o))
	checkTree(t, ctx, c, f)
	sameFile(t, ctx, f, "/c/again", two)

	// Everything removed, no blob is left but the directories.
	for _, p := range []string{"/c/again", "/c/big", "/e/big", "/a/two"} {
		if err := f.Unlink(ctx, p); err != nil && Errno(err) != syscall.ENOENT {
			t.Fatal(err)
		}
	}
	checkTree(t, ctx, c, f)
	blobs, _, err := c.List(ctx, "tfs", "", "", client.ListLimitMax)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blobs {
		if b.Key[len(b.Key)-1] != '/' {
			t.Errorf("blob %q left after every file was removed", b.Key)
		}
	}
}

// TestStapleConcurrent: a staple renamed back and forth (coming home every
// other time) while one goroutine writes whole versions of it and another
// reads it: every read sees one version whole, never a mix or another
// file's bytes, and both make progress.
func TestStapleConcurrent(t *testing.T) {
	ctx, c, f := newFS(t)
	old := fslayout.StapleBytesMin
	fslayout.StapleBytesMin = 64 << 10
	t.Cleanup(func() { fslayout.StapleBytesMin = old })
	must[Attr](t)(f.Mkdir(ctx, "/d", Owner{Mode: 0o755}))
	const size = 64 << 10
	version := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, size) }
	writeBig(t, ctx, f, "/d/x", version(0))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var writes, reads int
	var failed error
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if failed == nil {
			failed = err
		}
	}
	wg.Add(2)
	go func() { // the writer: the file is at /d/x or /d/y
		defer wg.Done()
		rest := time.Millisecond
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Paced: a file written back to back keeps a rename, which
			// reads its header, conflicting. The writer rests as long as
			// its last write took, so on a slow machine as on a fast one
			// it holds the file about half the time.
			time.Sleep(rest)
			for _, p := range []string{"/d/x", "/d/y"} {
				start := time.Now()
				err := f.WriteAt(ctx, p, 0, version(i))
				rest = max(time.Millisecond, time.Since(start))
				if err == nil {
					writes++
					break
				}
				if e := Errno(err); e != syscall.ENOENT && e != syscall.EAGAIN {
					fail(fmt.Errorf("write to %s: %w", p, err))
					return
				}
			}
		}
	}()
	go func() { // the reader: whole files, and halves read at offsets
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, p := range []string{"/d/x", "/d/y"} {
				var b []byte
				var err error
				want := size
				switch i % 3 {
				case 0:
					_, b, err = f.Fetch(ctx, p)
				default:
					want = size / 2
					b, err = f.ReadAt(ctx, p, uint64(i%3-1)*size/2, size/2)
				}
				if e := Errno(err); err != nil && e != syscall.ENOENT && e != syscall.EAGAIN {
					fail(fmt.Errorf("read %d of %s: %w", i, p, err))
					return
				}
				if err != nil {
					continue
				}
				if len(b) != want || !bytes.Equal(b, version(int(b[0]))[:want]) {
					fail(fmt.Errorf("read %d of %s: %d bytes, want %d of one version", i, p, len(b), want))
					return
				}
				reads++
				break
			}
		}
	}()
	renames, busy := 0, 0
	for renames < 40 && busy < 200 {
		from, to := "/d/x", "/d/y"
		if renames%2 == 1 {
			from, to = to, from
		}
		err := f.Rename(ctx, from, to, 0)
		if e := Errno(err); err != nil && e != syscall.EAGAIN {
			close(stop)
			wg.Wait()
			t.Fatalf("rename %d: %v", renames, err)
		} else if err != nil {
			busy++ // the writer kept it busy: the same rename again
			continue
		}
		renames++
	}
	close(stop)
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	t.Logf("%d renames (%d refused as busy), %d writes, %d reads", renames, busy, writes, reads)
	if renames < 40 || writes == 0 || reads == 0 {
		t.Fatalf("%d writes and %d reads during %d renames: no progress", writes, reads, renames)
	}
	// The last staple comes home; then the tree holds still.
	waitHome(t, ctx, c, "/d/x")
	checkTree(t, ctx, c, f)
}

// TestStapleReadRequests counts the reads the server serves: a plain
// file's read is one request, from offset 0 or further on, a stapled
// file's four (its blob, the pointer, the data, the pointer again).
func TestStapleReadRequests(t *testing.T) {
	metrics := testserver.FreeLoopbackAddr(t)
	ctx, _, f := newFS(t, noHoming, "--metrics-listen", metrics)
	must[Attr](t)(f.Mkdir(ctx, "/d", Owner{Mode: 0o755}))
	data := pattern(7, 2<<20)
	writeBig(t, ctx, f, "/d/plain", data)
	writeBig(t, ctx, f, "/d/moved", data)
	mustRename(t, ctx, f, "/d/moved", "/d/staple")
	reads := func() float64 { return testserver.Metric(t, metrics, "tyr_reads_total")["local"] }
	// From offset 1 MiB, a staple's blob is found to be a header alone
	// first, then read again from its start.
	for _, r := range []struct {
		p    string
		off  uint64
		want float64
	}{{"/d/plain", 0, 1}, {"/d/plain", 1 << 20, 1}, {"/d/staple", 0, 4}, {"/d/staple", 1 << 20, 5}} {
		before := reads()
		got := must[[]byte](t)(f.ReadAt(ctx, r.p, r.off, 128<<10))
		if !bytes.Equal(got, data[r.off:r.off+128<<10]) {
			t.Fatalf("%s at %d: wrong bytes", r.p, r.off)
		}
		if n := reads() - before; n != r.want {
			t.Errorf("a read of %s at %d took %v reads, want %v", r.p, r.off, n, r.want)
		}
	}
	// A fetch of a plain file is one read too.
	before := reads()
	if _, got, err := f.Fetch(ctx, "/d/plain"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("fetch of /d/plain: %d bytes, %v", len(got), err)
	}
	if n := reads() - before; n != 1 {
		t.Errorf("a fetch of /d/plain took %v reads, want 1", n)
	}
}

// TestRelocateSwept: a relocation whose copy is deleted before its commit
// (by the servers' sweep of orphans, internal/server/fshidden.go, after a
// long pause of the client) copies again; the staple never points to a
// copy that is gone.
func TestRelocateSwept(t *testing.T) {
	ctx, c, f := newFS(t, noHoming)
	big := pattern(5, int(max(fslayout.StapleBytesMin, client.PayloadBytesMax))+100<<10) // a copy of two parts
	writeBig(t, ctx, f, "/a", big)
	mustRename(t, ctx, f, "/a", "/b")
	if d := stapleOf(t, ctx, c, "/b"); d != "/a" {
		t.Fatalf("staple /b points to %q, want /a", d)
	}
	var copies []string
	f.afterCopy = func(hidden string) {
		if copies = append(copies, hidden); len(copies) == 1 {
			must[[]client.OpResult](t)(c.Commit(ctx, "tfs", client.DeleteOp(hidden)))
		}
	}
	small := pattern(6, 100)
	writeBig(t, ctx, f, "/a", small) // frees the name /a: a relocation
	if len(copies) != 2 {
		t.Fatalf("%d copies made, want 2 (the first swept)", len(copies))
	}
	if d := stapleOf(t, ctx, c, "/b"); d != copies[1] {
		t.Fatalf("staple /b points to %q, want the second copy %q", d, copies[1])
	}
	sameFile(t, ctx, f, "/b", big)
	sameFile(t, ctx, f, "/a", small)
	checkTree(t, ctx, c, f)
}

// TestHiddenSweepCluster: on 3 nodes at replication 1, so that each node
// holds some of them, the servers' sweep (internal/server/fshidden.go,
// --fs-sweep-grace 1s) reclaims every orphaned hidden copy, each once, by
// the node serving its reads, and leaves a copy that has a back name.
func TestHiddenSweepCluster(t *testing.T) {
	ctx, c, _, lc := newClusterFS(t, "--fs-sweep-grace", "1s", "--metrics")
	movedOut := func(size int) []byte {
		h := fslayout.EncodeHeader(fslayout.Attr{Kind: fslayout.KindFile, Mode: 0o644})
		fslayout.SetFlags(h, fslayout.FlagMovedOut)
		return append(h, make([]byte, size)...)
	}
	const orphans = 24
	place := lc.Placer()
	holders := map[int]int{}
	var keys []string
	for i := range orphans {
		key := fslayout.HiddenKey(uint64(i + 1))
		keys = append(keys, key)
		holders[place.Holders("tfs", key, 1)[0]]++
		must[[]client.OpResult](t)(c.Commit(ctx, "tfs", client.WriteOp(key, 0, movedOut(100*i), true)))
	}
	if len(holders) < 2 {
		t.Fatalf("the orphans are on %d node(s): the test proves less than it should", len(holders))
	}
	owned := fslayout.HiddenKey(1000)
	must[[]client.OpResult](t)(c.Commit(ctx, "tfs", client.WriteOp(owned, 0, movedOut(10), true),
		client.WriteOp(fslayout.BackKey(owned), 0, []byte("/staple"), true)))

	testserver.Eventually(t, time.Minute, "every orphan reclaimed", func() (bool, string) {
		left := 0
		for _, key := range keys {
			if _, err := c.Stat(ctx, "tfs", key); err == nil {
				left++
			} else if !errors.Is(err, client.ErrNotFound) {
				t.Fatal(err)
			}
		}
		return left == 0, fmt.Sprintf("%d of %d left", left, orphans)
	})
	if _, err := c.Stat(ctx, "tfs", owned); err != nil {
		t.Fatalf("the copy with a back name: %v", err)
	}
	reclaimed := 0.0
	for k := 1; k <= 3; k++ {
		got := testserver.Metric(t, lc.MetricsAddr(k), "tyr_fs_hidden_sweeps_total")
		t.Logf("node%d sweeps: %v", k, got)
		if got["reclaimed"] != float64(holders[k]) {
			t.Errorf("node%d reclaimed %v orphans, want the %d it holds", k, got["reclaimed"], holders[k])
		}
		reclaimed += got["reclaimed"]
	}
	if reclaimed != orphans {
		t.Errorf("%v reclaims in all, want %d: each orphan once", reclaimed, orphans)
	}
}
