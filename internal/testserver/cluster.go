package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/proc"
)

// Result is the outcome of one tyr command.
type Result struct {
	Stdout, Stderr string
	// Exit is the exit code; -1 if the command did not exit normally.
	Exit int
}

// ErrorLines returns the lines of Stderr that start with "tyr: ", the
// lines a failing command prints for the user.
func (r Result) ErrorLines() []string {
	var out []string
	for _, l := range strings.Split(r.Stderr, "\n") {
		if strings.HasPrefix(l, "tyr: ") {
			out = append(out, l)
		}
	}
	return out
}

// CommandTimeout bounds one Run.
const CommandTimeout = 2 * time.Minute

// CatalogSpreadMax bounds how long a keyspace created on one node of a
// cluster takes to exist on every other. Its gossip broadcasts take tens of
// milliseconds, but they go over UDP and a loaded machine drops some; then
// the push/pull that each node runs with a random peer every membership
// PushPullInterval (15 s) carries it: two intervals, and a margin.
const CatalogSpreadMax = 35 * time.Second

// Run runs the tyr binary with args and returns its output and exit code.
// It fails the test if the binary cannot be run or outlives
// CommandTimeout.
func Run(t testing.TB, args ...string) Result {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := StartTied(cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(CommandTimeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("tyr %s: still running after %v\nstderr:\n%s", strings.Join(args, " "), CommandTimeout, stderr.String())
	}
	r := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		r.Exit = exitErr.ExitCode()
	default:
		t.Fatalf("tyr %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// LocalCluster is a cluster started with `tyr cluster up` in a temporary
// directory.
type LocalCluster struct {
	t   testing.TB
	Dir string
	// reaper takes the cluster down if the test process dies first.
	reaper *reaper
	// Endpoints are the nodes' client API addresses; Endpoints[k-1] is
	// nodek's.
	Endpoints []string
}

// UpCluster runs `tyr cluster up --nodes n` on free ports. When the test
// ends it runs `tyr cluster down` and kills, by PID, any node still
// running; the cluster's directory (data and logs) is removed if the test
// passed and kept, its path logged, if it failed.
//
// A free port can be taken by another process (an outgoing connection of
// another test, say) before the node binds it: `up` then fails with the
// node's bind error, and UpCluster takes the cluster down and tries again
// on other ports, up to upTries times.
func UpCluster(t testing.TB, n int, extra ...string) *LocalCluster {
	t.Helper()
	for try := 1; ; try++ {
		dir, err := os.MkdirTemp("", "tyr-cluster-")
		if err != nil {
			t.Fatal(err)
		}
		c := &LocalCluster{t: t, Dir: dir,
			reaper: startReaper(t, Binary(t), "cluster", "down", "--dir", dir, "--timeout", "5s")}
		args := append([]string{"cluster", "up", "--nodes", strconv.Itoa(n), "--dir", c.Dir, "--base-port", "0"}, extra...)
		r := Run(t, args...)
		if r.Exit != 0 && try < upTries && strings.Contains(r.Stderr, "address already in use") {
			t.Logf("tyr cluster up, try %d: %s; trying again on other ports", try, strings.TrimSpace(r.Stderr))
			c.down()
			_ = os.RemoveAll(dir)
			continue
		}
		t.Cleanup(c.cleanup)
		c.check(r, n)
		return c
	}
}

// upTries bounds UpCluster's tries.
const upTries = 3

func (c *LocalCluster) check(r Result, n int) {
	t := c.t
	t.Helper()
	if r.Exit != 0 {
		t.Fatalf("tyr cluster up: exit %d\n%s\n%s", r.Exit, r.Stderr, c.Logs())
	}
	c.Endpoints = strings.Fields(r.Stdout)
	if len(c.Endpoints) != n {
		t.Fatalf("tyr cluster up printed %d endpoints, want %d: %q", len(c.Endpoints), n, r.Stdout)
	}
}

// down stops every node of c: `tyr cluster down`, then SIGKILL by PID for
// any still running; and then its reaper.
func (c *LocalCluster) down() {
	pids := c.PIDs()
	_ = exec.Command(Binary(c.t), "cluster", "down", "--dir", c.Dir, "--timeout", "5s").Run()
	for _, pid := range pids {
		if proc.Running(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	c.stopReaper()
}

// reaper is a process that runs a command if the test process dies before
// its cleanup has (a test binary killed on its timeout, say), to undo what
// would outlive it: the nodes `tyr cluster up` starts, which are its
// children and not the test's, so StartTied cannot tie them; a
// NetCluster's namespaces. It is a shell reading a pipe whose only writer
// is the test process: the kernel closes it when the process ends,
// however it ends, and the shell then runs the command. The cleanup stops
// the reaper once it has done the same itself.
type reaper struct {
	cmd *exec.Cmd
	in  io.WriteCloser // held open, and so alive, while the test runs
}

// startReaper starts a reaper of argv.
func startReaper(t testing.TB, argv ...string) *reaper {
	t.Helper()
	// It ignores the signals that stop a whole process group (Ctrl-C, a
	// timeout's SIGTERM), so that it outlives the test to do its work.
	cmd := exec.Command("sh", append([]string{"-c", `trap '' HUP INT TERM; read -r _; exec "$@"`, "reaper"}, argv...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &reaper{cmd: cmd, in: in}
}

// stopReaper stops c's reaper, if any, once its work is done.
func (c *LocalCluster) stopReaper() {
	if r := c.reaper; r != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait() // and closes r.in
		c.reaper = nil
	}
}

func (c *LocalCluster) cleanup() {
	c.down()
	if c.t.Failed() {
		c.t.Logf("cluster directory kept: %s", c.Dir)
		return
	}
	_ = os.RemoveAll(c.Dir)
}

// NodeFile returns the path of a file in nodek's directory.
func (c *LocalCluster) NodeFile(k int, name string) string {
	return filepath.Join(c.Dir, fmt.Sprintf("node%d", k), name)
}

// GossipAddr returns nodek's gossip address from its ready file.
func (c *LocalCluster) GossipAddr(k int) string {
	c.t.Helper()
	b, err := os.ReadFile(c.NodeFile(k, "gossip-ready"))
	if err != nil {
		c.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// MetricsAddr returns nodek's metrics address (tyr cluster up --metrics)
// from its node.json.
func (c *LocalCluster) MetricsAddr(k int) string {
	c.t.Helper()
	n := c.nodeJSON(k)
	if n.Metrics == "" {
		c.t.Fatalf("node%d serves no metrics: start the cluster with --metrics", k)
	}
	return n.Metrics
}

// Endpoint returns nodek's client API address from its node.json: also
// for the nodes `tyr cluster add` started, which Endpoints lacks.
func (c *LocalCluster) Endpoint(k int) string {
	c.t.Helper()
	return c.nodeJSON(k).Listen
}

// nodeJSON reads the addresses in nodek's node.json.
func (c *LocalCluster) nodeJSON(k int) (n struct {
	Listen  string `json:"listen"`
	Metrics string `json:"metrics"`
}) {
	c.t.Helper()
	b, err := os.ReadFile(c.NodeFile(k, "node.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := json.Unmarshal(b, &n); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// PIDs returns the PIDs in the nodes' pid files, in node order, skipping
// nodes without one.
func (c *LocalCluster) PIDs() []int {
	var pids []int
	for k := 1; ; k++ {
		if _, err := os.Stat(filepath.Join(c.Dir, fmt.Sprintf("node%d", k))); err != nil {
			return pids
		}
		b, err := os.ReadFile(c.NodeFile(k, "pid"))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pids = append(pids, pid)
		}
	}
}

// Signal sends sig to nodek, by the PID in its pid file.
func (c *LocalCluster) Signal(k int, sig syscall.Signal) {
	c.t.Helper()
	b, err := os.ReadFile(c.NodeFile(k, "pid"))
	if err != nil {
		c.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		c.t.Fatal(err)
	}
}

// Start starts nodek again on its data (`tyr cluster start`).
func (c *LocalCluster) Start(k int) {
	c.t.Helper()
	if r := Run(c.t, "cluster", "start", "--dir", c.Dir, "--node", strconv.Itoa(k)); r.Exit != 0 {
		c.t.Fatalf("tyr cluster start --node %d: exit %d\n%s", k, r.Exit, r.Stderr)
	}
}

// WaitLog waits until nodek's log has more than before lines containing
// line, and returns the count.
func (c *LocalCluster) WaitLog(k int, line string, before int, bound time.Duration) int {
	c.t.Helper()
	count := 0
	Eventually(c.t, bound, fmt.Sprintf("node%d logging %q", k, line), func() (bool, string) {
		b, err := os.ReadFile(c.NodeFile(k, "log"))
		if err != nil {
			return false, err.Error()
		}
		count = strings.Count(string(b), line)
		return count > before, fmt.Sprintf("%d times", count)
	})
	return count
}

// MemberState returns member id's state in the view of the node behind c,
// or why it cannot tell.
func MemberState(c *client.Client, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.ClusterStatus(ctx)
	if err != nil {
		return "error: " + err.Error()
	}
	m, ok := st.Member(id)
	if !ok {
		return "unknown"
	}
	return m.State
}

// Settled waits, up to a minute, until node k sees every node of the
// cluster alive and none of them catching up: a cluster just started
// refuses, for a moment, what its catching-up members alone could serve.
func (c *LocalCluster) Settled(k int) {
	t := c.t
	t.Helper()
	conn, err := grpc.NewClient(c.Endpoint(k), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := tyrpb.NewTyrClient(conn)
	Eventually(t, time.Minute, fmt.Sprintf("node%d sees the cluster settled", k), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := api.Ring(ctx, &tyrpb.RingRequest{})
		if err != nil {
			return false, err.Error()
		}
		alive, catching := 0, []string{}
		for _, m := range resp.GetMembers() {
			if m.GetState() == client.StateAlive {
				alive++
			}
			if m.GetCatchingUp() {
				catching = append(catching, m.GetId())
			}
		}
		return alive == len(c.Endpoints) && len(catching) == 0, fmt.Sprintf("%d alive, catching up: %v", alive, catching)
	})
}

// Logs returns every node's log, for failure messages.
func (c *LocalCluster) Logs() string {
	var sb strings.Builder
	for k := 1; ; k++ {
		b, err := os.ReadFile(c.NodeFile(k, "log"))
		if err != nil {
			return sb.String()
		}
		fmt.Fprintf(&sb, "--- node%d log ---\n%s\n", k, b)
	}
}

// LogLines returns, for each node, the last n lines of its log that
// contain substr.
func (c *LocalCluster) LogLines(substr string, n int) string {
	var sb strings.Builder
	for k := 1; ; k++ {
		b, err := os.ReadFile(c.NodeFile(k, "log"))
		if err != nil {
			return sb.String()
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, substr) {
				lines = append(lines, l)
			}
		}
		fmt.Fprintf(&sb, "--- node%d ---\n%s\n", k, strings.Join(lines[max(0, len(lines)-n):], "\n"))
	}
}

// WaitKeyspace waits, up to CatalogSpreadMax each, until the node of every
// client of clients knows keyspace ks: a keyspace created through one
// node reaches the others' catalogs by gossip.
func WaitKeyspace(t testing.TB, ks string, clients ...*client.Client) {
	t.Helper()
	for i, c := range clients {
		Eventually(t, CatalogSpreadMax, fmt.Sprintf("keyspace %s on client %d's node", ks, i+1), func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := c.Keyspace(ctx, ks)
			return err == nil, fmt.Sprint(err)
		})
	}
}

// Eventually polls cond every 20ms until it returns true or timeout
// passes, and returns how long it took. On timeout it fails the test with
// cond's last explanation.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		last = why
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v: %s", what, timeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
