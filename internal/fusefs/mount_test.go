package fusefs

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/tyrfs"
)

// needFUSE skips the test when this machine cannot mount FUSE file
// systems: no /dev/fuse, or no fusermount3 (scripts/deps.sh installs it).
func needFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE device: %v", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skipf("no fusermount3 (package fuse3; make deps installs it): %v", err)
	}
}

// newKeyspace creates keyspace ks with the given replication. Without
// sync, commits are acknowledged before they reach the disk: the tests
// here check file-system semantics, not durability, and run faster.
func newKeyspace(t *testing.T, c *client.Client, ks string, replication uint32, sync bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := client.DefaultKeyspaceConfig()
	cfg.Replication = replication
	cfg.Sync = sync
	if _, err := c.CreateKeyspace(ctx, ks, cfg); err != nil {
		t.Fatal(err)
	}
}

// mount mounts keyspace ks through c in a fresh directory and returns it.
// The mount is unmounted when the test ends, passed or failed.
func mount(t *testing.T, c *client.Client, ks string) string {
	t.Helper()
	return mountWith(t, c, ks, Options{})
}

// mountWith is mount with options o.
func mountWith(t *testing.T, c *client.Client, ks string, o Options) string {
	t.Helper()
	needFUSE(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := tyrfs.New(ctx, c, ks)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, err := Mount(dir, f, "tyr:"+ks, o)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		// A process of the test may still hold a file open for a moment;
		// then the unmount is lazy, so the directory is released anyway.
		for range 10 {
			if err := srv.Unmount(); err == nil {
				srv.Wait()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out, err := exec.Command("fusermount3", "-u", "-z", dir).CombinedOutput(); err != nil {
			t.Errorf("unmount %s: %v: %s", dir, err, out)
		}
		srv.Wait()
	})
	return dir
}
