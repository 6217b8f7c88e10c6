package tyrfs

// These tests run the file-system operations against a real server
// (internal/testserver) and check their results, their errnos, and the
// layout invariants of layout.go by reading the blobs directly. A failure
// reproduces with `go test -race -run NAME ./tyrfs`.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/testserver"
)

// newFS starts a server with keyspace ks and returns a file system on it.
func newFS(t *testing.T, serverArgs ...string) (context.Context, *client.Client, *FS) {
	t.Helper()
	c := testserver.Start(t, serverArgs...).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if _, err := c.CreateKeyspace(ctx, "tfs", client.DefaultKeyspaceConfig()); err != nil {
		t.Fatal(err)
	}
	f, err := New(ctx, c, "tfs")
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c, f
}

func wantErrno(t *testing.T, err error, want syscall.Errno) {
	t.Helper()
	if got := Errno(err); got != want {
		t.Fatalf("error %v: errno %v, want %v", err, got, want)
	}
}

func must[T any](t *testing.T) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func names(t *testing.T, ctx context.Context, f *FS, p string) []string {
	t.Helper()
	es, err := f.Readdir(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name+":"+e.Kind.String())
	}
	slices.Sort(out)
	return out
}

// checkTree verifies invariant 1 of layout.go over the whole keyspace: the
// blobs are exactly the root and the children the logs list, each of the
// kind its entry names.
func checkTree(t *testing.T, ctx context.Context, c *client.Client, f *FS) {
	t.Helper()
	want := map[string]Kind{"/": KindDir}
	subdirs := map[string]uint32{} // by directory key
	var walk func(p string)
	walk = func(p string) {
		for _, e := range must[[]Entry](t)(f.Readdir(ctx, p)) {
			child := fslayout.Join(p, e.Name)
			want[fslayout.KeyOf(child, e.Kind)] = e.Kind
			if e.Kind == KindDir {
				subdirs[fslayout.DirKey(p)]++
				walk(child)
			}
		}
	}
	walk("/")
	blobs, _, err := c.List(ctx, "tfs", "", "", client.ListLimitMax)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Kind{}
	heads := map[string][]byte{}
	for _, b := range blobs {
		hb, info, err := c.ReadPart(ctx, "tfs", b.Key, 0, limits.KeyBytesMax)
		if err != nil {
			t.Fatal(err)
		}
		heads[b.Key] = hb
		if !strings.HasPrefix(b.Key, "/") {
			continue // a staple's blob, checked below
		}
		a, err := fslayout.DecodeHeader(b.Key, hb, info.Size)
		if err != nil {
			t.Fatal(err)
		}
		if fslayout.Flags(hb) != fslayout.FlagMovedOut {
			got[b.Key] = a.Kind
		}
		if a.Kind == KindDir && hb[fslayout.OffVersion] == fslayout.DirVersion && a.Nlink != 2+subdirs[b.Key] {
			t.Fatalf("invariant 6: directory %q has %d links, %d subdirectories", b.Key, a.Nlink, subdirs[b.Key])
		}
	}
	if err := fslayout.CheckStaples(heads); err != nil {
		t.Fatalf("invariant 5: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("blobs %v, want (from the logs) %v", got, want)
	}
}

func TestFileLifecycle(t *testing.T) {
	ctx, c, f := newFS(t)
	o := Owner{UID: 7, GID: 8, Mode: 0o640}
	must[Attr](t)(f.Mkdir(ctx, "/d", Owner{Mode: 0o755}))
	a := must[Attr](t)(f.Create(ctx, "/d/x", o))
	if a.Kind != KindFile || a.Mode != 0o640 || a.UID != 7 || a.GID != 8 || a.Size != 0 {
		t.Fatalf("created %+v", a)
	}
	_, err := f.Create(ctx, "/d/x", o)
	wantErrno(t, err, syscall.EEXIST)
	_, err = f.Mkdir(ctx, "/d/x", o)
	wantErrno(t, err, syscall.EEXIST)
	_, err = f.Create(ctx, "/d", o)
	wantErrno(t, err, syscall.EEXIST)
	_, err = f.Create(ctx, "/nope/x", o)
	wantErrno(t, err, syscall.ENOENT)
	_, err = f.Create(ctx, "/d/x/y", o)
	wantErrno(t, err, syscall.ENOTDIR)

	if err := f.WriteAt(ctx, "/d/x", 0, []byte("hello world")); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteAt(ctx, "/d/x", 20, []byte("!")); err != nil { // a hole
		t.Fatal(err)
	}
	want := append([]byte("hello world"), make([]byte, 9)...)
	want = append(want, '!')
	if got := must[[]byte](t)(f.ReadAt(ctx, "/d/x", 0, 100)); !bytes.Equal(got, want) {
		t.Fatalf("read %q, want %q", got, want)
	}
	if got := must[[]byte](t)(f.ReadAt(ctx, "/d/x", 6, 5)); string(got) != "world" {
		t.Fatalf("read at 6: %q", got)
	}
	a, data, err := f.Fetch(ctx, "/d/x")
	if err != nil || !bytes.Equal(data, want) || a.Size != uint64(len(want)) || a.Mode != 0o640 {
		t.Fatalf("fetch: %+v %q %v", a, data, err)
	}
	if off := must[uint64](t)(f.Append(ctx, "/d/x", []byte("end"))); off != 21 {
		t.Fatalf("append landed at %d, want 21", off)
	}
	if err := f.Truncate(ctx, "/d/x", 5); err != nil {
		t.Fatal(err)
	}
	if _, data, _ := f.Fetch(ctx, "/d/x"); string(data) != "hello" {
		t.Fatalf("after truncate: %q", data)
	}
	_, _, err = f.Fetch(ctx, "/d")
	wantErrno(t, err, syscall.EISDIR)
	_, _, err = f.Fetch(ctx, "/d/none")
	wantErrno(t, err, syscall.ENOENT)

	mode, uid, mtime := uint32(0o4711), uint32(1000), int64(42e9)
	a = must[Attr](t)(f.Setattr(ctx, "/d/x", KindFile, SetAttr{Mode: &mode, UID: &uid, Mtime: &mtime}))
	if a.Mode != 0o4711 || a.UID != 1000 || a.GID != 8 || a.Mtime != 42e9 || a.Size != 5 {
		t.Fatalf("after setattr: %+v", a)
	}

	must[Attr](t)(f.Symlink(ctx, "../target", "/d/l", Owner{}))
	if got := must[string](t)(f.Readlink(ctx, "/d/l")); got != "../target" {
		t.Fatalf("readlink %q", got)
	}
	_, err = f.Readlink(ctx, "/d/x")
	wantErrno(t, err, syscall.EINVAL)
	if got := must[Attr](t)(f.Lookup(ctx, "/d/l")); got.Kind != KindSymlink || got.Size != 9 {
		t.Fatalf("lookup of the link: %+v", got)
	}

	if got := names(t, ctx, f, "/d"); fmt.Sprint(got) != "[l:symlink x:file]" {
		t.Fatalf("readdir: %v", got)
	}
	wantErrno(t, f.Rmdir(ctx, "/d"), syscall.ENOTEMPTY)
	wantErrno(t, f.Unlink(ctx, "/d"), syscall.EISDIR)
	wantErrno(t, f.Rmdir(ctx, "/d/x"), syscall.ENOTDIR)
	checkTree(t, ctx, c, f)
	for _, p := range []string{"/d/x", "/d/l"} {
		if err := f.Unlink(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	wantErrno(t, f.Unlink(ctx, "/d/x"), syscall.ENOENT)
	if err := f.Rmdir(ctx, "/d"); err != nil {
		t.Fatal(err)
	}
	if got := names(t, ctx, f, "/"); len(got) != 0 {
		t.Fatalf("root after removals: %v", got)
	}
	wantErrno(t, f.Rmdir(ctx, "/"), syscall.EBUSY)
	checkTree(t, ctx, c, f)
}

// TestVersions checks the attribute a mount revalidates opens with: a
// file's version is the same at each stat while the file is unchanged,
// and above the last after each change to its data or its metadata, also
// when it is removed and made again.
func TestVersions(t *testing.T) {
	ctx, _, f := newFS(t)
	o := Owner{UID: 1, GID: 1, Mode: 0o644}
	last := must[Attr](t)(f.Create(ctx, "/v", o)).Version
	if got := must[Attr](t)(f.Stat(ctx, "/v", KindFile)).Version; got != last || last == 0 {
		t.Fatalf("version %d after the create, %d at a stat; want equal and above 0", last, got)
	}
	// FetchHead: the attributes, at the same version, and the first bytes
	// asked for.
	if err := f.WriteAt(ctx, "/v", 0, []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	st := must[Attr](t)(f.Stat(ctx, "/v", KindFile))
	for _, n := range []uint64{0, 4, 10, 100} {
		a, data, err := f.FetchHead(ctx, "/v", n)
		if want := "0123456789"[:min(n, 10)]; err != nil || a != st || string(data) != want {
			t.Fatalf("FetchHead(/v, %d): %+v, %q, %v; want %+v, %q", n, a, data, err, st, want)
		}
	}
	_, _, err := f.FetchHead(ctx, "/", 10)
	wantErrno(t, err, syscall.EISDIR)
	_, _, err = f.FetchHead(ctx, "/none", 10)
	wantErrno(t, err, syscall.ENOENT)
	last = st.Version

	mode, size := uint32(0o600), uint64(2)
	for _, change := range []struct {
		name string
		do   func() error
	}{
		{"write", func() error { return f.WriteAt(ctx, "/v", 0, []byte("data")) }},
		{"same bytes again", func() error { return f.WriteAt(ctx, "/v", 0, []byte("data")) }},
		{"append", func() error { _, err := f.Append(ctx, "/v", []byte("more")); return err }},
		{"truncate", func() error { return f.Truncate(ctx, "/v", size) }},
		{"chmod", func() error { _, err := f.Setattr(ctx, "/v", KindFile, SetAttr{Mode: &mode}); return err }},
		{"remove and create", func() error {
			if err := f.Unlink(ctx, "/v"); err != nil {
				return err
			}
			_, err := f.Create(ctx, "/v", o)
			return err
		}},
	} {
		if err := change.do(); err != nil {
			t.Fatalf("%s: %v", change.name, err)
		}
		a := must[Attr](t)(f.Stat(ctx, "/v", KindFile))
		if again := must[Attr](t)(f.Lookup(ctx, "/v")); again.Version != a.Version {
			t.Fatalf("after %s: version %d at a stat, %d at a lookup of the unchanged file", change.name, a.Version, again.Version)
		}
		if a.Version <= last {
			t.Fatalf("after %s: version %d, want above %d", change.name, a.Version, last)
		}
		last = a.Version
	}
}

// WriteAtFrom returns the file's version after the write when the file
// was at the version given before it, 0 when it was not (the write still
// lands) or none was given.
func TestWriteAtFrom(t *testing.T) {
	ctx, _, f := newFS(t)
	base := must[Attr](t)(f.Create(ctx, "/w", Owner{UID: 1, GID: 1, Mode: 0o644})).Version
	stat := func() Attr {
		t.Helper()
		return must[Attr](t)(f.Stat(ctx, "/w", KindFile))
	}
	// In step, in one commit and in several (a write above a commit's
	// payload).
	for _, n := range []int{10, client.PayloadBytesMax + 10} {
		v, err := f.WriteAtFrom(ctx, "/w", 0, bytes.Repeat([]byte{'x'}, n), base)
		if a := stat(); err != nil || v == 0 || v != a.Version {
			t.Fatalf("WriteAtFrom of %d bytes from the file's version: version %d, %v; the file is at %d", n, v, err, a.Version)
		}
		base = v
	}
	// Behind: another write came first.
	if err := f.WriteAt(ctx, "/w", 0, []byte("other")); err != nil {
		t.Fatal(err)
	}
	if v, err := f.WriteAtFrom(ctx, "/w", 5, []byte("mine"), base); err != nil || v != 0 {
		t.Fatalf("WriteAtFrom from an older version: version %d, %v; want 0, nil", v, err)
	}
	if v, err := f.WriteAtFrom(ctx, "/w", 9, []byte("!"), 0); err != nil || v != 0 {
		t.Fatalf("WriteAtFrom from no version: version %d, %v; want 0, nil", v, err)
	}
	if got := must[[]byte](t)(f.ReadAt(ctx, "/w", 0, 12)); string(got) != "othermine!xx" {
		t.Fatalf("the file starts %q, want %q", got, "othermine!xx")
	}
}

func TestCreateAt(t *testing.T) {
	ctx, _, f := newFS(t)
	if _, err := f.Mkdir(ctx, "/d", Owner{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	dir := must[Attr](t)(f.Stat(ctx, "/d", KindDir))
	made := dir.Mtime
	at := time.Now().Add(-time.Hour).UnixNano()
	a := must[Attr](t)(f.CreateAt(ctx, "/d/c", Owner{UID: 1, GID: 1, Mode: 0o640}, at))
	// A create adds DirEntryBytes to its directory's size.
	if d := must[Attr](t)(f.Stat(ctx, "/d", KindDir)); d.Size != dir.Size+DirEntryBytes("c") {
		t.Fatalf("the directory's size after a create: %d, want %d + %d", d.Size, dir.Size, DirEntryBytes("c"))
	}
	got := must[Attr](t)(f.Stat(ctx, "/d/c", KindFile))
	if got != a || got.Atime != at || got.Mtime != at || got.Ctime != at || got.Btime != at || got.Size != 0 || got.Mode != 0o640 {
		t.Fatalf("CreateAt at %d: returned %+v, stat %+v; want every time %d, empty, mode 0640", at, a, got, at)
	}
	// The directory was made after at: its times stay.
	if d := must[Attr](t)(f.Stat(ctx, "/d", KindDir)); d.Mtime != made || d.Ctime != made {
		t.Fatalf("the directory after CreateAt at %d, before its own last change: mtime %d, ctime %d; want %d", at, d.Mtime, d.Ctime, made)
	}
	later := made + 1000
	must[Attr](t)(f.CreateAt(ctx, "/d/e", Owner{Mode: 0o640}, later))
	if d := must[Attr](t)(f.Stat(ctx, "/d", KindDir)); d.Mtime != later || d.Ctime != later {
		t.Fatalf("the directory after CreateAt at %d: mtime %d, ctime %d; want both %d", later, d.Mtime, d.Ctime, later)
	}
	if _, err := f.CreateAt(ctx, "/d/c", Owner{Mode: 0o640}, at); Errno(err) != syscall.EEXIST {
		t.Fatalf("CreateAt of an existing name: %v, want EEXIST", err)
	}
	if _, err := f.CreateAt(ctx, "/d/z", Owner{Mode: 0o640}, 0); Errno(err) != syscall.EINVAL {
		t.Fatalf("CreateAt at time 0: %v, want EINVAL", err)
	}
	if _, err := f.Stat(ctx, "/d/z", KindFile); Errno(err) != syscall.ENOENT {
		t.Fatalf("/d/z after a refused CreateAt: %v, want ENOENT", err)
	}
}

// TestRemoveAt checks that UnlinkAt and RmdirAt set the parent's mtime
// and ctime to the time given, and grow its size by the removal's record,
// as the mount's kept attributes assume; time 0 is refused and changes
// nothing.
func TestRemoveAt(t *testing.T) {
	ctx, _, f := newFS(t)
	must[Attr](t)(f.Mkdir(ctx, "/d", Owner{Mode: 0o755}))
	must[Attr](t)(f.Create(ctx, "/d/f", Owner{Mode: 0o644}))
	must[Attr](t)(f.Mkdir(ctx, "/d/s", Owner{Mode: 0o755}))
	before := must[Attr](t)(f.Stat(ctx, "/d", KindDir))
	if err := f.UnlinkAt(ctx, "/d/f", 0); Errno(err) != syscall.EINVAL {
		t.Fatalf("UnlinkAt at time 0: %v, want EINVAL", err)
	}
	if err := f.RmdirAt(ctx, "/d/s", 0); Errno(err) != syscall.EINVAL {
		t.Fatalf("RmdirAt at time 0: %v, want EINVAL", err)
	}
	if d := must[Attr](t)(f.Stat(ctx, "/d", KindDir)); d != before {
		t.Fatalf("the directory after refused removals: %+v, want %+v", d, before)
	}
	at := before.Mtime - 1000 // earlier than the directory's last change: set all the same
	if err := f.UnlinkAt(ctx, "/d/f", at); err != nil {
		t.Fatal(err)
	}
	d := must[Attr](t)(f.Stat(ctx, "/d", KindDir))
	if d.Mtime != at || d.Ctime != at || d.Size != before.Size+DirEntryBytes("f") || d.Nlink != before.Nlink {
		t.Fatalf("the directory after UnlinkAt at %d: %+v; want times %d, size %d, %d links", at, d, at, before.Size+DirEntryBytes("f"), before.Nlink)
	}
	if err := f.RmdirAt(ctx, "/d/s", at+1); err != nil {
		t.Fatal(err)
	}
	d2 := must[Attr](t)(f.Stat(ctx, "/d", KindDir))
	if d2.Mtime != at+1 || d2.Ctime != at+1 || d2.Size != d.Size+DirEntryBytes("s") || d2.Nlink != d.Nlink-1 {
		t.Fatalf("the directory after RmdirAt at %d: %+v; want times %d, size %d, %d links", at+1, d2, at+1, d.Size+DirEntryBytes("s"), d.Nlink-1)
	}
}

func TestLimits(t *testing.T) {
	ctx, _, f := newFS(t)
	long := string(bytes.Repeat([]byte("n"), NameBytesMax+1))
	_, err := f.Create(ctx, "/"+long, Owner{})
	wantErrno(t, err, syscall.ENAMETOOLONG)
	_, err = f.Create(ctx, "/"+long[1:], Owner{})
	if err != nil {
		t.Fatalf("a name of %d bytes: %v", NameBytesMax, err)
	}
	deep := ""
	for len(deep) <= PathBytesMax {
		deep += "/abcdefg"
	}
	_, err = f.Create(ctx, deep, Owner{})
	wantErrno(t, err, syscall.ENAMETOOLONG)
	// The longest path works, as Linux's PATH_MAX allows: directories of
	// the longest names down to a file, and to a directory, each with a
	// path of PathBytesMax bytes, which renames move.
	o := Owner{Mode: 0o755}
	dir := ""
	for len(dir)+1+NameBytesMax < PathBytesMax {
		dir += "/" + strings.Repeat("d", NameBytesMax)
		must[Attr](t)(f.Mkdir(ctx, dir, o))
	}
	longest := func(c string) string { return dir + "/" + strings.Repeat(c, PathBytesMax-len(dir)-1) }
	if len(longest("f")) != PathBytesMax {
		t.Fatalf("a path of %d bytes, want %d", len(longest("f")), PathBytesMax)
	}
	must[Attr](t)(f.WriteFile(ctx, longest("f"), o, []byte("deep")))
	must[Attr](t)(f.Mkdir(ctx, longest("s"), o))
	if err := f.Rename(ctx, longest("f"), longest("g"), 0); err != nil {
		t.Fatalf("rename of a file of the longest path: %v", err)
	}
	if err := f.Rename(ctx, longest("s"), longest("t"), 0); err != nil {
		t.Fatalf("rename of a directory of the longest path: %v", err)
	}
	if _, data, err := f.Fetch(ctx, longest("g")); err != nil || string(data) != "deep" {
		t.Fatalf("fetch of the renamed file: %q, %v", data, err)
	}
	must[Attr](t)(f.Stat(ctx, longest("t"), KindDir))
	_, err = f.Create(ctx, longest("t")+"/x", Owner{})
	wantErrno(t, err, syscall.ENAMETOOLONG)
	for _, bad := range []string{"relative", "/a/../b", "/a/./b", "/a\x00b", "/\xff"} {
		_, err = f.Create(ctx, bad, Owner{})
		wantErrno(t, err, syscall.EINVAL)
	}
	_, err = f.Symlink(ctx, string(bytes.Repeat([]byte("t"), SymlinkBytesMax+1)), "/l", Owner{})
	wantErrno(t, err, syscall.ENAMETOOLONG)
}

// TestDirLinks: a directory reports 2 links and one per subdirectory
// (fslayout, invariant 6), through mkdir, rmdir and renames of
// directories between parents and over empty ones; files report 1.
func TestDirLinks(t *testing.T) {
	ctx, c, f := newFS(t)
	o := Owner{Mode: 0o755}
	links := func(p string, want uint32) {
		t.Helper()
		if a := must[Attr](t)(f.Stat(ctx, p, KindDir)); a.Nlink != want {
			t.Fatalf("%s has %d links, want %d", p, a.Nlink, want)
		}
	}
	links("/", 2)
	for _, d := range []string{"/a", "/a/b", "/a/c", "/a/d", "/x"} {
		if a := must[Attr](t)(f.Mkdir(ctx, d, o)); a.Nlink != 2 {
			t.Fatalf("mkdir %s answered %d links, want 2", d, a.Nlink)
		}
	}
	if a := must[Attr](t)(f.Create(ctx, "/a/f", o)); a.Nlink != 1 {
		t.Fatalf("a new file has %d links, want 1", a.Nlink)
	}
	if a := must[Attr](t)(f.Stat(ctx, "/a/f", KindFile)); a.Nlink != 1 {
		t.Fatalf("a file stats with %d links, want 1", a.Nlink)
	}
	links("/", 4)
	links("/a", 5)
	if err := f.Rmdir(ctx, "/a/c"); err != nil {
		t.Fatal(err)
	}
	links("/a", 4)
	// Between parents: one leaves /a for /x.
	mustRename(t, ctx, f, "/a/b", "/x/b")
	links("/a", 3)
	links("/x", 3)
	// Over an empty directory in another parent: /x keeps its count.
	must[Attr](t)(f.Mkdir(ctx, "/x/e", o))
	mustRename(t, ctx, f, "/a/d", "/x/e")
	links("/a", 2)
	links("/x", 4)
	// Over an empty directory in the same parent: one fewer.
	mustRename(t, ctx, f, "/x/b", "/x/e")
	links("/x", 3)
	// Within one parent, and a file moved: no change.
	mustRename(t, ctx, f, "/x/e", "/x/g")
	mustRename(t, ctx, f, "/a/f", "/x/f")
	links("/x", 3)
	links("/a", 2)
	// A moved directory keeps its own count.
	must[Attr](t)(f.Mkdir(ctx, "/x/g/h", o))
	mustRename(t, ctx, f, "/x/g", "/a/g")
	links("/a/g", 3)
	links("/a", 3)
	links("/x", 2)
	links("/", 4)
	checkTree(t, ctx, c, f)
}

func TestRename(t *testing.T) {
	ctx, c, f := newFS(t)
	o := Owner{Mode: 0o644}
	must[Attr](t)(f.Mkdir(ctx, "/a", o))
	must[Attr](t)(f.Mkdir(ctx, "/a/sub", o))
	must[Attr](t)(f.Mkdir(ctx, "/b", o))
	must[Attr](t)(f.Create(ctx, "/a/f", o))
	must[Attr](t)(f.Create(ctx, "/a/sub/g", o))
	must[Attr](t)(f.Symlink(ctx, "f", "/a/sub/l", o))
	if err := f.WriteAt(ctx, "/a/f", 0, []byte("data of f")); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteAt(ctx, "/a/sub/g", 0, []byte("data of g")); err != nil {
		t.Fatal(err)
	}
	must[Attr](t)(f.Create(ctx, "/b/f", o))

	// A file over a file.
	if err := f.Rename(ctx, "/a/f", "/b/f", 0); err != nil {
		t.Fatal(err)
	}
	if _, d, err := f.Fetch(ctx, "/b/f"); err != nil || string(d) != "data of f" {
		t.Fatalf("renamed file: %q %v", d, err)
	}
	_, err := f.Lookup(ctx, "/a/f")
	wantErrno(t, err, syscall.ENOENT)
	wantErrno(t, f.Rename(ctx, "/a/f", "/b/g", 0), syscall.ENOENT)
	wantErrno(t, f.Rename(ctx, "/b/f", "/a", 0), syscall.EISDIR)
	wantErrno(t, f.Rename(ctx, "/a", "/b/f", 0), syscall.ENOTDIR)
	wantErrno(t, f.Rename(ctx, "/a", "/a/sub/x", 0), syscall.EINVAL)
	wantErrno(t, f.Rename(ctx, "/b/f", "/none/f", 0), syscall.ENOENT)
	must[Attr](t)(f.Create(ctx, "/b/h", o))
	wantErrno(t, f.Rename(ctx, "/b/f", "/b/h", RenameNoReplace), syscall.EEXIST)
	wantErrno(t, f.Rename(ctx, "/a", "/b", 0), syscall.ENOTEMPTY)

	// A directory with descendants, to a new name.
	if err := f.Rename(ctx, "/a", "/b/a2", 0); err != nil {
		t.Fatal(err)
	}
	if _, d, err := f.Fetch(ctx, "/b/a2/sub/g"); err != nil || string(d) != "data of g" {
		t.Fatalf("moved descendant: %q %v", d, err)
	}
	if got := must[string](t)(f.Readlink(ctx, "/b/a2/sub/l")); got != "f" {
		t.Fatalf("moved link: %q", got)
	}
	if got := names(t, ctx, f, "/b"); fmt.Sprint(got) != "[a2:dir f:file h:file]" {
		t.Fatalf("readdir /b: %v", got)
	}
	if got := names(t, ctx, f, "/"); fmt.Sprint(got) != "[b:dir]" {
		t.Fatalf("readdir /: %v", got)
	}
	// A directory over an empty one.
	must[Attr](t)(f.Mkdir(ctx, "/e", o))
	if err := f.Rename(ctx, "/b/a2", "/e", 0); err != nil {
		t.Fatal(err)
	}
	if got := names(t, ctx, f, "/e"); fmt.Sprint(got) != "[sub:dir]" {
		t.Fatalf("readdir /e: %v", got)
	}
	checkTree(t, ctx, c, f)

	// Too many blobs: EXDEV, and nothing changes.
	must[Attr](t)(f.Mkdir(ctx, "/big", o))
	for i := range MoveBlobsMax {
		must[Attr](t)(f.Create(ctx, fmt.Sprintf("/big/%d", i), o))
	}
	wantErrno(t, f.Rename(ctx, "/big", "/big2", 0), syscall.EXDEV)
	if n := len(names(t, ctx, f, "/big")); n != MoveBlobsMax {
		t.Fatalf("/big has %d entries after a refused rename, want %d", n, MoveBlobsMax)
	}
	// Too many bytes of files too small to staple: EXDEV.
	must[Attr](t)(f.Mkdir(ctx, "/large", o))
	for i := range MoveBytesMax/(fslayout.StapleBytesMin-1) + 1 {
		p := fmt.Sprintf("/large/%d", i)
		must[Attr](t)(f.Create(ctx, p, o))
		if err := f.Truncate(ctx, p, fslayout.StapleBytesMin-1); err != nil {
			t.Fatal(err)
		}
	}
	wantErrno(t, f.Rename(ctx, "/large", "/large2", 0), syscall.EXDEV)
	checkTree(t, ctx, c, f)
}

// RenameKeeping keeps the plain file it replaces under the name asked,
// in the same commit, and replaces a staple or a file to be stapled as
// Rename does.
func TestRenameKeeping(t *testing.T) {
	ctx, c, f := newFS(t)
	o := Owner{Mode: 0o640}
	must[Attr](t)(f.Mkdir(ctx, "/d", o))
	must[Attr](t)(f.WriteFile(ctx, "/d/old", o, []byte("old bytes")))
	must[Attr](t)(f.WriteFile(ctx, "/d/new", o, []byte("new")))
	before := must[Attr](t)(f.Lookup(ctx, "/d/old"))
	kept, err := f.RenameKeeping(ctx, "/d/new", "/d/old", ".kept", 0)
	if err != nil || !kept {
		t.Fatalf("rename keeping a small file: kept %v, %v", kept, err)
	}
	if _, d, err := f.Fetch(ctx, "/d/old"); err != nil || string(d) != "new" {
		t.Fatalf("the renamed file: %q %v", d, err)
	}
	a, d, err := f.Fetch(ctx, "/d/.kept")
	if err != nil || string(d) != "old bytes" || a.Mode != before.Mode || a.Mtime != before.Mtime {
		t.Fatalf("the kept file: %q %+v %v; want the old bytes and attributes %+v", d, a, err, before)
	}
	if got := names(t, ctx, f, "/d"); fmt.Sprint(got) != "[.kept:file old:file]" {
		t.Fatalf("readdir /d: %v", got)
	}
	// The keep name taken: EEXIST, nothing changes.
	must[Attr](t)(f.WriteFile(ctx, "/d/new", o, []byte("newer")))
	_, err = f.RenameKeeping(ctx, "/d/new", "/d/old", ".kept", 0)
	wantErrno(t, err, syscall.EEXIST)
	if _, d, err := f.Fetch(ctx, "/d/old"); err != nil || string(d) != "new" {
		t.Fatalf("after a refused rename: %q %v", d, err)
	}
	_, err = f.RenameKeeping(ctx, "/d/new", "/d/old", "a/b", 0)
	wantErrno(t, err, syscall.EINVAL)
	// Nothing replaced: nothing kept.
	if kept, err := f.RenameKeeping(ctx, "/d/new", "/d/fresh", ".k2", 0); err != nil || kept {
		t.Fatalf("rename to a free name: kept %v, %v", kept, err)
	}
	// A file to be stapled is replaced.
	big := make([]byte, fslayout.StapleBytesMin)
	must[Attr](t)(f.WriteFile(ctx, "/d/big", o, big))
	if kept, err := f.RenameKeeping(ctx, "/d/fresh", "/d/big", ".k3", 0); err != nil || kept {
		t.Fatalf("rename over a large file: kept %v, %v", kept, err)
	}
	if got := names(t, ctx, f, "/d"); fmt.Sprint(got) != "[.kept:file big:file old:file]" {
		t.Fatalf("readdir /d: %v", got)
	}
	checkTree(t, ctx, c, f)
}

// Removals make the server compact the directory's log in the background
// once they dominate it, and the entries survive compaction
// (compact_test.go has the cluster's case and racing creates).
func TestCompaction(t *testing.T) {
	ctx, c, f := newFS(t)
	compacts(t, ctx, c, f, "/d")
	checkTree(t, ctx, c, f)
}

// Concurrent creates, removals and renames in one directory keep the
// invariants: every entry has its blob and the reverse.
func TestConcurrentEntries(t *testing.T) {
	ctx, c, f := newFS(t)
	must[Attr](t)(f.Mkdir(ctx, "/d", Owner{Mode: 0o755}))
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 4 {
		wg.Go(func() {
			for i := range 12 {
				p := fmt.Sprintf("/d/w%d-%d", w, i)
				if _, err := f.Create(ctx, p, Owner{}); err != nil {
					errs <- err
					return
				}
				var err error
				switch i % 3 {
				case 0:
					err = f.Unlink(ctx, p)
				case 1:
					err = f.Rename(ctx, p, p+"r", 0)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkTree(t, ctx, c, f)
}

func TestLogReplay(t *testing.T) {
	var log []byte
	for _, r := range []struct {
		op   byte
		name string
	}{{fslayout.RecordAdd, "a"}, {fslayout.RecordAdd, "b"}, {fslayout.RecordRemove, "a"}, {fslayout.RecordAdd, "c"}, {fslayout.RecordAdd, "a"}} {
		log = append(log, fslayout.EncodeRecord(r.op, KindFile, r.name)...)
	}
	l, err := fslayout.ReplayLog("/d/", log)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(l.List()); got != "[{b file} {c file} {a file}]" {
		t.Fatalf("entries %s", got)
	}
	for _, bad := range [][]byte{
		fslayout.EncodeRecord(fslayout.RecordRemove, KindFile, "x"),
		append(fslayout.EncodeRecord(fslayout.RecordAdd, KindFile, "x"), fslayout.EncodeRecord(fslayout.RecordAdd, KindFile, "x")...),
		fslayout.EncodeRecord(fslayout.RecordAdd, KindFile, "x")[:3],
		fslayout.EncodeRecord(9, KindFile, "x"),
	} {
		if _, err := fslayout.ReplayLog("/d/", bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("replay of %q: %v, want ErrCorrupt", bad, err)
		}
	}
	h := fslayout.EncodeHeader(Attr{Kind: KindDir, Mode: 0o1777, UID: 1, GID: 2, Atime: 3, Mtime: -4, Ctime: 5, Btime: 6, Nlink: 5})
	a, err := fslayout.DecodeHeader("/d/", h, fslayout.DirLogOffset+10)
	if err != nil || a != (Attr{Kind: KindDir, Mode: 0o1777, UID: 1, GID: 2, Atime: 3, Mtime: -4, Ctime: 5, Btime: 6, Nlink: 5, LinksCounted: true, Size: 10}) {
		t.Fatalf("header round trip: %+v %v", a, err)
	}
	if _, err := fslayout.DecodeHeader("/d", h, fslayout.DirLogOffset); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a directory header under a file key: %v", err)
	}
	if _, err := fslayout.DecodeHeader("/d/", h, fslayout.DirLogOffset-1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a directory blob that ends before its log's start: %v", err)
	}
	// The log starts after the hole; a byte written in the hole is
	// corruption (invariant 4).
	blob := append(append(slices.Clone(h), make([]byte, fslayout.DirLogOffset-HeaderBytes)...), fslayout.EncodeRecord(fslayout.RecordAdd, KindFile, "x")...)
	if log, err := fslayout.DirLogOf("/d/", blob); err != nil || !bytes.Equal(log, blob[fslayout.DirLogOffset:]) {
		t.Fatalf("log of a version-2 directory: %q, %v", log, err)
	}
	blob[HeaderBytes+100] = 1
	if _, err := fslayout.DirLogOf("/d/", blob); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a byte in the hole: %v, want ErrCorrupt", err)
	}
	// Version 1: the log right after the header, Size the log's length.
	h[fslayout.OffVersion] = 1
	v1 := append(slices.Clone(h), fslayout.EncodeRecord(fslayout.RecordAdd, KindFile, "x")...)
	if a, err := fslayout.DecodeHeader("/d/", v1, uint64(len(v1))); err != nil || a.Size != uint64(len(v1)-HeaderBytes) {
		t.Fatalf("a version-1 directory: %+v, %v", a, err)
	}
	if log, err := fslayout.DirLogOf("/d/", v1); err != nil || !bytes.Equal(log, v1[HeaderBytes:]) {
		t.Fatalf("log of a version-1 directory: %q, %v", log, err)
	}
	// Version 3 is for flagged files only (invariant 5), 4 for
	// directories (invariant 6); 5 is unknown.
	for _, c := range []struct {
		version byte
		flags   uint16
	}{{3, 0}, {3, fslayout.FlagStapled}, {4, fslayout.FlagStapled}, {5, 0}, {2, fslayout.FlagMovedOut}} {
		h[fslayout.OffVersion] = c.version
		binary.LittleEndian.PutUint16(h[fslayout.OffFlags:], c.flags)
		if _, err := fslayout.DecodeHeader("/d/", h, fslayout.DirLogOffset); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a directory of format version %d with flags %#x: %v, want ErrCorrupt", c.version, c.flags, err)
		}
	}
	// A version-4 directory counts no fewer than 0 subdirectories; one of
	// version 2 ignores what its reserved bytes hold.
	binary.LittleEndian.PutUint16(h[fslayout.OffFlags:], 0)
	binary.LittleEndian.PutUint32(h[fslayout.OffSubdirs:], uint32(0xffffffff))
	for v, ok := range map[byte]bool{2: true, fslayout.DirVersion: false} {
		h[fslayout.OffVersion] = v
		if a, err := fslayout.DecodeHeader("/d/", h, fslayout.DirLogOffset); (err == nil) != ok || ok && a.Nlink != 2 {
			t.Fatalf("a directory of version %d counting -1 subdirectories: %+v, %v; want ok %v", v, a, err, ok)
		}
	}
	file := fslayout.EncodeHeader(Attr{Kind: KindFile})
	if file[fslayout.OffVersion] != fslayout.FormatVersion {
		t.Fatalf("a file header of version %d, want %d", file[fslayout.OffVersion], fslayout.FormatVersion)
	}
	file[fslayout.OffVersion] = fslayout.DirVersion
	if _, err := fslayout.DecodeHeader("/f", file, HeaderBytes); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a file of a directory's format version: %v, want ErrCorrupt", err)
	}
	for _, c := range []struct {
		flags uint16
		ok    bool
	}{{0, true}, {fslayout.FlagStapled, true}, {fslayout.FlagMovedOut, true}, {fslayout.FlagStapled | fslayout.FlagMovedOut, false}, {1 << 5, false}} {
		fslayout.SetFlags(file, c.flags)
		if _, err := fslayout.DecodeHeader("/f", file, HeaderBytes); (err == nil) != c.ok {
			t.Fatalf("a file with flags %#x: %v, want ok %v", c.flags, err, c.ok)
		}
		file[fslayout.OffVersion] ^= 1 // 2 with flags, 3 without
		if _, err := fslayout.DecodeHeader("/f", file, HeaderBytes); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a file with flags %#x in format version %d: %v, want ErrCorrupt", c.flags, file[fslayout.OffVersion], err)
		}
	}
	// The hole gives the header a page of the store to itself.
	if fslayout.DirLogOffset%mvcc.PageBytes != 0 {
		t.Fatalf("DirLogOffset %d is not a multiple of the store's page, %d", fslayout.DirLogOffset, mvcc.PageBytes)
	}
}

// FIFOs, sockets and device nodes are headers under file keys, listed in
// their directory with their kind; a device node keeps its number.
func TestMknod(t *testing.T) {
	ctx, c, f := newFS(t)
	o := Owner{UID: 3, GID: 4, Mode: 0o640}
	for _, tc := range []struct {
		name string
		kind Kind
		rdev uint32
	}{{"/fifo", KindFifo, 0}, {"/sock", KindSocket, 0}, {"/chr", KindChar, 0x0102}, {"/blk", KindBlock, 0x0803}} {
		a := must[Attr](t)(f.Mknod(ctx, tc.name, tc.kind, o, tc.rdev))
		got := must[Attr](t)(f.Lookup(ctx, tc.name))
		if got.Kind != tc.kind || got.Rdev != tc.rdev || got.Mode != 0o640 || got.UID != 3 || got.Size != 0 || got != a {
			t.Errorf("%s: %+v, want a %s of device %#x (made as %+v)", tc.name, got, tc.kind, tc.rdev, a)
		}
		_, err := f.Mknod(ctx, tc.name, tc.kind, o, tc.rdev)
		wantErrno(t, err, syscall.EEXIST)
	}
	_, err := f.Mknod(ctx, "/file", KindFile, o, 0)
	wantErrno(t, err, syscall.EINVAL)
	if got := names(t, ctx, f, "/"); fmt.Sprint(got) != "[blk:block chr:char fifo:fifo sock:socket]" {
		t.Errorf("root lists %v", got)
	}
	checkTree(t, ctx, c, f)
	wantErrno(t, f.Unlink(ctx, "/fifo"), 0)
	_, err = f.Lookup(ctx, "/fifo")
	wantErrno(t, err, syscall.ENOENT)
	checkTree(t, ctx, c, f)
}

// A directory made in format version 1 (its log right after the header)
// keeps working: entries added and removed, stat'ed, renamed (it stays
// version 1) and removed. A new directory has the hole: its blob is
// fslayout.DirLogOffset plus its log, zeros between the header and the
// log, and its size is its log's.
func TestFormatVersion1Dirs(t *testing.T) {
	ctx, c, f := newFS(t)
	h := fslayout.EncodeHeader(Attr{Kind: KindDir, Mode: 0o755})
	h[fslayout.OffVersion] = 1
	if _, err := c.Commit(ctx, f.ks, client.CreateOp("/old/"), client.WriteOp("/old/", 0, h, false),
		client.AppendOp("/", fslayout.EncodeRecord(fslayout.RecordAdd, KindDir, "old"), false), subdirsOp("/", 1)); err != nil {
		t.Fatal(err)
	}
	o := Owner{Mode: 0o644}
	must[Attr](t)(f.Create(ctx, "/old/a", o))
	must[Attr](t)(f.Mkdir(ctx, "/old/sub", Owner{Mode: 0o755}))
	must[Attr](t)(f.Create(ctx, "/old/b", o))
	if err := f.Unlink(ctx, "/old/b"); err != nil {
		t.Fatal(err)
	}
	if got := names(t, ctx, f, "/old"); !slices.Equal(got, []string{"a:file", "sub:dir"}) {
		t.Fatalf("/old holds %v, want [a sub]", got)
	}
	if a := must[Attr](t)(f.Stat(ctx, "/old", KindDir)); a.Nlink != 2 {
		t.Fatalf("a version-1 directory has %d links, want 2 (it counts no subdirectories)", a.Nlink)
	}
	blob := func(key string) []byte {
		t.Helper()
		b, err := c.Read(ctx, f.ks, key, 0, client.BlobBytesMax)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	logLen := uint64(len(blob("/old/")) - HeaderBytes)
	if a := must[Attr](t)(f.Stat(ctx, "/old", KindDir)); a.Size != logLen {
		t.Fatalf("stat of a version-1 directory: size %d, want its log's %d", a.Size, logLen)
	}
	if err := f.Rename(ctx, "/old", "/moved", 0); err != nil {
		t.Fatal(err)
	}
	if b := blob("/moved/"); b[fslayout.OffVersion] != 1 || uint64(len(b)-HeaderBytes) != logLen {
		t.Fatalf("the moved directory: version %d, %d bytes; want version 1, %d", b[fslayout.OffVersion], len(b), HeaderBytes+logLen)
	}
	if got := names(t, ctx, f, "/moved"); !slices.Equal(got, []string{"a:file", "sub:dir"}) {
		t.Fatalf("/moved holds %v, want [a sub]", got)
	}
	if err := f.Rmdir(ctx, "/moved/sub"); err != nil {
		t.Fatal(err)
	}
	checkTree(t, ctx, c, f)

	must[Attr](t)(f.Mkdir(ctx, "/new", Owner{Mode: 0o755}))
	for _, n := range []string{"x", "y", "z"} {
		must[Attr](t)(f.Create(ctx, "/new/"+n, o))
	}
	if err := f.Rename(ctx, "/new", "/new2", 0); err != nil {
		t.Fatal(err)
	}
	b := blob("/new2/")
	log := 3 * (fslayout.RecordHeaderBytes + 1)
	if b[fslayout.OffVersion] != fslayout.DirVersion || len(b) != fslayout.DirLogOffset+log ||
		slices.ContainsFunc(b[HeaderBytes:fslayout.DirLogOffset], func(c byte) bool { return c != 0 }) {
		t.Fatalf("a new directory, renamed: version %d, %d bytes; want version %d, %d bytes, zeros up to its log",
			b[fslayout.OffVersion], len(b), fslayout.DirVersion, fslayout.DirLogOffset+log)
	}
	if a := must[Attr](t)(f.Stat(ctx, "/new2", KindDir)); a.Size != uint64(log) {
		t.Fatalf("stat of a new directory: size %d, want its log's %d", a.Size, log)
	}
	checkTree(t, ctx, c, f)
}
