package cli

// Mounting outside the foreground: `tyr mount --background`, and the
// mount(8) helper, so that a TýrFS mount can come from /etc/fstab or
// `mount -t fuse.tyrfs`, and be remounted read-only and back.
//
// mount(8) runs, for a file system of type fuse.tyrfs, /sbin/mount.fuse.tyrfs
// if it exists, else mount.fuse3, which runs the program named by the
// type's second part, tyrfs, found on the standard PATH. Either way the
// program gets SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS]. tyr acts as that
// program when it runs under either name (a link to it): it maps the
// options to `tyr mount --background`, or, for a remount, changes the
// mount's flags with mount(2) itself (the kernel's FUSE keeps serving).

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/tyrstore/tyr/internal/fusefs"
)

// mountFSType is the type of a TýrFS mount in /proc/self/mountinfo and in
// /etc/fstab: FUSE's, with the mount's subtype.
const mountFSType = "fuse." + fusefs.Subtype

// helperNames are the names under which tyr is the mount helper: the
// program mount.fuse3 runs, and the helper mount(8) looks for first.
var helperNames = []string{fusefs.Subtype, "mount." + mountFSType}

// IsMountHelper reports whether a program run as argv0 is the mount
// helper: tyr, through a link named tyrfs or mount.fuse.tyrfs.
func IsMountHelper(argv0 string) bool { return slices.Contains(helperNames, filepath.Base(argv0)) }

// MountHelper runs the mount helper on its arguments (SOURCE MOUNTPOINT
// [-sfnv] [-o OPTIONS] [-t TYPE]) and returns its exit code.
func MountHelper(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	m, err := parseHelperArgs(args)
	if err != nil {
		fmt.Fprintln(stderr, "tyrfs: "+err.Error())
		return 1
	}
	switch {
	case m.fake:
		return 0
	case m.remount:
		if err := remountFlags(m.dir, m.readOnly); err != nil {
			fmt.Fprintln(stderr, "tyrfs: "+err.Error())
			return 32 // mount(8)'s "mount failure"
		}
		return 0
	}
	return Main(m.mountArgs(), stdin, stdout, stderr)
}

// helperMount is what a helper call asks for.
type helperMount struct {
	keyspace, dir string
	endpoint      string // comma-separated, as --endpoint takes it
	flags         []string
	readOnly      bool
	remount, fake bool
}

// helperValued maps the options with a value to tyr mount's flags.
var helperValued = map[string]string{
	"cache": "cache", "dir_cache": "dir-cache", "hold_writes": "hold-writes", "lock_lease": "lock-lease",
	"replication": "replication", "log": "log",
}

// helperBool maps the options without a value to tyr mount's flags.
var helperBool = map[string]string{
	"create": "create", "allow_other": "allow-other", "local_locks": "local-locks", "no_failover": "no-failover",
}

// helperIgnored are the options mount(8) and the kernel pass on, or that
// /etc/fstab lines carry, that mean nothing more to a TýrFS mount: FUSE
// mounts are always nosuid and nodev, and the kernel's options of a FUSE
// mount come back in a remount's.
var helperIgnored = []string{"defaults", "auto", "noauto", "user", "users", "nouser", "owner", "group",
	"_netdev", "nofail", "dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime",
	"diratime", "nodiratime", "relatime", "norelatime", "strictatime", "nostrictatime", "lazytime",
	"nolazytime", "async", "silent", "loud", "default_permissions"}

// helperIgnoredValued are the options with a value ignored likewise.
var helperIgnoredValued = []string{"user_id", "group_id", "max_read", "blksize", "comment", "rootmode", "fd"}

// parseHelperArgs parses a helper call.
func parseHelperArgs(args []string) (helperMount, error) {
	var m helperMount
	var pos, opts []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o" || a == "-t" || a == "-N":
			if i+1 == len(args) {
				return m, fmt.Errorf("%s without its value", a)
			}
			if a == "-o" {
				opts = append(opts, strings.Split(args[i+1], ",")...)
			}
			i++
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, strings.Split(a[2:], ",")...)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			// -s (sloppy), -f (fake), -n (no mtab), -v (verbose).
			for _, c := range a[1:] {
				switch c {
				case 'f':
					m.fake = true
				case 's', 'n', 'v':
				default:
					return m, fmt.Errorf("unknown flag -%c (want SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS])", c)
				}
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return m, fmt.Errorf("%d arguments besides flags, want SOURCE MOUNTPOINT [-o OPTIONS] (SOURCE: tyr:KEYSPACE)", len(pos))
	}
	m.keyspace, m.dir = strings.TrimPrefix(pos[0], "tyr:"), pos[1]
	if m.keyspace == "" {
		return m, fmt.Errorf("source %q names no keyspace (want tyr:KEYSPACE)", pos[0])
	}
	for _, o := range opts {
		name, value, valued := strings.Cut(o, "=")
		switch {
		case o == "":
		case o == "ro":
			m.readOnly = true
		case o == "rw":
			m.readOnly = false
		case o == "remount":
			m.remount = true
		case name == "endpoint" && valued:
			// Several nodes are joined by '+': ',' separates options.
			m.endpoint = strings.ReplaceAll(value, "+", ",")
		case helperValued[name] != "" && valued:
			m.flags = append(m.flags, "--"+helperValued[name]+"="+value)
		case helperBool[o] != "":
			m.flags = append(m.flags, "--"+helperBool[o])
		case !valued && slices.Contains(helperIgnored, o), valued && slices.Contains(helperIgnoredValued, name),
			strings.HasPrefix(o, "x-"):
		default:
			return m, fmt.Errorf("unknown option %q (TýrFS's: endpoint=HOST:PORT[+HOST:PORT...], cache=, dir_cache=, hold_writes=, lock_lease=, "+
				"replication=, log=FILE, create, allow_other, local_locks, no_failover, ro, rw)", o)
		}
	}
	return m, nil
}

// mountArgs returns tyr's arguments for the mount m asks for.
func (m helperMount) mountArgs() []string {
	var args []string
	if m.endpoint != "" {
		args = append(args, "--endpoint", m.endpoint)
	}
	args = append(args, "mount", "--background")
	args = append(args, m.flags...)
	if m.readOnly {
		args = append(args, "--read-only")
	}
	return append(args, "--", m.keyspace, m.dir)
}

// remountFlags makes the TýrFS mount at dir read-only or writable,
// keeping its other flags: mount(2) with MS_REMOUNT, which the kernel
// serves for a FUSE mount without asking the mount's process.
func remountFlags(dir string, readOnly bool) error {
	fstype, err := mountType(dir)
	if err != nil {
		return err
	}
	if fstype != mountFSType {
		return fmt.Errorf("%s: a mount of type %s, not %s", dir, fstype, mountFSType)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	// statfs(2)'s ST_ flags share their bits with mount(2)'s MS_ ones.
	const kept = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_SYNCHRONOUS | unix.MS_MANDLOCK |
		unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME
	flags := uintptr(st.Flags)&kept | unix.MS_REMOUNT
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", dir, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", dir, err)
	}
	return nil
}

// errNotMounted: the directory is no mount point.
var errNotMounted = errors.New("not a mount point")

// mountType returns the type of the mount whose mount point is dir, from
// /proc/self/mountinfo; errNotMounted if dir is no mount point.
func mountType(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	fstype := ""
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPEROPTIONS
		fields := strings.Fields(s.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+1 >= len(fields) || unescapeMountinfo(fields[4]) != abs {
			continue
		}
		fstype = fields[sep+1] // the last mount at dir is the one seen there
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	if fstype == "" {
		return "", fmt.Errorf("%s: %w", dir, errNotMounted)
	}
	return fstype, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if c, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(c))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountInBackground runs the mount cmd asks for again, without
// --background, as a process of its own session with a pipe on which it
// says it mounted. Until then its messages go to this one's standard
// error; it returns once the mount is up, or the mount's failure.
func mountInBackground(cmd *cobra.Command, e *env, ks, dir string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--background: %w", err)
	}
	args := []string{"--endpoint", e.endpoint, "mount"}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Name != "background" && f.Name != "endpoint" {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	args = append(args, "--ready-fd=3", "--", ks, dir)
	ready, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer ready.Close()
	msgs, msgsW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return err
	}
	defer msgs.Close()
	p := exec.Command(exe, args...) // standard input and output: the null device
	p.Stderr = msgsW
	p.ExtraFiles = []*os.File{readyW}
	p.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = p.Start()
	readyW.Close()
	msgsW.Close()
	if err != nil {
		return fmt.Errorf("--background: %w", err)
	}
	// The mount's messages until it mounts or fails (it lets go of the
	// pipe either way), then its word.
	_, _ = io.Copy(e.stderr, msgs)
	var b [1]byte
	if n, _ := ready.Read(b[:]); n == 1 {
		fmt.Fprintf(e.stdout, "mounted %s at %s (process %d); stop with fusermount3 -u %s\n", ks, dir, p.Process.Pid, dir)
		_ = p.Process.Release()
		return nil
	}
	if err := p.Wait(); err != nil {
		return fmt.Errorf("mount %s at %s: the mount's process failed (%w)", ks, dir, err)
	}
	return fmt.Errorf("mount %s at %s: the mount's process ended without mounting", ks, dir)
}

// detachMount is what a mount started by --background does once mounted:
// it sends its messages to logFile (appended; none if empty) from now on,
// and says on the pipe readyFD that it mounted.
func detachMount(readyFD int, logFile string) error {
	out, err := os.OpenFile(cmp.Or(logFile, os.DevNull), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("--log: %w", err)
	}
	defer out.Close()
	ready := os.NewFile(uintptr(readyFD), "ready")
	defer ready.Close()
	if _, err := ready.Write([]byte{1}); err != nil {
		return fmt.Errorf("--ready-fd: %w", err)
	}
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(out.Fd()), fd, 0); err != nil {
			return err
		}
	}
	return nil
}
