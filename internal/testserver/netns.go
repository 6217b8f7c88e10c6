package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tyrstore/tyr/internal/proc"
)

// NetCluster is a cluster of tyr servers each in a network namespace of its
// own, so that a test can cut a node off the network or make its links lose
// and delay packets. The namespaces hang off a bridge in one more namespace
// (the switch): node k is 10.77.0.k on its eth0, whose other end is port pk
// of the switch's bridge. Nothing outside these namespaces is touched, and
// the test removes them when it ends. Clients reach a node from inside its
// namespace (Dialer), so a partition cuts a node off its own clients'
// routed requests to other nodes too, as a client on that host would be.
//
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the ip(8) and tc(8)
// commands; UpNetCluster skips the test without them.
type NetCluster struct {
	*LocalCluster
	prefix string
	nodes  int
}

const (
	netClientPort = 7000
	netGossipPort = 7946
)

// NetAddr is node k's address.
func NetAddr(k int) string { return fmt.Sprintf("10.77.0.%d", k) }

// UpNetCluster creates the namespaces, starts n nodes in them, and waits
// until every node is ready. It skips the test where namespaces cannot be
// made.
func UpNetCluster(t testing.TB, n int) *NetCluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("network namespaces need %s(8): %v", tool, err)
		}
	}
	dir, err := os.MkdirTemp("", "tyr-netcluster-")
	if err != nil {
		t.Fatal(err)
	}
	c := &NetCluster{LocalCluster: &LocalCluster{t: t, Dir: dir}, prefix: fmt.Sprintf("tyr%d", os.Getpid()), nodes: n}
	// Its servers are tied to the test process; its namespaces are
	// removed by a reaper if the test process dies first.
	reap := []string{"sh", "-c", `for ns; do ip netns del "$ns"; done`, "sh"}
	for k := 0; k <= n; k++ {
		reap = append(reap, c.ns(k))
	}
	c.reaper = startReaper(t, reap...)
	t.Cleanup(c.cleanup)
	sw := c.ns(0)
	c.ip(t, "netns", "add", sw)
	c.ip(t, "-n", sw, "link", "add", "br0", "type", "bridge")
	c.ip(t, "-n", sw, "link", "set", "br0", "up")
	for k := 1; k <= n; k++ {
		ns, port := c.ns(k), fmt.Sprintf("p%d", k)
		c.ip(t, "netns", "add", ns)
		c.ip(t, "-n", ns, "link", "set", "lo", "up")
		c.ip(t, "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		c.ip(t, "-n", sw, "link", "set", port, "master", "br0")
		c.ip(t, "-n", sw, "link", "set", port, "up")
		c.ip(t, "-n", ns, "addr", "add", NetAddr(k)+"/24", "dev", "eth0")
		c.ip(t, "-n", ns, "link", "set", "eth0", "up")
		if err := os.MkdirAll(c.nodeDir(k), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for k := 1; k <= n; k++ {
		c.Start(k)
		c.Endpoints = append(c.Endpoints, fmt.Sprintf("%s:%d", NetAddr(k), netClientPort))
	}
	return c
}

// ns is node k's namespace; 0 is the switch.
func (c *NetCluster) ns(k int) string {
	if k == 0 {
		return c.prefix + "-sw"
	}
	return fmt.Sprintf("%s-n%d", c.prefix, k)
}

func (c *NetCluster) nodeDir(k int) string { return filepath.Join(c.Dir, fmt.Sprintf("node%d", k)) }

func (c *NetCluster) ip(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Start starts nodek on its data in its namespace, joining the others, and
// waits until it is ready.
func (c *NetCluster) Start(k int) {
	c.t.Helper()
	for _, f := range []string{"ready", "gossip-ready"} {
		_ = os.Remove(c.NodeFile(k, f))
	}
	log, err := os.OpenFile(c.NodeFile(k, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer log.Close()
	// Join the nodes that run: none for the first start of node1.
	var join []string
	for j := 1; j <= c.nodes; j++ {
		if j != k && c.started(j) {
			join = append(join, fmt.Sprintf("%s:%d", NetAddr(j), netGossipPort))
		}
	}
	args := []string{"netns", "exec", c.ns(k), Binary(c.t), "server", "--data", filepath.Join(c.nodeDir(k), "data"),
		"--listen", fmt.Sprintf("%s:%d", NetAddr(k), netClientPort),
		"--gossip-listen", fmt.Sprintf("%s:%d", NetAddr(k), netGossipPort),
		"--node-id", fmt.Sprintf("node%d", k), "--default-sync",
		"--ready-file", c.NodeFile(k, "ready"), "--gossip-ready-file", c.NodeFile(k, "gossip-ready")}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := StartTied(cmd); err != nil {
		c.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	// ip netns exec execs the server, so the PID is the server's.
	if err := os.WriteFile(c.NodeFile(k, "pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		c.t.Fatal(err)
	}
	Eventually(c.t, 90*time.Second, fmt.Sprintf("node%d ready", k), func() (bool, string) {
		select {
		case <-exited:
			c.t.Fatalf("node%d exited:\n%s", k, c.Logs())
		default:
		}
		_, err := os.Stat(c.NodeFile(k, "ready"))
		return err == nil, fmt.Sprint(err)
	})
}

func (c *NetCluster) started(k int) bool {
	b, err := os.ReadFile(c.NodeFile(k, "pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && proc.Running(pid)
}

// Isolate cuts nodek off the network, both ways; Heal reconnects it.
func (c *NetCluster) Isolate(k int) {
	c.ip(c.t, "-n", c.ns(0), "link", "set", fmt.Sprintf("p%d", k), "down")
}

// Heal reconnects nodek.
func (c *NetCluster) Heal(k int) {
	c.ip(c.t, "-n", c.ns(0), "link", "set", fmt.Sprintf("p%d", k), "up")
}

// Impair puts the tc(8) queueing discipline qdisc ("tbf rate 512kbit
// burst 8kb latency 80ms", say) on both directions of nodek's link; Clear
// removes it. Kernels without netem (as in many containers) still have
// tbf: a slow link that delays what it queues and drops what overflows.
func (c *NetCluster) Impair(k int, qdisc ...string) {
	c.t.Helper()
	for _, end := range [][2]string{{c.ns(0), fmt.Sprintf("p%d", k)}, {c.ns(k), "eth0"}} {
		args := append([]string{"-n", end[0], "qdisc", "replace", "dev", end[1], "root"}, qdisc...)
		if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
			c.t.Fatalf("tc %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// Clear removes nodek's link impairment.
func (c *NetCluster) Clear(k int) {
	for _, end := range [][2]string{{c.ns(0), fmt.Sprintf("p%d", k)}, {c.ns(k), "eth0"}} {
		_ = exec.Command("tc", "-n", end[0], "qdisc", "del", "dev", end[1], "root").Run()
	}
}

// Dialer dials a node's address from inside that node's namespace, for
// client.WithDialer.
func (c *NetCluster) Dialer() func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		k := 0
		for j := 1; j <= c.nodes; j++ {
			if host == NetAddr(j) {
				k = j
			}
		}
		if k == 0 {
			return nil, fmt.Errorf("%s is no node of the namespaced cluster", addr)
		}
		return dialIn(ctx, "/var/run/netns/"+c.ns(k), addr)
	}
}

// dialIn dials addr over TCP from the network namespace at nsPath. The
// socket belongs to the namespace it was made in, so the dial runs on a
// thread of its own that enters the namespace and is never handed back to
// the scheduler (the runtime ends a thread whose goroutine exits locked).
func dialIn(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(nsPath)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("enter %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

func (c *NetCluster) cleanup() {
	for _, pid := range c.PIDs() {
		if proc.Running(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for k := 0; k <= c.nodes; k++ {
		_ = exec.Command("ip", "netns", "del", c.ns(k)).Run()
	}
	c.stopReaper()
	if c.t.Failed() {
		c.t.Logf("cluster directory kept: %s", c.Dir)
		return
	}
	_ = os.RemoveAll(c.Dir)
}
