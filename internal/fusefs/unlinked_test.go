package fusefs

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/testserver"
)

// unlinkedOpen checks unlinked.go's invariants through mount a, watched
// through mount b of the same keyspace on another node: a file unlinked,
// or replaced by a rename, while open through a is gone by name, reports
// no links, and is still read and written through its descriptors; b
// sees it under one hidden name only until a's last descriptor is closed.
// A file not open when unlinked leaves no hidden name.
func unlinkedOpen(t *testing.T, a, b string) {
	dir := "unlinked-" + filepath.Base(a)
	if err := os.Mkdir(filepath.Join(a, dir), 0o755); err != nil {
		t.Fatal(err)
	}
	path := func(m, name string) string { return filepath.Join(m, dir, name) }
	hidden := func() []string {
		t.Helper()
		es, err := os.ReadDir(filepath.Join(b, dir))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			if strings.HasPrefix(e.Name(), ".tyr-unlinked-") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	noneHidden := func(why string) {
		t.Helper()
		testserver.Eventually(t, 30*time.Second, why, func() (bool, string) {
			h := hidden()
			return len(h) == 0, strings.Join(h, " ")
		})
	}

	// Closed before the unlink: removed at once.
	if err := os.WriteFile(path(a, "closed"), []byte("closed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path(a, "closed")); err != nil {
		t.Fatal(err)
	}
	if h := hidden(); len(h) != 0 {
		t.Fatalf("a file closed before its unlink left hidden names %v", h)
	}

	for _, name := range []string{"written", "created-open", "replaced"} {
		want := []byte(strings.Repeat(name, 1000))
		var f, g *os.File
		var err error
		switch name {
		case "written":
			// Written and closed, then opened twice.
			if err = os.WriteFile(path(a, name), want, 0o644); err == nil {
				if f, err = os.OpenFile(path(a, name), os.O_RDWR, 0); err == nil {
					g, err = os.Open(path(a, name))
				}
			}
		case "created-open":
			// Unlinked before its first close: with the cache, a create
			// the mount deferred.
			if f, err = os.Create(path(a, name)); err == nil {
				_, err = f.Write(want)
			}
		case "replaced":
			// Replaced by a rename while open.
			if err = os.WriteFile(path(a, name), want, 0o644); err == nil {
				if f, err = os.OpenFile(path(a, name), os.O_RDWR, 0); err == nil {
					err = os.WriteFile(path(a, "new"), []byte("the new file"), 0o644)
				}
			}
		}
		// Closed before the mount's cleanup, should the test fail: the
		// unmount waits for the files open through it.
		for _, h := range []*os.File{f, g} {
			if h != nil {
				t.Cleanup(func() { _ = h.Close() })
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if name == "replaced" {
			if err := os.Rename(path(a, "new"), path(a, name)); err != nil {
				t.Fatalf("rename over %s while open: %v", name, err)
			}
			if b, err := os.ReadFile(path(a, name)); err != nil || string(b) != "the new file" {
				t.Fatalf("%s after the rename: %q, %v", name, b, err)
			}
		} else {
			if err := os.Remove(path(a, name)); err != nil {
				t.Fatalf("unlink %s while open: %v", name, err)
			}
			if _, err := os.Stat(path(a, name)); !os.IsNotExist(err) {
				t.Fatalf("stat of %s unlinked: %v, want ENOENT", name, err)
			}
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 {
			t.Fatalf("fstat of %s unlinked while open: links %d, %v; want 0 links", name, st.Nlink, err)
		}
		more := []byte("written after the unlink")
		if _, err := f.WriteAt(more, int64(len(want))); err != nil {
			t.Fatalf("write to %s unlinked while open: %v", name, err)
		}
		want = append(want, more...)
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync of %s unlinked while open: %v", name, err)
		}
		got := make([]byte, len(want)+10)
		n, err := f.ReadAt(got, 0)
		if n != len(want) || !bytes.Equal(got[:n], want) {
			t.Fatalf("read of %s unlinked while open: %d bytes, %v; want the %d written", name, n, err, len(want))
		}
		// The other mount sees one hidden name holding the bytes.
		h := hidden()
		if len(h) != 1 {
			t.Fatalf("%s unlinked while open: hidden names %v through the other mount, want one", name, h)
		}
		if b, err := os.ReadFile(filepath.Join(b, dir, h[0])); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("the other mount reads %s's hidden name: %d bytes, %v; want the %d written", name, len(b), err, len(want))
		}
		if g != nil {
			// Still open through f: the data stays.
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // the release is sent after close returns
			if n, err := f.ReadAt(got, 0); n != len(want) || !bytes.Equal(got[:n], want) {
				t.Fatalf("read of %s after one of its two descriptors closed: %d bytes, %v", name, n, err)
			}
			if h := hidden(); len(h) != 1 {
				t.Fatalf("%s with a descriptor still open: hidden names %v, want one", name, h)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close of %s unlinked while open: %v", name, err)
		}
		noneHidden(name + " removed at its last close")
	}
	if err := os.Remove(path(a, "replaced")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(a, dir)); err != nil {
		t.Fatalf("rmdir once every file is closed: %v", err)
	}
}
