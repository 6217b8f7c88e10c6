package fusefs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/testserver"
	"github.com/tyrstore/tyr/tyrfs"
)

// TestReadOnly checks a read-only mount (Options.ReadOnly): reads, stats,
// listings, symbolic links and locks work; every change fails with EROFS and leaves
// the tree as it was; and a change made elsewhere shows at the next open.
func TestReadOnly(t *testing.T) {
	needFUSE(t)
	c := testserver.Start(t).Client()
	newKeyspace(t, c, "readonly", 1, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := tyrfs.New(ctx, c, "readonly")
	if err != nil {
		t.Fatal(err)
	}
	owner := tyrfs.Owner{Mode: 0o644}
	if _, err := f.Mkdir(ctx, "/d", tyrfs.Owner{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Mkdir(ctx, "/d/sub", tyrfs.Owner{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	data := []byte("read me, do not change me")
	if _, err := f.WriteFile(ctx, "/d/f", owner, data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Symlink(ctx, "f", "/d/l", owner); err != nil {
		t.Fatal(err)
	}
	before, err := f.Stat(ctx, "/d/f", tyrfs.KindFile)
	if err != nil {
		t.Fatal(err)
	}
	mnt := mountWith(t, c, "readonly", Options{CacheTimeout: time.Second, ReadOnly: true})
	d := filepath.Join(mnt, "d")
	file := filepath.Join(d, "f")

	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %q, %v; want %q", got, err, data)
	}
	if fi, err := os.Stat(file); err != nil || fi.Size() != int64(len(data)) || fi.Mode().Perm() != 0o644 {
		t.Fatalf("stat: %v, %v; want %d bytes, mode 0644", fi, err, len(data))
	}
	if got, err := os.Readlink(filepath.Join(d, "l")); err != nil || got != "f" {
		t.Fatalf("readlink: %q, %v", got, err)
	}
	want := []string{"f", "l", "sub"}
	if got := listNames(t, mnt, "d"); !slices.Equal(got, want) {
		t.Fatalf("listing: %v, want %v", got, want)
	}
	// Advisory locks take nothing from the files: a read-only mount locks.
	lf, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("flock on a read-only mount: %v", err)
	}
	if err := syscall.FcntlFlock(lf.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_RDLCK, Whence: 0, Len: 0}); err != nil {
		t.Errorf("fcntl read lock on a read-only mount: %v", err)
	}
	if err := lf.Close(); err != nil {
		t.Fatal(err)
	}

	changes := []struct {
		what string
		do   func() error
	}{
		{"create", func() error { return os.WriteFile(filepath.Join(d, "new"), data, 0o644) }},
		{"open for writing", func() error {
			w, err := os.OpenFile(file, os.O_WRONLY, 0)
			if err == nil {
				w.Close()
			}
			return err
		}},
		{"truncate", func() error { return os.Truncate(file, 1) }},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(d, "dir"), 0o755) }},
		{"symlink", func() error { return os.Symlink("f", filepath.Join(d, "l2")) }},
		{"mkfifo", func() error { return syscall.Mkfifo(filepath.Join(d, "fifo"), 0o644) }},
		{"unlink", func() error { return os.Remove(file) }},
		{"rmdir", func() error { return os.Remove(filepath.Join(d, "sub")) }},
		{"rename", func() error { return os.Rename(file, filepath.Join(d, "g")) }},
		{"chmod", func() error { return os.Chmod(file, 0o600) }},
		{"chown", func() error { return os.Chown(file, 1, 1) }},
		{"utimes", func() error { return os.Chtimes(file, time.Unix(1, 0), time.Unix(1, 0)) }},
	}
	for _, ch := range changes {
		if err := ch.do(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s on a read-only mount: %v, want EROFS", ch.what, err)
		}
	}
	after, err := f.Stat(ctx, "/d/f", tyrfs.KindFile)
	if err != nil {
		t.Fatal(err)
	}
	if after.Version != before.Version || after.Mode != before.Mode || after.Mtime != before.Mtime {
		t.Errorf("the file changed: %+v, was %+v", after, before)
	}
	es, err := f.Readdir(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the directory changed: %v, want %v", got, want)
	}

	// A change made elsewhere shows at the next open (close-to-open).
	changed := []byte("changed elsewhere")
	if err := f.WriteAt(ctx, "/d/f", 0, changed); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(file); err != nil || !bytes.HasPrefix(got, changed) {
		t.Errorf("read after a change elsewhere: %q, %v; want it to begin %q", got, err, changed)
	}
}
