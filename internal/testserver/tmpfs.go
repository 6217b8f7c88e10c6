package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs file system of size bytes on a fresh directory and
// returns its path; it is unmounted when the test ends. Mounting needs
// root (as in CI): without it the test is skipped, saying why.
func Tmpfs(t testing.TB, size uint64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small file system needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("mount a tmpfs of %d bytes on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// MoveOnto moves the contents of dir onto a fresh tmpfs of size bytes
// mounted at dir itself (the old contents are copied, then the mount
// hides them). Whatever uses dir must be stopped.
func MoveOnto(t testing.TB, dir string, size uint64) {
	t.Helper()
	staged := Tmpfs(t, size)
	if out, err := exec.Command("cp", "-a", dir+"/.", staged).CombinedOutput(); err != nil {
		t.Fatalf("copy %s onto the tmpfs: %v: %s", dir, err, strings.TrimSpace(string(out)))
	}
	if err := syscall.Mount(staged, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s over %s: %v", staged, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// StartIn is Start on the data directory dataDir, which the test made.
func StartIn(t testing.TB, dataDir string, args ...string) *Server {
	t.Helper()
	s := &Server{t: t, DataDir: dataDir, Args: args}
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}
