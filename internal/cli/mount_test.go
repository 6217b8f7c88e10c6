package cli

// TestMountCommand runs `tyr mount` as a user does, against a real server:
// it mounts (creating the keyspace with --create), serves a write that
// lands in the blob layout of internal/tyrfs, unmounts and exits 0 on
// SIGTERM and when fusermount3 -u unmounts it, and refuses a missing
// keyspace without --create. Run: go test -run TestMountCommand ./internal/cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
	"github.com/tyrstore/tyr/tyrfs"
)

// mounted reports whether dir is a mount point, from /proc/self/mountinfo.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	_, err := mountType(dir)
	if err != nil && !errors.Is(err, errNotMounted) {
		t.Fatal(err)
	}
	return err == nil
}

// startMount starts `tyr mount` and waits for it to say it mounted.
func startMount(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testserver.Binary(t), append([]string{"mount"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := testserver.StartTied(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case s := <-line:
		if !strings.HasPrefix(s, "mounted ") {
			t.Fatalf("tyr mount printed %q", s)
		}
	case <-time.After(time.Minute):
		t.Fatal("tyr mount did not mount within a minute")
	}
	return cmd
}

// waitMountExit waits for cmd to exit and fails unless it exits 0.
func waitMountExit(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := mountExit(t, cmd); err != nil {
		t.Fatalf("tyr mount: %v", err)
	}
}

// mountExit waits up to a minute for cmd to exit, and returns how it
// exited.
func mountExit(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("tyr mount did not exit within a minute")
		return nil
	}
}

// mountSetup skips the test without FUSE, and starts a server and makes
// a mount point, lazily unmounted when the test ends if still mounted.
func mountSetup(t *testing.T) (*testserver.Server, string) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE device: %v", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skipf("no fusermount3 (package fuse3; make deps installs it): %v", err)
	}
	s := testserver.Start(t)
	dir := t.TempDir()
	t.Cleanup(func() {
		if mounted(t, dir) {
			_ = exec.Command("fusermount3", "-u", "-z", dir).Run()
		}
	})
	return s, dir
}

func TestMountCommand(t *testing.T) {
	s, dir := mountSetup(t)
	c := s.Client()

	r := testserver.Run(t, "mount", "--endpoint", s.Endpoint, "no-such-keyspace", dir)
	if r.Exit == 0 || !strings.Contains(r.Stderr, "not found") {
		t.Fatalf("mount of a missing keyspace: exit %d, %q", r.Exit, r.Stderr)
	}
	r = testserver.Run(t, "mount", "--endpoint", s.Endpoint, "--create", "--lock-lease", "100ms", "cli-mount", dir)
	if r.Exit == 0 || !strings.Contains(r.Stderr, "--lock-lease: lock lease 100ms: below 1s") || mounted(t, dir) {
		t.Fatalf("mount with a lock lease below the least: exit %d, %q", r.Exit, r.Stderr)
	}

	cmd := startMount(t, "--endpoint", s.Endpoint, "--create", "cli-mount", dir)
	if !mounted(t, dir) {
		t.Fatalf("%s is not a mount point", dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("hello, tyr"), 0o640); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := c.Read(ctx, "cli-mount", "/hello", 0, 1<<20)
	if err != nil || len(b) < tyrfs.HeaderBytes || string(b[tyrfs.HeaderBytes:]) != "hello, tyr" {
		t.Fatalf("blob /hello: %q, %v", b, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitMountExit(t, cmd)
	if mounted(t, dir) {
		t.Fatalf("%s still mounted after SIGTERM", dir)
	}

	// Mounted again, read-only: the file reads, and a write is refused.
	cmd = startMount(t, "--endpoint", s.Endpoint, "--read-only", "cli-mount", dir)
	if got, err := os.ReadFile(filepath.Join(dir, "hello")); err != nil || string(got) != "hello, tyr" {
		t.Fatalf("after a remount: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("changed"), 0o640); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("a write through a mount made with --read-only: %v, want EROFS", err)
	}
	if out, err := exec.Command("fusermount3", "-u", dir).CombinedOutput(); err != nil {
		t.Fatalf("fusermount3 -u: %v: %s", err, out)
	}
	waitMountExit(t, cmd)
	if _, err := os.Stat(filepath.Join(dir, "hello")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the mount point still shows the file system: %v", err)
	}
}

// TestMountCommandDrains checks that SIGTERM commits what the mount holds
// before it unmounts: a file created with O_EXCL whose write is held, and
// one created without O_EXCL (deferred), both still open, are in the
// cluster while the unmount waits for them to close, and a write after
// the signal is committed before it returns.
// Run: go test -run TestMountCommandDrains ./internal/cli
func TestMountCommandDrains(t *testing.T) {
	s, dir := mountSetup(t)
	c := s.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// contents returns file name's bytes in the cluster, or ok false if
	// it does not exist.
	contents := func(name string) (string, bool) {
		t.Helper()
		b, err := c.Read(ctx, "cli-drain", "/"+name, 0, 1<<20)
		if errors.Is(err, client.ErrNotFound) {
			return "", false
		}
		if err != nil || len(b) < tyrfs.HeaderBytes {
			t.Fatalf("blob /%s: %q, %v", name, b, err)
		}
		return string(b[tyrfs.HeaderBytes:]), true
	}

	cmd := startMount(t, "--endpoint", s.Endpoint, "--create", "--hold-writes", "1h", "cli-drain", dir)
	held, err := os.OpenFile(filepath.Join(dir, "held"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	deferred, err := os.Create(filepath.Join(dir, "deferred"))
	if err != nil {
		t.Fatal(err)
	}
	// Closed before the mount goes, whatever happens: a close is what the
	// unmount waits for.
	t.Cleanup(func() { held.Close(); deferred.Close() })
	if _, err := held.WriteString("held"); err != nil {
		t.Fatal(err)
	}
	if _, err := deferred.WriteString("deferred"); err != nil {
		t.Fatal(err)
	}
	if got, ok := contents("held"); !ok || got != "" {
		t.Fatalf("before the signal, held is %q (exists %v), want the empty file its create made", got, ok)
	}
	if got, ok := contents("deferred"); ok {
		t.Fatalf("before the signal, the deferred create is already committed: %q", got)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The unmount fails while the files are open, and is tried again.
	deadline := time.Now().Add(5 * time.Second)
	for {
		h, _ := contents("held")
		d, _ := contents("deferred")
		if h == "held" && d == "deferred" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after SIGTERM, with the files open: held %q, deferred %q", h, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := held.WriteString(" and after"); err != nil {
		t.Fatal(err)
	}
	if got, _ := contents("held"); got != "held and after" {
		t.Fatalf("a write after the drain is not committed when it returns: %q", got)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if err := deferred.Close(); err != nil {
		t.Fatal(err)
	}
	waitMountExit(t, cmd)
	if mounted(t, dir) {
		t.Fatalf("%s still mounted after SIGTERM and the closes", dir)
	}
}

// TestMountCommandDrainFails checks that tyr mount exits non-zero, naming
// the file, when what it held cannot be committed at SIGTERM: a create
// deferred in a keyspace dropped meanwhile.
// Run: go test -run TestMountCommandDrainFails ./internal/cli
func TestMountCommandDrainFails(t *testing.T) {
	s, dir := mountSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.Command(testserver.Binary(t), "mount", "--endpoint", s.Endpoint, "--create", "--hold-writes", "1h", "cli-drain-fails", dir)
	var stderr testserver.SyncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := testserver.StartTied(cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _ = io.Copy(io.Discard, out)
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	testserver.Eventually(t, time.Minute, "the mount", func() (bool, string) { return mounted(t, dir), dir })
	f, err := os.Create(filepath.Join(dir, "lost"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteString("lost"); err != nil {
		t.Fatal(err)
	}
	if err := s.Client().DropKeyspace(ctx, "cli-drain-fails"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The drain fails at once; the unmount waits for the close.
	testserver.Eventually(t, time.Minute, "the drain's error", func() (bool, string) {
		return strings.Contains(stderr.String(), "trying again"), stderr.String()
	})
	if err := f.Close(); err == nil {
		t.Error("close of a file whose create failed succeeded")
	}
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("tyr mount exited with %v, want a non-zero exit", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("tyr mount did not exit within a minute of the close")
	}
	if msg := stderr.String(); !strings.Contains(msg, "commit what") || !strings.Contains(msg, "lost") {
		t.Fatalf("tyr mount's errors do not name the file whose create failed: %q", msg)
	}
}

// TestMountCommandLazyUnmount checks a lazy unmount from outside
// (fusermount3 -u -z) with a file still open whose writes the mount holds:
// the mount point goes at once, the file keeps working, its close commits
// what it wrote, and then tyr mount exits 0.
// Run: go test -run TestMountCommandLazyUnmount ./internal/cli
func TestMountCommandLazyUnmount(t *testing.T) {
	s, dir := mountSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := startMount(t, "--endpoint", s.Endpoint, "--create", "--hold-writes", "1h", "cli-lazy", dir)
	f, err := os.OpenFile(filepath.Join(dir, "held"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteString("before"); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("fusermount3", "-u", "-z", dir).CombinedOutput(); err != nil {
		t.Fatalf("fusermount3 -u -z: %v: %s", err, out)
	}
	if mounted(t, dir) {
		t.Fatalf("%s still a mount point after a lazy unmount", dir)
	}
	if _, err := f.WriteString(", after"); err != nil {
		t.Fatalf("a write to a file open across the lazy unmount: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("tyr mount exited with a file still open: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("tyr mount: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("tyr mount did not exit within a minute of the last close")
	}
	b, err := s.Client().Read(ctx, "cli-lazy", "/held", 0, 1<<20)
	if err != nil || len(b) < tyrfs.HeaderBytes || string(b[tyrfs.HeaderBytes:]) != "before, after" {
		t.Fatalf("blob /held after the close: %q, %v; want \"before, after\"", b, err)
	}
}

// A file unlinked while open through tyr mount has a hidden name until
// its last close (internal/fusefs, unlinked.go). If tyr mount stops while
// the file is still open, its unmount fails (the file is busy), and it
// exits having removed the hidden file, which no descriptor can use any
// more, and given up the lock held on it.
func TestMountCommandRemovesUnlinked(t *testing.T) {
	s, dir := mountSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := startMount(t, "--endpoint", s.Endpoint, "--create", "cli-unlinked", dir)
	f, err := os.Create(filepath.Join(dir, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteString("scratch"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "tmp")); err != nil {
		t.Fatal(err)
	}
	hidden := func() []string {
		t.Helper()
		infos, _, err := s.Client().List(ctx, "cli-unlinked", "/", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, b := range infos {
			if strings.Contains(b.Key, "/.tyr-unlinked-") {
				out = append(out, b.Key)
			}
		}
		return out
	}
	if h := hidden(); len(h) != 1 {
		t.Fatalf("blobs of the file unlinked while open: %v, want one hidden name", h)
	}
	// A lock held through the mount as it stops is given up as it exits,
	// not left for its lease to end.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	lockTables := func() int {
		t.Helper()
		infos, _, err := s.Client().List(ctx, "cli-unlinked", "&", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(infos)
	}
	if n := lockTables(); n != 1 {
		t.Fatalf("%d lock tables with a file locked, want 1", n)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := mountExit(t, cmd); err == nil {
		t.Fatal("tyr mount exited 0 with a file still open through it, want its unmount's error")
	}
	if h := hidden(); len(h) != 0 {
		t.Fatalf("hidden names left once tyr mount stopped: %v", h)
	}
	if n := lockTables(); n != 0 {
		t.Fatalf("%d lock tables left once tyr mount stopped", n)
	}
}

// TestMountCommandLockLease checks the leases of a mount's locks: a lock
// taken through `tyr mount --lock-lease 2s` holds against other holders
// past its first lease, as the mount renews it; once the mount is killed
// with SIGKILL, it is free again within a lease or so.
func TestMountCommandLockLease(t *testing.T) {
	s, dir := mountSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := startMount(t, "--endpoint", s.Endpoint, "--create", "--lock-lease", "2s", "cli-locks", dir)
	f, err := os.Create(filepath.Join(dir, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	fsys, err := tyrfs.New(ctx, s.Client(), "cli-locks")
	if err != nil {
		t.Fatal(err)
	}
	take := func() error {
		l := tyrfs.Lock{Holder: 99, Owner: 1, Flock: true, Write: true, End: tyrfs.LockOffsetMax,
			Expires: time.Now().Add(time.Minute).UnixNano()}
		_, _, err := fsys.SetLock(ctx, "/shared", l, false)
		return err
	}
	if err := take(); tyrfs.Errno(err) != syscall.EAGAIN {
		t.Fatalf("lock of a file flock'ed through the mount: %v, want EAGAIN", err)
	}
	time.Sleep(3 * time.Second) // past the lease the lock was taken with
	if err := take(); tyrfs.Errno(err) != syscall.EAGAIN {
		t.Fatalf("lock of a file flock'ed through the mount, a lease later: %v, want EAGAIN (renewed)", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	testserver.Eventually(t, 30*time.Second, "the lock of the killed mount free", func() (bool, string) {
		err := take()
		if err != nil && tyrfs.Errno(err) != syscall.EAGAIN {
			t.Fatal(err)
		}
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("the killed mount's lock was free %v after the kill", time.Since(killed).Round(time.Millisecond))
}
