package cli

// The mount helper and --background: TestParseHelperArgs maps mount(8)'s
// calls to tyr mount's flags and refuses what it does not know;
// TestMountHelper mounts through the helper as mount(8) runs it, and
// through mount(8) itself from an fstab line, remounts read-only and
// back, and unmounts.
// Run: go test -run 'TestParseHelperArgs|TestMountHelper' ./internal/cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/testserver"
	"github.com/tyrstore/tyr/tyrfs"
)

func TestParseHelperArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want helperMount
		err  string
	}{
		{args: []string{"tyr:data", "/mnt/data", "-o", "rw,endpoint=10.0.0.1:7420+10.0.0.2:7420,cache=0,dir_cache=5s,create,_netdev,x-systemd.automount"},
			want: helperMount{keyspace: "data", dir: "/mnt/data", endpoint: "10.0.0.1:7420,10.0.0.2:7420",
				flags: []string{"--cache=0", "--dir-cache=5s", "--create"}}},
		{args: []string{"data", "/mnt/data", "-oro,local_locks,log=/var/log/tyrfs.log", "-t", "fuse.tyrfs"},
			want: helperMount{keyspace: "data", dir: "/mnt/data", readOnly: true, flags: []string{"--local-locks", "--log=/var/log/tyrfs.log"}}},
		// A remount as mount(8) passes it: the mount's options, then the asked ones.
		{args: []string{"tyr:data", "/mnt/data", "-o", "rw,nosuid,nodev,relatime,remount,ro,user_id=0,group_id=0,default_permissions,max_read=131072"},
			want: helperMount{keyspace: "data", dir: "/mnt/data", readOnly: true, remount: true}},
		{args: []string{"tyr:data", "/mnt/data", "-fv"}, want: helperMount{keyspace: "data", dir: "/mnt/data", fake: true}},
		{args: []string{"tyr:data", "/mnt/data", "-o", "cache=1s,bogus"}, err: `unknown option "bogus"`},
		{args: []string{"tyr:data", "/mnt/data", "-o", "endpoint"}, err: `unknown option "endpoint"`},
		{args: []string{"tyr:data", "/mnt/data", "-x"}, err: "unknown flag -x"},
		{args: []string{"tyr:data"}, err: "1 arguments besides flags"},
		{args: []string{"tyr:", "/mnt/data"}, err: "names no keyspace"},
		{args: []string{"tyr:data", "/mnt/data", "-o"}, err: "-o without its value"},
	} {
		got, err := parseHelperArgs(c.args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error with %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
	m := helperMount{keyspace: "data", dir: "/mnt/data", endpoint: "h:1,h:2", flags: []string{"--create"}, readOnly: true}
	want := []string{"--endpoint", "h:1,h:2", "mount", "--background", "--create", "--read-only", "--", "data", "/mnt/data"}
	if got := m.mountArgs(); !reflect.DeepEqual(got, want) {
		t.Errorf("mountArgs: %q, want %q", got, want)
	}
	if got := unescapeMountinfo(`/mnt/a\040b\134c`); got != `/mnt/a b\c` {
		t.Errorf("unescapeMountinfo: %q", got)
	}
}

// helperPID returns the process the helper said serves the mount.
func helperPID(t *testing.T, stdout string) int {
	t.Helper()
	_, rest, ok := strings.Cut(stdout, "(process ")
	pid, err := strconv.Atoi(strings.SplitN(rest, ")", 2)[0])
	if !ok || err != nil || pid <= 0 {
		t.Fatalf("the helper printed %q, want the mount's process", stdout)
	}
	return pid
}

// awaitExit waits up to a minute for process pid to end.
func awaitExit(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(b), ") Z ") {
			return // gone, or ended and not yet reaped by init
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mount's process %d still runs a minute after the unmount", pid)
		}
	}
}

func TestMountHelper(t *testing.T) {
	s, dir := mountSetup(t)
	c := s.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	helper := filepath.Join(t.TempDir(), "tyrfs")
	if err := os.Symlink(testserver.Binary(t), helper); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(helper, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}
	endpoint := "endpoint=" + s.Endpoint

	// Refused: an unknown option, and a keyspace that does not exist;
	// neither mounts nor makes a keyspace.
	if code, _, stderr := run("tyr:helper-ks", dir, "-o", endpoint+",create,no_such_option"); code == 0 ||
		!strings.Contains(stderr, `unknown option "no_such_option"`) || mounted(t, dir) {
		t.Fatalf("an unknown option: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run("tyr:helper-ks", dir, "-o", endpoint); code == 0 || !strings.Contains(stderr, "not found") || mounted(t, dir) {
		t.Fatalf("a missing keyspace without create: exit %d, %q", code, stderr)
	}
	if _, err := c.Keyspace(ctx, "helper-ks"); err == nil {
		t.Fatal("a refused mount made the keyspace")
	}
	if r := testserver.Run(t, "mount", "--endpoint", s.Endpoint, "--log", "x.log", "helper-ks", dir); r.Exit == 0 ||
		!strings.Contains(r.Stderr, "--log: only with --background") {
		t.Fatalf("--log without --background: exit %d, %q", r.Exit, r.Stderr)
	}

	// Mounted as mount.fuse3 runs the helper: it returns once mounted, and
	// a process of its own serves the mount.
	logFile := filepath.Join(t.TempDir(), "mount.log")
	code, stdout, stderr := run("tyr:helper-ks", dir, "-o", "rw,"+endpoint+",create,cache=0,log="+logFile+",dev,suid")
	if code != 0 || !mounted(t, dir) {
		t.Fatalf("the helper's mount: exit %d, %q, %q; mounted %v", code, stdout, stderr, mounted(t, dir))
	}
	pid := helperPID(t, stdout)
	hello := filepath.Join(dir, "hello")
	if err := os.WriteFile(hello, []byte("hello, fstab"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := c.Read(ctx, "helper-ks", "/hello", 0, 1<<20); err != nil || string(b[tyrfs.HeaderBytes:]) != "hello, fstab" {
		t.Fatalf("blob /hello: %q, %v", b, err)
	}

	// Remounted read-only as mount(8) asks it, with the mount's own
	// options first: writes fail with EROFS, reads work; then writable.
	if code, _, stderr := run("tyr:helper-ks", dir, "-o", "rw,nosuid,nodev,relatime,remount,ro,user_id=0,group_id=0,default_permissions"); code != 0 {
		t.Fatalf("remount ro: exit %d, %q", code, stderr)
	}
	if err := os.WriteFile(hello, []byte("changed"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("a write after remount,ro: %v, want EROFS", err)
	}
	if got, err := os.ReadFile(hello); err != nil || string(got) != "hello, fstab" {
		t.Fatalf("a read after remount,ro: %q, %v", got, err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Flags&(syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV) !=
		syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV {
		t.Fatalf("statfs flags after remount,ro: %#x, %v; want read-only, nosuid and nodev", st.Flags, err)
	}
	if code, _, stderr := run("tyr:helper-ks", dir, "-o", "remount,rw"); code != 0 {
		t.Fatalf("remount rw: exit %d, %q", code, stderr)
	}
	if err := os.WriteFile(hello, []byte("changed"), 0o644); err != nil {
		t.Fatalf("a write after remount,rw: %v", err)
	}
	// A remount of what is no TýrFS mount changes nothing.
	other := t.TempDir()
	if code, _, stderr := run("tyr:helper-ks", other, "-o", "remount,ro"); code == 0 || !strings.Contains(stderr, "not a mount point") {
		t.Fatalf("remount of a plain directory: exit %d, %q", code, stderr)
	}

	// Unmounted, the mount's process commits and ends.
	if out, err := exec.Command("fusermount3", "-u", dir).CombinedOutput(); err != nil {
		t.Fatalf("fusermount3 -u: %v: %s", err, out)
	}
	awaitExit(t, pid)
	if b, err := c.Read(ctx, "helper-ks", "/hello", 0, 1<<20); err != nil || string(b[tyrfs.HeaderBytes:]) != "changed" {
		t.Fatalf("blob /hello after the unmount: %q, %v", b, err)
	}
	if _, err := os.Stat(logFile); err != nil {
		t.Fatalf("the mount's log: %v", err)
	}

	// Through mount(8), from an fstab line, in a mount namespace of the
	// test's own where the helper is on the standard PATH.
	if os.Geteuid() != 0 {
		t.Skip("mount(8) and a mount namespace need root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("no unshare: %v", err)
	}
	fstab := filepath.Join(t.TempDir(), "fstab")
	line := fmt.Sprintf("tyr:helper-ks %s fuse.tyrfs %s,noauto,_netdev 0 0\n", dir, endpoint)
	if err := os.WriteFile(fstab, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `set -e
mount --bind "$1" /usr/local/sbin
mount -T "$2" "$3"
cat "$3/hello"; echo
mount -o remount,ro "$3"
if (echo x >"$3/new") 2>/dev/null; then echo "wrote read-only"; fi
mount -o remount,rw "$3"
echo x >"$3/new"
umount "$3"
echo done`
	out, err := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
		filepath.Dir(helper), fstab, dir).CombinedOutput()
	// mount(8) passes on what the helper prints.
	if _, rest, ok := strings.Cut(string(out), "\n"); err != nil || !strings.HasPrefix(string(out), "mounted helper-ks at "+dir) ||
		!ok || rest != "changed\ndone\n" {
		t.Fatalf("mount(8) from fstab, remount ro and rw, umount: %v: %q", err, out)
	}
	if _, err := c.Read(ctx, "helper-ks", "/new", 0, 1<<20); err != nil {
		t.Fatalf("blob /new, written through the mount mount(8) made: %v", err)
	}
}
