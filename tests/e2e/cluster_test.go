package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/proc"
	"github.com/tyrstore/tyr/internal/testserver"
)

// Bounds the cluster tests assert; docs/cluster.md gives the measured
// timings they leave room for.
const (
	// catalogSpreadMax bounds how long a keyspace created on one node
	// takes to exist on another (gossip, measured in tens of ms).
	catalogSpreadMax = 5 * time.Second
	// joinVisibleMax bounds how long a joining server takes to be alive in
	// every member's view (measured around 0.1 s).
	joinVisibleMax = 5 * time.Second
	// deadDetectedMax bounds how long a kill -9'd member takes to be Dead
	// in every survivor's view: about 3 s confirmed suspicion after a
	// probe failure within a few seconds (measured 4-7 s), with room for
	// the 18 s unconfirmed worst case of membership's timing model.
	deadDetectedMax = 25 * time.Second
	// stopMax bounds how long `tyr cluster down` takes to end every node.
	stopMax = 15 * time.Second
)

func dial(t *testing.T, endpoint string) *client.Client {
	t.Helper()
	c, err := client.Dial(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// memberState returns id's state in the view of the node behind c.
func memberState(_ *testing.T, c *client.Client, id string) string {
	return testserver.MemberState(c, id)
}

func hasKeyspace(t *testing.T, c *client.Client, name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := c.ListKeyspaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range list {
		if k.Name == name {
			return true
		}
	}
	return false
}

// TestClusterUpStatusDown starts a 3-node local cluster, checks every
// node's view, spreads keyspace creations and drops through the catalog
// (also to a node that was stopped meanwhile), and checks that `down`
// ends every process it started.
func TestClusterUpStatusDown(t *testing.T) {
	t.Parallel()
	testserver.Binary(t) // build outside the measured steps
	began := time.Now()
	lc := testserver.UpCluster(t, 3)
	t.Logf("cluster up: %v", time.Since(began))
	ctx := context.Background()
	nodes := make([]*client.Client, 3)
	for i, ep := range lc.Endpoints {
		nodes[i] = dial(t, ep)
	}

	for i, c := range nodes {
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("node%d", i+1); st.Self != want || st.Alive() != 3 || len(st.Members) != 3 {
			t.Fatalf("status of node%d: self %q, %d alive of %d; want self %q, 3 alive of 3", i+1, st.Self, st.Alive(), len(st.Members), want)
		}
		sum := 0.0
		for _, m := range st.Members {
			// cluster up returns once every node sees every node alive
			// and none catching up.
			if m.RingShare <= 0 || m.RPCAddr != lc.Endpoints[m.ID[len("node")]-'1'] || m.GossipAddr == "" || m.CatchingUp {
				t.Errorf("node%d sees %+v", i+1, m)
			}
			sum += m.RingShare
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("node%d: ring shares sum to %v, want 1", i+1, sum)
		}
	}
	// The three nodes of one machine share its block cache: each is
	// given a third of what one server would take (a quarter of the
	// memory, at least 128 MiB).
	var memKiB uint64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		_, _ = fmt.Sscanf(string(b), "MemTotal: %d kB", &memKiB)
	}
	for _, pid := range lc.PIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Split(string(b), "\x00")
		i := slices.Index(args, "--block-cache")
		if i < 0 || i+1 >= len(args) {
			t.Fatalf("node pid %d runs without --block-cache: %q", pid, args)
		}
		n, err := strconv.ParseUint(args[i+1], 10, 64)
		if err != nil || n < 128<<20 || n > 128<<20 && n > memKiB<<10/4/3 {
			t.Errorf("node pid %d: --block-cache %q (%v); want at least 128 MiB, and no more than a twelfth of %d KiB above it", pid, args[i+1], err, memKiB)
		}
	}

	r := testserver.Run(t, "cluster", "status", "--dir", lc.Dir)
	if r.Exit != 0 || !strings.Contains(r.Stdout, "3 members, 3 alive") || strings.Count(r.Stdout, " alive ") != 3 {
		t.Errorf("tyr cluster status: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}

	if _, err := nodes[0].CreateKeyspace(ctx, "spread", client.KeyspaceConfig{ChunkSize: 4096, Replication: 3, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	took := testserver.Eventually(t, catalogSpreadMax, "keyspace created on node1 exists on node3", func() (bool, string) {
		return hasKeyspace(t, nodes[2], "spread"), "not listed"
	})
	t.Logf("keyspace reached node3 after %v", took)
	if _, err := nodes[2].CreateKeyspace(ctx, "spread", client.KeyspaceConfig{}); !errors.Is(err, client.ErrExists) {
		t.Errorf("re-creating on node3: %v, want ErrExists", err)
	}
	_, err := nodes[1].CreateKeyspace(ctx, "toowide", client.KeyspaceConfig{Replication: 5})
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "replication 5") || !strings.Contains(err.Error(), "3 live members") {
		t.Errorf("replication 5 on 3 nodes: %v, want ErrInvalidArgument naming 5 and 3", err)
	}
	if hasKeyspace(t, nodes[1], "toowide") {
		t.Error("a refused keyspace exists")
	}

	// A node that was down while a keyspace was dropped and another created
	// catches up when it starts again.
	began = time.Now()
	if r := testserver.Run(t, "cluster", "stop", "--dir", lc.Dir, "--node", "3"); r.Exit != 0 {
		t.Fatalf("tyr cluster stop: %s", r.Stderr)
	}
	if err := nodes[0].DropKeyspace(ctx, "spread"); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].CreateKeyspace(ctx, "later", client.KeyspaceConfig{}); err != nil {
		t.Fatal(err)
	}
	if r := testserver.Run(t, "cluster", "start", "--dir", lc.Dir, "--node", "3"); r.Exit != 0 {
		t.Fatalf("tyr cluster start: %s\n%s", r.Stderr, lc.Logs())
	}
	t.Logf("stop and start of node3: %v", time.Since(began))
	node3 := dial(t, lc.Endpoints[2]) // a fresh connection: the old one is in reconnect backoff
	took = testserver.Eventually(t, catalogSpreadMax, "restarted node3 follows the catalog", func() (bool, string) {
		gone, present := !hasKeyspace(t, node3, "spread"), hasKeyspace(t, node3, "later")
		return gone && present, fmt.Sprintf("spread dropped: %v, later created: %v", gone, present)
	})
	t.Logf("restarted node3 caught up with the catalog %v after its start returned", took)

	pids := lc.PIDs()
	if len(pids) != 3 {
		t.Fatalf("pid files name %v, want 3 PIDs", pids)
	}
	began = time.Now()
	if r := testserver.Run(t, "cluster", "down", "--dir", lc.Dir); r.Exit != 0 {
		t.Fatalf("tyr cluster down: exit %d: %s", r.Exit, r.Stderr)
	}
	t.Logf("cluster down: %v", time.Since(began))
	testserver.Eventually(t, stopMax, "every node process ends", func() (bool, string) {
		for _, pid := range pids {
			if proc.Running(pid) {
				return false, fmt.Sprintf("pid %d still runs", pid)
			}
		}
		return true, ""
	})
}

// TestClusterJoinAndDeath measures how long a new server takes to appear
// in every view, and how long a kill -9'd one takes to be Dead everywhere.
func TestClusterJoinAndDeath(t *testing.T) {
	t.Parallel()
	lc := testserver.UpCluster(t, 3)
	nodes := []*client.Client{dial(t, lc.Endpoints[0]), dial(t, lc.Endpoints[1]), dial(t, lc.Endpoints[2])}

	began := time.Now()
	fourth := testserver.Start(t, "--node-id", "node4", "--join", lc.GossipAddr(1))
	nodes = append(nodes, fourth.Client())
	took := testserver.Eventually(t, joinVisibleMax, "node4 alive in every view", func() (bool, string) {
		for i, c := range nodes {
			if s := memberState(t, c, "node4"); s != client.StateAlive {
				return false, fmt.Sprintf("node%d sees node4 %s", i+1, s)
			}
		}
		return true, ""
	})
	t.Logf("node4 alive in every view %v after its start returned (%v including start)", took, time.Since(began))

	fourth.Kill()
	survivors := nodes[:3]
	took = testserver.Eventually(t, deadDetectedMax, "node4 dead in every survivor's view", func() (bool, string) {
		for i, c := range survivors {
			if s := memberState(t, c, "node4"); s != client.StateDead {
				return false, fmt.Sprintf("node%d sees node4 %s", i+1, s)
			}
		}
		return true, ""
	})
	t.Logf("node4 dead in every survivor's view %v after kill -9", took)
}

// TestClusterBadConfig checks that a server refuses to start, with one
// clear error line and nothing created, when its join cannot work.
func TestClusterBadConfig(t *testing.T) {
	t.Parallel()
	lc := testserver.UpCluster(t, 2)

	t.Run("JoinNobody", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nobody := l.Addr().String()
		_ = l.Close()
		data := filepath.Join(t.TempDir(), "data")
		r := testserver.Run(t, "server", "--data", data, "--listen", "127.0.0.1:0", "--join", nobody)
		lines := r.ErrorLines()
		if r.Exit == 0 || len(lines) != 1 || !strings.Contains(lines[0], nobody) || !strings.Contains(lines[0], "no address answered") {
			t.Fatalf("join to %s: exit %d, error lines %q\n%s", nobody, r.Exit, lines, r.Stderr)
		}
		if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused join created %s (%v)", data, err)
		}
	})

	t.Run("DuplicateNodeID", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		r := testserver.Run(t, "server", "--data", data, "--listen", "127.0.0.1:0", "--node-id", "node2",
			"--join", lc.GossipAddr(1), "--log-level", "error")
		lines := r.ErrorLines()
		if r.Exit == 0 || len(lines) != 1 || !strings.Contains(lines[0], `"node2" is taken`) || !strings.Contains(lines[0], lc.Endpoints[1]) {
			t.Fatalf("duplicate node2: exit %d, error lines %q\n%s", r.Exit, lines, r.Stderr)
		}
		if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused start created %s (%v)", data, err)
		}
		if s := memberState(t, dial(t, lc.Endpoints[0]), "node2"); s != client.StateAlive {
			t.Errorf("the original node2 is %s after the impostor", s)
		}
	})

	t.Run("NodeIDDisagreesWithDataDir", func(t *testing.T) {
		r := testserver.Run(t, "server", "--data", lc.NodeFile(1, "data"), "--listen", "127.0.0.1:0", "--node-id", "other")
		lines := r.ErrorLines()
		if r.Exit == 0 || len(lines) != 1 || !strings.Contains(lines[0], `"other" disagrees with "node1"`) {
			t.Fatalf("exit %d, error lines %q\n%s", r.Exit, lines, r.Stderr)
		}
	})

	t.Run("UpOnRunningDir", func(t *testing.T) {
		r := testserver.Run(t, "cluster", "up", "--nodes", "2", "--dir", lc.Dir, "--base-port", "0")
		lines := r.ErrorLines()
		if r.Exit == 0 || len(lines) != 1 || !strings.Contains(lines[0], "already runs a cluster") {
			t.Fatalf("exit %d, error lines %q", r.Exit, lines)
		}
	})
}
