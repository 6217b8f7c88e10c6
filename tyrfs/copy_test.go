package tyrfs

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// Import then Export give back the tree: names, kinds, permission bits,
// sizes, contents, link targets and mtimes; running either again copies
// nothing (resumable), and a file changed since is copied again.
func TestImportExport(t *testing.T) {
	ctx, _, f := newFS(t)
	src := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef"), (5<<20)/16+3) // over one request
	files := map[string][]byte{"a/empty": nil, "a/b/small": []byte("small file"), "big": big}
	if err := os.MkdirAll(filepath.Join(src, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(src, name), data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("b/small", filepath.Join(src, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "a", "b"), 0o751); err != nil {
		t.Fatal(err)
	}
	stamp := time.Date(2020, 1, 2, 3, 4, 5, 6789, time.UTC)
	for _, name := range []string{"a/empty", "a/b/small", "big", "a/b", "a"} {
		if err := os.Chtimes(filepath.Join(src, name), stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}

	st, err := f.Import(ctx, src, "/pre/fix", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 3 || st.Symlinks != 1 || st.Dirs != 3 || st.Bytes != uint64(len(big)+10) {
		t.Fatalf("import: %v", st)
	}
	if _, data, err := f.Fetch(ctx, "/pre/fix/big"); err != nil || !bytes.Equal(data, big) {
		t.Fatalf("fetch of the big file: %d bytes, %v", len(data), err)
	}
	if a := must[Attr](t)(f.Stat(ctx, "/pre/fix/a/b", KindDir)); a.Mode != 0o751 || a.Mtime != stamp.UnixNano() {
		t.Fatalf("imported directory: %+v", a)
	}
	if st, err = f.Import(ctx, src, "/pre/fix", nil); err != nil || st.Files != 0 || st.Unchanged != 3 {
		t.Fatalf("second import: %v, %v", st, err)
	}

	dst := t.TempDir()
	if st, err = f.Export(ctx, "/pre/fix", dst, nil); err != nil || st.Files != 3 || st.Symlinks != 1 {
		t.Fatalf("export: %v, %v", st, err)
	}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		wi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		gi, err := os.Lstat(filepath.Join(dst, rel))
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if wi.Mode() != gi.Mode() || (!d.IsDir() && wi.Size() != gi.Size()) || !wi.ModTime().Equal(gi.ModTime()) {
			t.Fatalf("%s: exported as %v %d %v, want %v %d %v", rel, gi.Mode(), gi.Size(), gi.ModTime(), wi.Mode(), wi.Size(), wi.ModTime())
		}
		switch {
		case wi.Mode()&fs.ModeSymlink != 0:
			if l, err := os.Readlink(filepath.Join(dst, rel)); err != nil || l != "b/small" {
				t.Fatalf("%s: link to %q, %v", rel, l, err)
			}
		case wi.Mode().IsRegular():
			if b, err := os.ReadFile(filepath.Join(dst, rel)); err != nil || !bytes.Equal(b, files[rel]) {
				t.Fatalf("%s: %d bytes, %v", rel, len(b), err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st, err = f.Export(ctx, "/pre/fix", dst, nil); err != nil || st.Files != 0 || st.Unchanged != 3 {
		t.Fatalf("second export: %v, %v", st, err)
	}

	// A file changed since (same size, new mtime) is copied again.
	if err := os.WriteFile(filepath.Join(src, "a/b/small"), []byte("SMALL FILE"), 0o640); err != nil {
		t.Fatal(err)
	}
	if st, err = f.Import(ctx, src, "/pre/fix", nil); err != nil || st.Files != 1 || st.Unchanged != 2 {
		t.Fatalf("import after a change: %v, %v", st, err)
	}
	if _, data, _ := f.Fetch(ctx, "/pre/fix/a/b/small"); string(data) != "SMALL FILE" {
		t.Fatalf("after the re-import: %q", data)
	}
}

// TestImportExportCluster: on 3 nodes at replication 1, a tree of many
// small files in several directories, copied by CopyWorkers at once,
// comes back whole from Export (contents, modes, mtimes), a second Import
// copies nothing, and a copy's failure stops the copy with its error.
func TestImportExportCluster(t *testing.T) {
	lc := testserver.UpCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := clusterFS(ctx, t, lc)

	src := t.TempDir()
	stamp := time.Date(2021, 5, 6, 7, 8, 9, 123456789, time.UTC)
	want := map[string][]byte{}
	for d := range 5 {
		dir := filepath.Join(src, fmt.Sprintf("d%d", d))
		if err := os.Mkdir(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		for i := range 40 {
			rel := fmt.Sprintf("d%d/f%d", d, i)
			data := bytes.Repeat([]byte(rel+";"), i*20)
			if err := os.WriteFile(filepath.Join(src, rel), data, os.FileMode(0o600+i%8*0o10)); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(filepath.Join(src, rel), stamp, stamp.Add(time.Duration(i)*time.Second)); err != nil {
				t.Fatal(err)
			}
			want[rel] = data
		}
	}
	want["d0/big"] = bytes.Repeat([]byte("big;"), (5<<20)/4)
	if err := os.WriteFile(filepath.Join(src, "d0/big"), want["d0/big"], 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := f.Import(ctx, src, "/in", nil)
	if err != nil {
		t.Fatal(err)
	}
	nodes, place := map[int]bool{}, lc.Placer()
	for rel := range want {
		nodes[place.Holders("tfs", "/in/"+rel, 1)[0]] = true
	}
	if len(nodes) < 2 {
		t.Fatalf("the files are on nodes %v: want them spread over 2 or more", nodes)
	}
	if st.Files != len(want) || st.Dirs != 6 {
		t.Fatalf("import: %v, want %d files in 6 dirs", st, len(want))
	}
	if st, err := f.Import(ctx, src, "/in", nil); err != nil || st.Files != 0 || st.Unchanged != len(want) {
		t.Fatalf("second import: %v, %v", st, err)
	}
	dst := t.TempDir()
	if st, err := f.Export(ctx, "/in", dst, nil); err != nil || st.Files != len(want) {
		t.Fatalf("export: %v, %v", st, err)
	}
	for rel, data := range want {
		wi := must[fs.FileInfo](t)(os.Stat(filepath.Join(src, rel)))
		gi, err := os.Stat(filepath.Join(dst, rel))
		if err != nil {
			t.Fatal(err)
		}
		got := must[[]byte](t)(os.ReadFile(filepath.Join(dst, rel)))
		if !bytes.Equal(got, data) || gi.Mode() != wi.Mode() || !gi.ModTime().Equal(wi.ModTime()) {
			t.Fatalf("%s: exported %d bytes, %v, %v; want %d, %v, %v", rel, len(got), gi.Mode(), gi.ModTime(), len(data), wi.Mode(), wi.ModTime())
		}
	}

	// A name that is a directory in the file system and a file locally
	// fails the import with EEXIST.
	must[Attr](t)(f.Mkdir(ctx, "/clash", Owner{Mode: 0o755}))
	must[Attr](t)(f.Mkdir(ctx, "/clash/d3", Owner{Mode: 0o755}))
	must[Attr](t)(f.Mkdir(ctx, "/clash/d3/f7", Owner{Mode: 0o755}))
	if _, err := f.Import(ctx, src, "/clash", nil); Errno(err) != syscall.EEXIST {
		t.Fatalf("import over a directory: %v, want EEXIST", err)
	}
}

// clusterFS is a file system in a new keyspace "tfs" at replication 1 on
// the cluster lc, through a client of its first node.
func clusterFS(ctx context.Context, t *testing.T, lc *testserver.LocalCluster) *FS {
	t.Helper()
	c := must[*client.Client](t)(client.Dial(lc.Endpoints[0]))
	t.Cleanup(func() { _ = c.Close() })
	cfg := client.DefaultKeyspaceConfig()
	cfg.Replication = 1
	if _, err := c.CreateKeyspace(ctx, "tfs", cfg); err != nil {
		t.Fatal(err)
	}
	return must[*FS](t)(New(ctx, c, "tfs"))
}
