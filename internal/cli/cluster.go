package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/proc"
	"github.com/tyrstore/tyr/internal/ring"
)

// Limits and timings of the cluster tooling.
const (
	// clusterNodesMax bounds `tyr cluster up --nodes`: a local cluster is
	// for development and tests, and every node is a process on this host.
	clusterNodesMax = 32
	// leaveTimeout bounds how long a stopping server waits for its
	// departure to be gossiped before it shuts membership down anyway.
	leaveTimeout = 2 * time.Second
	// nodeIDFile is the file in the data directory that keeps the node ID
	// across restarts.
	nodeIDFile = "node-id"
	// clusterPollInterval is how often the cluster commands poll for
	// ready files, process exits and member states.
	clusterPollInterval = 50 * time.Millisecond
)

// clusterFlags are the membership flags of `tyr server`.
type clusterFlags struct {
	nodeID          string
	gossipListen    string
	gossipReadyFile string
	join            []string
	weight          uint32
	defaultSync     bool
	// capacity is --capacity as given; "" measures the file system.
	capacity string
}

func addClusterFlags(cmd *cobra.Command, f *clusterFlags) {
	cmd.Flags().StringVar(&f.nodeID, "node-id", "",
		"this node's ID in the cluster; default: the ID stored in DATA/node-id, else <hostname>-<client port> (stored on first start)")
	cmd.Flags().StringVar(&f.gossipListen, "gossip-listen", "127.0.0.1:0",
		"address for membership gossip (UDP and TCP, same port); port 0 picks a free one")
	cmd.Flags().StringVar(&f.gossipReadyFile, "gossip-ready-file", "",
		"write the gossip address to this file once serving (before --ready-file)")
	cmd.Flags().StringSliceVar(&f.join, "join", nil,
		"gossip addresses host:port[,host:port] of running members to join; empty starts a new cluster")
	cmd.Flags().Uint32Var(&f.weight, "weight", 1,
		fmt.Sprintf("this node's capacity in the placement ring, 1 to %d", membership.WeightMax))
	cmd.Flags().StringVar(&f.capacity, "capacity", "",
		fmt.Sprintf("this node's capacity for balancing: bytes, or with KiB, MiB, GiB or TiB, from %s to %s (1 EiB); default: the size of the file system holding --data",
			formatSize(capacityBytesMin), formatSize(capacityBytesMax)))
	cmd.Flags().BoolVar(&f.defaultSync, "default-sync", false,
		"sync setting of keyspaces created by a request that carries no config")
}

func (f clusterFlags) validate() error {
	if f.weight < 1 || f.weight > membership.WeightMax {
		return fmt.Errorf("invalid --weight %d: must be in [1, %d]", f.weight, membership.WeightMax)
	}
	if _, _, err := splitHostPort(f.gossipListen); err != nil {
		return fmt.Errorf("invalid --gossip-listen %q: %w", f.gossipListen, err)
	}
	if len(f.join) > membership.JoinAddressesMax {
		return fmt.Errorf("invalid --join: %d addresses, more than the limit of %d", len(f.join), membership.JoinAddressesMax)
	}
	for _, addr := range f.join {
		if _, _, err := splitHostPort(addr); err != nil {
			return fmt.Errorf("invalid --join address %q: %w", addr, err)
		}
	}
	if _, err := parseCapacity("--capacity", f.capacity); err != nil {
		return err
	}
	if f.nodeID != "" && len(f.nodeID) > ring.NodeIDBytesMax {
		return fmt.Errorf("invalid --node-id: %d bytes, longer than the limit of %d", len(f.nodeID), ring.NodeIDBytesMax)
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not in [0, 65535]", portText)
	}
	return host, port, nil
}

// readNodeID returns the node ID stored in dataDir, or "" if there is none
// yet. It creates nothing.
func readNodeID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, nodeIDFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read node ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("node ID file %s is empty; remove it or write the node's ID into it", path)
	}
	return id, nil
}

func writeNodeID(dataDir string, id ring.NodeID) error {
	if err := writeFileAtomic(filepath.Join(dataDir, nodeIDFile), string(id)+"\n"); err != nil {
		return fmt.Errorf("store node ID: %w", err)
	}
	return nil
}

// nodeID picks the node's ID: the stored one (which an explicit --node-id
// must match, since a data directory belongs to one node), else the flag,
// else one derived from the host name and the client API port, which is
// stable as long as the port is.
func nodeID(f clusterFlags, stored, rpcAddr string) (ring.NodeID, error) {
	switch {
	case stored != "" && f.nodeID != "" && stored != f.nodeID:
		return "", fmt.Errorf("--node-id %q disagrees with %q, the ID this data directory belongs to (in its %s file)",
			f.nodeID, stored, nodeIDFile)
	case stored != "":
		return ring.NodeID(stored), nil
	case f.nodeID != "":
		return ring.NodeID(f.nodeID), nil
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "tyr"
	}
	_, port, err := splitHostPort(rpcAddr)
	if err != nil {
		return "", fmt.Errorf("derive node ID from %q: %w", rpcAddr, err)
	}
	return ring.NodeID(fmt.Sprintf("%s-%d", host, port)), nil
}

// startMembership starts this server's membership node and joins the
// cluster if --join is set.
func startMembership(f clusterFlags, storedID, rpcAddr string, log *slog.Logger) (*membership.Node, error) {
	id, err := nodeID(f, storedID, rpcAddr)
	if err != nil {
		return nil, err
	}
	host, port, _ := splitHostPort(f.gossipListen) // checked by validate
	node, err := membership.Start(membership.Config{
		ID: id, BindAddr: host, BindPort: port, RPCAddr: rpcAddr, Weight: f.weight, Join: f.join, Logger: log,
		// Until it has caught up on what it may have missed while down,
		// the node serves no reads (see internal/node/catchup.go).
		CatchingUp: true,
	})
	switch {
	case errors.Is(err, membership.ErrJoin):
		return nil, fmt.Errorf("join %s: no address answered; each must be the --gossip-listen address of a running tyr server",
			strings.Join(f.join, ","))
	case errors.Is(err, membership.ErrDuplicateID):
		return nil, fmt.Errorf("node ID %q is taken: %w", id, err)
	case err != nil:
		return nil, fmt.Errorf("start membership on %s: %w", f.gossipListen, err)
	}
	return node, nil
}

// leaveCluster announces a planned departure, so the others mark this node
// Left rather than wait to declare it dead.
func leaveCluster(node *membership.Node, log *slog.Logger) {
	if err := node.Leave(leaveTimeout); err != nil {
		log.Warn("leaving the cluster", "err", err)
	}
}

func shutdownMembership(node *membership.Node, log *slog.Logger) {
	if err := node.Shutdown(); err != nil {
		log.Warn("stopping membership", "err", err)
	}
}

func init() { commandAdders = append(commandAdders, addClusterCommands) }

func addClusterCommands(root *cobra.Command, e *env) {
	cl := &cobra.Command{
		Use:   "cluster",
		Short: "Run a local cluster of tyr servers and inspect a cluster",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("missing command: want tyr cluster up, status, balance, add, remove, stop, start or down")
		},
	}
	cl.AddCommand(newClusterUp(e), newClusterStatus(e), newClusterBalance(e), newClusterStop(), newClusterStart(e),
		newClusterDown(e), newClusterAdd(e), newClusterRemove(e))
	root.AddCommand(cl)
}

// localNode is one node of a local cluster: DIR/nodeK/ holds its data
// directory, log, pid file, ready files and node.json.
type localNode struct {
	dir string
	// Persisted in node.json by `up`, read by `start`.
	ID     string   `json:"id"`
	Listen string   `json:"listen"`
	Gossip string   `json:"gossip"`
	Peers  []string `json:"peers"` // gossip addresses of the other nodes
	// The settings every node of the cluster shares, nodes that tyr
	// cluster add starts included.
	nodeSettings
	// Metrics is the node's --metrics-listen address; empty for none.
	Metrics string `json:"metrics,omitempty"`
	// CapacityBytes is the node's --capacity; 0 for none (measured).
	CapacityBytes uint64 `json:"capacity_bytes,omitempty"`
	// Weight is the node's --weight; 0 for the default.
	Weight uint32 `json:"weight,omitempty"`
	// BlockCacheBytes is the node's --block-cache; 0 for the default.
	// `up` gives the nodes of one machine a share each of what one
	// server would take (autoBlockCache).
	BlockCacheBytes uint64 `json:"block_cache_bytes,omitempty"`
	// Removed is set once `tyr cluster remove` decommissioned the node.
	Removed bool `json:"removed,omitempty"`
}

// nodeSettings are the settings tyr cluster up gives every node, and
// tyr cluster add the nodes it starts: the servers' flags as given, empty
// for their defaults (in node.json beside the node's own fields).
type nodeSettings struct {
	// Sync is the default sync of the keyspaces the node makes.
	Sync bool `json:"default_sync"`
	// ReweightInterval is --reweight-interval.
	ReweightInterval string `json:"reweight_interval,omitempty"`
	// CapacityPerWeight is --capacity-per-weight.
	CapacityPerWeight string `json:"capacity_per_weight,omitempty"`
	// MinFree is --min-free.
	MinFree string `json:"min_free,omitempty"`
	// FSHomeBytes is --fs-home-bytes.
	FSHomeBytes string `json:"fs_home_bytes,omitempty"`
	// FSSweepGrace is --fs-sweep-grace.
	FSSweepGrace string `json:"fs_sweep_grace,omitempty"`
}

func nodeDir(dir string, k int) string { return filepath.Join(dir, fmt.Sprintf("node%d", k)) }

func (n *localNode) path(name string) string { return filepath.Join(n.dir, name) }

func loadNode(dir string, k int) (*localNode, error) {
	n := &localNode{dir: nodeDir(dir, k)}
	b, err := os.ReadFile(n.path("node.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("node %d: no %s; create the cluster with tyr cluster up", k, n.path("node.json"))
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, n); err != nil {
		return nil, fmt.Errorf("node %d: %s: %w", k, n.path("node.json"), err)
	}
	return n, nil
}

// loadNodes returns every node of the local cluster in dir, node1 first.
func loadNodes(dir string) ([]*localNode, error) {
	var nodes []*localNode
	for k := 1; k <= clusterNodesMax; k++ {
		if _, err := os.Stat(nodeDir(dir, k)); err != nil {
			break
		}
		n, err := loadNode(dir, k)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("no local cluster in %s (no node1 directory)", dir)
	}
	return nodes, nil
}

// pid returns the PID in the node's pid file if that process is still this
// node's tyr server, or 0. A PID that was reused by another process, or a
// process that has exited but not been reaped, counts as not running.
func (n *localNode) pid() int {
	b, err := os.ReadFile(n.path("pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if !proc.Running(pid) {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0
	}
	args := strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--data" && args[i+1] == n.path("data") {
			return pid
		}
	}
	return 0
}

// launch starts the node's server detached from this process (its own
// process group, so it survives the CLI and the CLI's terminal signals),
// records its PID, and waits until it is ready (waitReady). A node that
// does not get ready in time is left running, as it may once more of the
// cluster runs; the error says so.
func (n *localNode) launch(join []string) (*exec.Cmd, error) {
	cmd, exited, err := n.spawn(join)
	if err != nil {
		return nil, err
	}
	if err := n.waitReady(exited); err != nil {
		select {
		case <-exited:
			return nil, err
		default:
		}
		return nil, fmt.Errorf("%w; it still runs as pid %d (tyr cluster stop --node to stop it)", err, cmd.Process.Pid)
	}
	return cmd, nil
}

// spawn starts the node's server as launch does, and waits only until it
// gossips (its gossip-ready file), so that other nodes can join it. exited
// is closed when the process exits.
func (n *localNode) spawn(join []string) (*exec.Cmd, <-chan struct{}, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("find the tyr binary: %w", err)
	}
	for _, f := range []string{"ready", "gossip-ready"} {
		if err := os.Remove(n.path(f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
	}
	logFile, err := os.OpenFile(n.path("log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer logFile.Close()
	args := []string{"server", "--data", n.path("data"), "--listen", n.Listen, "--gossip-listen", n.Gossip,
		"--node-id", n.ID, "--ready-file", n.path("ready"), "--gossip-ready-file", n.path("gossip-ready"),
		"--default-sync=" + strconv.FormatBool(n.Sync)}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	if n.Metrics != "" {
		args = append(args, "--metrics-listen", n.Metrics)
	}
	if n.CapacityBytes != 0 {
		args = append(args, "--capacity", strconv.FormatUint(n.CapacityBytes, 10))
	}
	if n.Weight != 0 {
		args = append(args, "--weight", strconv.FormatUint(uint64(n.Weight), 10))
	}
	if n.ReweightInterval != "" {
		args = append(args, "--reweight-interval", n.ReweightInterval)
	}
	if n.CapacityPerWeight != "" {
		args = append(args, "--capacity-per-weight", n.CapacityPerWeight)
	}
	if n.MinFree != "" {
		args = append(args, "--min-free", n.MinFree)
	}
	if n.FSHomeBytes != "" {
		args = append(args, "--fs-home-bytes", n.FSHomeBytes)
	}
	if n.FSSweepGrace != "" {
		args = append(args, "--fs-sweep-grace", n.FSSweepGrace)
	}
	if n.BlockCacheBytes != 0 {
		args = append(args, "--block-cache", strconv.FormatUint(n.BlockCacheBytes, 10))
	}
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", n.ID, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := writeFileAtomic(n.path("pid"), strconv.Itoa(cmd.Process.Pid)+"\n"); err != nil {
		_ = cmd.Process.Kill()
		return nil, nil, err
	}
	if err := n.waitFile("gossip-ready", exited, "gossiping"); err != nil {
		_ = cmd.Process.Kill()
		return nil, nil, err
	}
	return cmd, exited, nil
}

// readyTimeout bounds how long a node may take to open its data directory,
// join (a failed join takes at most membership.JoinAddressesMax seconds)
// and become ready: catch up on what it missed while down and get its read
// lease, which needs a majority of the ring alive.
const readyTimeout = 90 * time.Second

// waitReady waits until the node is ready: it wrote its ready file, which
// a server does once it serves reads, and its health service says it
// serves (client.Client.Ready). It reports the server's own error line if
// it exits first.
func (n *localNode) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	if err := n.waitFile("ready", exited, "ready"); err != nil {
		return err
	}
	c, err := client.Dial(n.endpoint(), client.WithoutRouting())
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Ready(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s wrote its ready file, but its health service says: %s (log: %s)",
				n.ID, strings.TrimPrefix(err.Error(), "tyr: "), n.path("log"))
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited during start: %s (log: %s)", n.ID, n.lastError(), n.path("log"))
		case <-time.After(clusterPollInterval):
		}
	}
}

// waitFile waits for the node's file name (ready or gossip-ready) for up
// to readyTimeout, or reports the server's own error line if it exits
// first; what says what the file stands for.
func (n *localNode) waitFile(name string, exited <-chan struct{}, what string) error {
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(n.path(name)); err == nil && len(b) > 0 {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited during start: %s (log: %s)", n.ID, n.lastError(), n.path("log"))
		case <-time.After(clusterPollInterval):
		}
	}
	return fmt.Errorf("%s not %s after %v (log: %s)", n.ID, what, readyTimeout, n.path("log"))
}

// lastError returns the last "tyr: " line of the node's log.
func (n *localNode) lastError() string {
	b, _ := os.ReadFile(n.path("log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "tyr: ") {
			return strings.TrimPrefix(lines[i], "tyr: ")
		}
	}
	return "no error line in its log"
}

// stop sends SIGTERM to the node's server and waits up to timeout for it
// to exit, then sends SIGKILL. It reports whether a process was running.
func (n *localNode) stop(timeout time.Duration) (bool, error) {
	pid := n.pid()
	if pid == 0 {
		_ = os.Remove(n.path("pid"))
		return false, nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return true, fmt.Errorf("stop %s (pid %d): %w", n.ID, pid, err)
	}
	if !waitExit(pid, timeout) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return true, fmt.Errorf("kill %s (pid %d): %w", n.ID, pid, err)
		}
		if !waitExit(pid, 5*time.Second) {
			return true, fmt.Errorf("%s (pid %d) still runs 5s after SIGKILL", n.ID, pid)
		}
	}
	_ = os.Remove(n.path("pid"))
	return true, nil
}

func waitExit(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for proc.Running(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(clusterPollInterval)
	}
	return true
}

// endpoint returns the node's client API address from its ready file.
func (n *localNode) endpoint() string {
	b, err := os.ReadFile(n.path("ready"))
	if err != nil || len(b) == 0 {
		return n.Listen
	}
	return strings.TrimSpace(string(b))
}

// freePort returns a port the kernel considers free on 127.0.0.1 now.
// Another process may take it before the node binds it; `up` then fails
// with the node's bind error.
func freePort(network string) (int, error) {
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// planPorts returns each node's client and gossip ports: base+2(k-1) and
// base+2(k-1)+1, or free ports if base is 0.
func planPorts(nodes, base int) ([][2]int, error) {
	if base != 0 && (base < 1024 || base+2*nodes-1 > 65535) {
		return nil, fmt.Errorf("invalid --base-port %d: %d nodes need ports %d to %d, which must lie in [1024, 65535]",
			base, nodes, base, base+2*nodes-1)
	}
	ports := make([][2]int, nodes)
	for k := range ports {
		if base != 0 {
			ports[k] = [2]int{base + 2*k, base + 2*k + 1}
			continue
		}
		// The gossip port must be free for TCP and UDP; a free TCP port
		// that is taken for UDP shows up as the node's bind error.
		client, err := freePort("tcp")
		if err != nil {
			return nil, err
		}
		gossip, err := freePort("tcp")
		if err != nil {
			return nil, err
		}
		ports[k] = [2]int{client, gossip}
	}
	return ports, nil
}

func newClusterUp(e *env) *cobra.Command {
	var (
		nodes, basePort int
		dir, capacity   string
		weight, minFree string
		fsHomeBytes     string
		fsSweepGrace    string
		reweight        string
		perWeight       string
		sync, metrics   bool
		timeout         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local cluster of N tyr servers on 127.0.0.1",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 || nodes > clusterNodesMax {
				return fmt.Errorf("invalid --nodes %d: must be in [1, %d]", nodes, clusterNodesMax)
			}
			if dir == "" {
				return fmt.Errorf("missing --dir")
			}
			capacities, err := parseCapacities(capacity, nodes)
			if err != nil {
				return err
			}
			weights, err := parseWeights(weight, nodes)
			if err != nil {
				return err
			}
			if reweight != "" {
				if _, err := time.ParseDuration(reweight); err != nil {
					return fmt.Errorf("invalid --reweight-interval %q: %w", reweight, err)
				}
			}
			if _, err := parseCapacity("--capacity-per-weight", perWeight); err != nil {
				return err
			}
			if minFree != "" {
				if _, err := parseSize("--min-free", minFree); err != nil {
					return err
				}
			}
			if fsHomeBytes != "" {
				if _, err := parseHomeBytes(fsHomeBytes); err != nil {
					return err
				}
			}
			if fsSweepGrace != "" {
				d, err := time.ParseDuration(fsSweepGrace)
				if err != nil {
					return fmt.Errorf("invalid --fs-sweep-grace %q: %w", fsSweepGrace, err)
				}
				if err := checkSweepGrace(d); err != nil {
					return err
				}
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			return clusterUp(cmd.Context(), e, abs, upOptions{nodes: nodes, basePort: basePort, metrics: metrics,
				capacities: capacities, weights: weights, timeout: timeout,
				settings: nodeSettings{Sync: sync, ReweightInterval: reweight, CapacityPerWeight: perWeight,
					MinFree: minFree, FSHomeBytes: fsHomeBytes, FSSweepGrace: fsSweepGrace}})
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 3, fmt.Sprintf("number of servers, 1 to %d", clusterNodesMax))
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the nodes' data, logs and pid files (DIR/nodeK/)")
	cmd.Flags().IntVar(&basePort, "base-port", 7520,
		"node K serves clients on base+2(K-1) and gossips on base+2(K-1)+1; 0 picks free ports")
	cmd.Flags().BoolVar(&sync, "sync", false, "passed to every node as --default-sync")
	cmd.Flags().BoolVar(&metrics, "metrics", false,
		`serve each node's metrics on a free 127.0.0.1 port, recorded as "metrics" in DIR/nodeK/node.json`)
	cmd.Flags().StringVar(&capacity, "capacity", "",
		"each node's --capacity: one value for every node, or a comma-separated list with one per node; empty: each measures its file system")
	cmd.Flags().StringVar(&weight, "weight", "",
		"each node's --weight in the placement ring: one value for every node, or a comma-separated list with one per node; empty: 1")
	cmd.Flags().StringVar(&reweight, "reweight-interval", "",
		"passed to every node as --reweight-interval (and to nodes tyr cluster add starts); empty: the server's default")
	cmd.Flags().StringVar(&fsHomeBytes, "fs-home-bytes", "",
		"passed to every node as --fs-home-bytes (and to nodes tyr cluster add starts); empty: the server's default")
	cmd.Flags().StringVar(&fsSweepGrace, "fs-sweep-grace", "",
		"passed to every node as --fs-sweep-grace (and to nodes tyr cluster add starts); empty: the server's default")
	cmd.Flags().StringVar(&minFree, "min-free", "",
		"passed to every node as --min-free (and to nodes tyr cluster add starts); empty: the server's default")
	cmd.Flags().StringVar(&perWeight, "capacity-per-weight", "",
		"passed to every node as --capacity-per-weight (and to nodes tyr cluster add starts); empty: the server's default")
	cmd.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "how long to wait for every node to see every other alive")
	return cmd
}

// parseWeights reads `tyr cluster up --weight`: one value for every node,
// or a comma-separated list of one per node. It returns nil for the empty
// string (every node takes the default weight).
func parseWeights(s string, nodes int) ([]uint32, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != 1 && len(parts) != nodes {
		return nil, fmt.Errorf("invalid --weight %q: %d values for %d nodes; give one value for all nodes or one per node", s, len(parts), nodes)
	}
	out := make([]uint32, nodes)
	for i := range out {
		w, err := parseWeight(strings.TrimSpace(parts[min(i, len(parts)-1)]))
		if err != nil {
			return nil, err
		}
		out[i] = w
	}
	return out, nil
}

// parseWeight reads one --weight value, 1 to membership.WeightMax.
func parseWeight(s string) (uint32, error) {
	w, err := strconv.ParseUint(s, 10, 32)
	if err != nil || w < 1 || w > membership.WeightMax {
		return 0, fmt.Errorf("invalid --weight %q: must be an integer in [1, %d]", s, membership.WeightMax)
	}
	return uint32(w), nil
}

// upOptions are the checked flags of `tyr cluster up`.
type upOptions struct {
	nodes, basePort int
	metrics         bool
	// capacities holds each node's --capacity, nil for none.
	capacities []uint64
	// weights holds each node's --weight, nil for the default.
	weights []uint32
	timeout time.Duration
	// settings are every node's.
	settings nodeSettings
}

func clusterUp(ctx context.Context, e *env, dir string, opts upOptions) error {
	count := opts.nodes
	existing, err := loadNodes(dir)
	restart := err == nil
	if restart {
		if len(existing) != count {
			return fmt.Errorf("%s holds a cluster of %d nodes, not %d; use another --dir", dir, len(existing), count)
		}
		for _, n := range existing {
			if pid := n.pid(); pid != 0 {
				return fmt.Errorf("%s already runs a cluster: %s is pid %d; stop it with tyr cluster down --dir %s",
					dir, n.ID, pid, dir)
			}
		}
	}
	ports, err := planPorts(count, opts.basePort)
	if err != nil {
		return err
	}
	nodes := make([]*localNode, count)
	for k := range nodes {
		n := &localNode{dir: nodeDir(dir, k+1), ID: fmt.Sprintf("node%d", k+1), nodeSettings: opts.settings,
			Listen: fmt.Sprintf("127.0.0.1:%d", ports[k][0]), Gossip: fmt.Sprintf("127.0.0.1:%d", ports[k][1])}
		if opts.capacities != nil {
			n.CapacityBytes = opts.capacities[k]
		}
		if opts.weights != nil {
			n.Weight = opts.weights[k]
		}
		n.BlockCacheBytes = autoBlockCache(memoryBytes() / uint64(count))
		if opts.metrics {
			port, err := freePort("tcp")
			if err != nil {
				return err
			}
			n.Metrics = fmt.Sprintf("127.0.0.1:%d", port)
		}
		nodes[k] = n
	}
	for _, n := range nodes {
		for _, o := range nodes {
			if o != n {
				n.Peers = append(n.Peers, o.Gossip)
			}
		}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return err
		}
		b, _ := json.MarshalIndent(n, "", "  ")
		if err := writeFileAtomic(n.path("node.json"), string(b)+"\n"); err != nil {
			return err
		}
	}
	started := make([]*localNode, 0, count)
	fail := func(err error) error {
		for _, n := range started {
			_, _ = n.stop(5 * time.Second)
		}
		return err
	}
	// A new cluster's nodes start one after another, each ready before the
	// next joins. A stopped cluster's nodes start alike but are waited for
	// together once all gossip: a node of it is ready only once it holds
	// its read lease from a majority of the ring, so node1 alone never is.
	exited := make([]<-chan struct{}, 0, count)
	for i, n := range nodes {
		var join []string
		if i > 0 {
			join = []string{nodes[0].Gossip}
		}
		_, done, err := n.spawn(join)
		if err != nil {
			return fail(err)
		}
		started = append(started, n)
		if !restart {
			if err := n.waitReady(done); err != nil {
				return fail(err)
			}
			continue
		}
		exited = append(exited, done)
	}
	for i, done := range exited {
		if err := nodes[i].waitReady(done); err != nil {
			return fail(err)
		}
	}
	if err := waitInStep(ctx, nodes, opts.timeout); err != nil {
		return fail(err)
	}
	for _, n := range nodes {
		fmt.Fprintln(e.stdout, n.endpoint())
	}
	return nil
}

// waitInStep waits until every node reports every node alive and none
// catching up: until then a blob whose replicas are all catching up (one
// is enough at replication 1) refuses reads and commits.
func waitInStep(ctx context.Context, nodes []*localNode, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, n := range nodes {
		c, err := client.Dial(n.endpoint())
		if err != nil {
			return err
		}
		var last string
		for {
			st, err := c.ClusterStatus(ctx)
			behind := catchingUp(st)
			if err == nil && st.Alive() == len(nodes) && len(behind) == 0 {
				break
			}
			switch {
			case err != nil:
				last = err.Error()
			case st.Alive() != len(nodes):
				last = fmt.Sprintf("%d of %d members alive", st.Alive(), len(nodes))
			default:
				last = fmt.Sprintf("%s catching up", strings.Join(behind, ", "))
			}
			select {
			case <-ctx.Done():
				_ = c.Close()
				return fmt.Errorf("%s does not see all %d nodes alive and in step after %v: %s", n.ID, len(nodes), timeout, last)
			case <-time.After(clusterPollInterval):
			}
		}
		_ = c.Close()
	}
	return nil
}

func newClusterStatus(e *env) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print a cluster's members, their states and ring shares, and its keyspaces",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			endpoints, err := statusEndpoints(e, dir)
			if err != nil {
				return err
			}
			st, err := firstStatus(cmd.Context(), endpoints)
			if err != nil {
				return err
			}
			printStatus(e, st)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "ask a running node of the local cluster in DIR instead of --endpoint")
	return cmd
}

// firstStatus returns the status from the first endpoint that answers.
func firstStatus(ctx context.Context, endpoints []string) (client.ClusterStatus, error) {
	var errs []string
	for _, ep := range endpoints {
		c, err := client.Dial(ep)
		if err != nil {
			return client.ClusterStatus{}, err
		}
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := c.ClusterStatus(callCtx)
		cancel()
		_ = c.Close()
		if err == nil {
			return st, nil
		}
		errs = append(errs, fmt.Sprintf("%s: %s", ep, strings.TrimPrefix(err.Error(), "tyr: ")))
	}
	return client.ClusterStatus{}, fmt.Errorf("cluster status: %s", strings.Join(errs, "; "))
}

// catchingUp returns the members of st that say they are catching up.
func catchingUp(st client.ClusterStatus) []string {
	var ids []string
	for _, m := range st.Members {
		if m.CatchingUp {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

func printStatus(e *env, st client.ClusterStatus) {
	fmt.Fprintf(e.stdout, "self %s  ring %s  %d members, %d alive\n", st.Self, st.RingID, len(st.Members), st.Alive())
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tRPC ADDR\tGOSSIP ADDR\tWEIGHT\tRING SHARE")
	for _, m := range st.Members {
		state := m.State
		if m.CatchingUp {
			state += ", catching up"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%.4f\n", m.ID, state, m.RPCAddr, m.GossipAddr, m.Weight, m.RingShare)
	}
	_ = tw.Flush()
	fmt.Fprintf(e.stdout, "%d keyspaces\n", len(st.Keyspaces))
	if len(st.Keyspaces) > 0 {
		fmt.Fprintln(tw, "NAME\tCHUNK SIZE\tREPLICATION\tMVCC\tSYNC")
		for _, k := range st.Keyspaces {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%v\t%v\n", k.Name, k.Config.ChunkSize, k.Config.Replication, k.Config.MVCC, k.Config.Sync)
		}
		_ = tw.Flush()
	}
}

// nodeFlags parses --dir and --node for stop and start.
type nodeFlags struct {
	dir  string
	node int
}

func (f *nodeFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.dir, "dir", "", "directory of the local cluster")
	cmd.Flags().IntVar(&f.node, "node", 0, "node number K (DIR/nodeK)")
}

func (f *nodeFlags) load() (*localNode, error) {
	if f.dir == "" {
		return nil, fmt.Errorf("missing --dir")
	}
	if f.node < 1 || f.node > clusterNodesMax {
		return nil, fmt.Errorf("invalid --node %d: must be in [1, %d]", f.node, clusterNodesMax)
	}
	abs, err := filepath.Abs(f.dir)
	if err != nil {
		return nil, err
	}
	return loadNode(abs, f.node)
}

func newClusterStop() *cobra.Command {
	var (
		f       nodeFlags
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop one node of a local cluster (SIGTERM, then SIGKILL after --timeout)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			n, err := f.load()
			if err != nil {
				return err
			}
			running, err := n.stop(timeout)
			if err != nil {
				return err
			}
			if !running {
				return fmt.Errorf("%s is not running", n.ID)
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait after SIGTERM before SIGKILL")
	return cmd
}

func newClusterStart(e *env) *cobra.Command {
	var f nodeFlags
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Restart one stopped node of a local cluster on its data, ports and ID",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			n, err := f.load()
			if err != nil {
				return err
			}
			if pid := n.pid(); pid != 0 {
				return fmt.Errorf("%s already runs as pid %d", n.ID, pid)
			}
			if _, err := n.launch(n.Peers); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, n.endpoint())
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func newClusterDown(e *env) *cobra.Command {
	var (
		dir     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop every node of a local cluster that its pid files name",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if dir == "" {
				return fmt.Errorf("missing --dir")
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			nodes, err := loadNodes(abs)
			if err != nil {
				return err
			}
			return clusterDown(e, nodes, timeout)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the local cluster")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait after SIGTERM before SIGKILL")
	return cmd
}

// clusterDown stops the nodes concurrently, so each leaves while the
// others still run, and reports the first error.
func clusterDown(e *env, nodes []*localNode, timeout time.Duration) error {
	type result struct {
		n       *localNode
		running bool
		err     error
	}
	results := make(chan result, len(nodes))
	for _, n := range nodes {
		go func() {
			running, err := n.stop(timeout)
			results <- result{n, running, err}
		}()
	}
	var first error
	for range nodes {
		r := <-results
		if r.err != nil && first == nil {
			first = r.err
		}
		if r.running && r.err == nil {
			fmt.Fprintf(e.stdout, "stopped %s\n", r.n.ID)
		}
	}
	return first
}
