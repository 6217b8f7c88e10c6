package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
)

// ringPoll is how often add and remove ask the coordinator for progress.
const ringPoll = time.Second

func newClusterAdd(e *env) *cobra.Command {
	var (
		dir, capacity, weight string
		timeout               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Start one more node of a local cluster and wait until the ring coordinator has moved its share of the data to it",
		Long: `Start one more node of a local cluster (DIR/nodeK, K one more than the
last) on free 127.0.0.1 ports, joined to the others, and wait while the
ring coordinator gives it token ranges and the data of those ranges moves
to it in the background, printing progress. Reads and writes go on
meanwhile. A server started elsewhere with tyr server --join is added the
same way, without this command.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("missing --dir")
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			var capBytes uint64
			if capacity != "" {
				if capBytes, err = parseCapacity("--capacity", capacity); err != nil {
					return err
				}
			}
			var w uint32
			if weight != "" {
				if w, err = parseWeight(weight); err != nil {
					return err
				}
			}
			return clusterAdd(cmd.Context(), e, abs, capBytes, w, timeout)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the local cluster")
	cmd.Flags().StringVar(&capacity, "capacity", "", "the new node's --capacity; empty: it measures its file system")
	cmd.Flags().StringVar(&weight, "weight", "", "the new node's --weight in the placement ring; empty: 1")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long to wait for the data to move")
	return cmd
}

// addPortAttempts is how many times clusterAdd starts the new node on
// freshly chosen ports, when another process took one first.
const addPortAttempts = 3

func clusterAdd(ctx context.Context, e *env, dir string, capBytes uint64, weight uint32, timeout time.Duration) error {
	nodes, err := loadNodes(dir)
	if err != nil {
		return err
	}
	if len(nodes) >= clusterNodesMax {
		return fmt.Errorf("%s already holds %d nodes, the most a local cluster has", dir, clusterNodesMax)
	}
	k := len(nodes) + 1
	n := &localNode{dir: nodeDir(dir, k), ID: fmt.Sprintf("node%d", k), nodeSettings: nodes[0].nodeSettings,
		CapacityBytes: capBytes, Weight: weight}
	var endpoints []string
	for _, o := range nodes {
		n.Peers = append(n.Peers, o.Gossip)
		if !o.Removed && o.pid() != 0 {
			endpoints = append(endpoints, o.endpoint())
		}
	}
	if len(endpoints) == 0 {
		return fmt.Errorf("no node of %s is running; start the cluster first", dir)
	}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return err
	}
	// The ports are free when chosen, but another process may bind one
	// before the node does: the node then exits during its start, and is
	// started again on other ports.
	for attempt := 1; ; attempt++ {
		var ports [2]int
		for i := range ports {
			if ports[i], err = freePort("tcp"); err != nil {
				return err
			}
		}
		n.Listen, n.Gossip = fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
		b, _ := json.MarshalIndent(n, "", "  ")
		if err := writeFileAtomic(n.path("node.json"), string(b)+"\n"); err != nil {
			return err
		}
		_, err := n.launch(n.Peers)
		if err == nil {
			break
		}
		if msg := err.Error(); attempt == addPortAttempts || !strings.Contains(msg, "exited during start") ||
			!strings.Contains(msg, "address already in use") {
			return err
		}
	}
	fmt.Fprintf(e.stdout, "started %s at %s\n", n.ID, n.endpoint())
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return watchRing(ctx, e.stdout, append(endpoints, n.endpoint()), func(rec rebalance.Record) bool {
		return rec.InNew(ring.NodeID(n.ID)) && rec.Phase == rebalance.PhaseClean
	})
}

func newClusterRemove(e *env) *cobra.Command {
	var (
		dir, endpoint string
		timeout       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "remove NODE",
		Short: "Decommission a node: move its data to the others, then take it out of the ring",
		Long: `Decommission NODE: the ring coordinator proposes a ring without it, the
data of its ranges moves to the nodes that take them over while reads and
writes go on, and NODE leaves the ring once every node has switched. With
--dir (a local cluster) the node's server is then stopped. A removal that
would leave fewer nodes than a keyspace's replication factor is refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return clusterRemove(cmd.Context(), e, args[0], dir, endpoint, timeout)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of a local cluster (stops the node once removed)")
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "a server of the cluster (default: $TYR_ENDPOINT, or the nodes of --dir)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long to wait for the data to move")
	return cmd
}

func clusterRemove(ctx context.Context, e *env, id, dir, endpoint string, timeout time.Duration) error {
	var local *localNode
	var endpoints []string
	if endpoint == "" {
		endpoint = os.Getenv("TYR_ENDPOINT")
	}
	if endpoint != "" {
		endpoints = append(endpoints, endpoint)
	}
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		nodes, err := loadNodes(abs)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			switch {
			case n.ID == id:
				local = n
			case !n.Removed && n.pid() != 0:
				endpoints = append(endpoints, n.endpoint())
			}
		}
		if local == nil {
			return fmt.Errorf("no node %q in the local cluster %s", id, abs)
		}
	}
	if len(endpoints) == 0 {
		return fmt.Errorf("missing --endpoint or --dir")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	proposed, err := proposeRemove(ctx, e.stdout, endpoints, id)
	if err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	fmt.Fprintf(e.stdout, "removing %s: epoch %d\n", id, proposed.Epoch)
	err = watchRing(ctx, e.stdout, endpoints, func(rec rebalance.Record) bool {
		if rec.InNew(ring.NodeID(id)) && rec.Phase == rebalance.PhaseClean {
			// The proposal was lost with a coordinator that died before
			// spreading it: ask its successor again.
			_, _ = ringCall(ctx, endpoints, id)
			return false
		}
		return !rec.InNew(ring.NodeID(id)) && rec.Phase == rebalance.PhaseClean
	})
	if err != nil {
		return err
	}
	if local != nil {
		if _, err := local.stop(10 * time.Second); err != nil {
			return err
		}
		local.Removed = true
		b, _ := json.MarshalIndent(local, "", "  ")
		if err := writeFileAtomic(local.path("node.json"), string(b)+"\n"); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "stopped %s\n", id)
	} else {
		fmt.Fprintf(e.stdout, "%s holds no data any more; stop its server\n", id)
	}
	return nil
}

// proposeRemove asks the coordinator to take id out of the ring and returns
// the record it proposed. An unavailable answer is asked again every
// ringPoll until ctx ends: another change is in progress, or the
// coordinator died or changed while answering. In the second case the
// proposal may have been made all the same, so the ring is read before
// asking again: a ring without id is the proposal.
func proposeRemove(ctx context.Context, w io.Writer, endpoints []string, id string) (rebalance.Record, error) {
	var rec rebalance.Record
	for {
		rc, err := ringCall(ctx, endpoints, id)
		if err == nil {
			if err := json.Unmarshal(rc.Record, &rec); err != nil {
				return rec, fmt.Errorf("the coordinator's ring record: %w", err)
			}
			return rec, nil
		}
		if !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			return rec, err
		}
		if ctx.Err() != nil {
			return rec, err
		}
		if strings.Contains(err.Error(), "in progress") {
			fmt.Fprintf(w, "waiting for the ring change in progress to finish\n")
		} else {
			fmt.Fprintf(w, "the coordinator did not answer (%v); asking again\n", err)
			if cur, err := ringCall(ctx, endpoints, ""); err == nil && len(cur.Record) > 0 {
				if err := json.Unmarshal(cur.Record, &rec); err == nil && !rec.InNew(ring.NodeID(id)) {
					return rec, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return rec, err
		case <-time.After(ringPoll):
		}
	}
}

// ringCall asks the first endpoint that answers.
func ringCall(ctx context.Context, endpoints []string, remove string) (client.RingChange, error) {
	var errList []error
	for _, ep := range endpoints {
		c, err := client.Dial(ep, client.WithoutRouting())
		if err != nil {
			errList = append(errList, err)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rc, err := c.RingChange(cctx, remove)
		cancel()
		_ = c.Close()
		if err == nil {
			return rc, nil
		}
		var ce *client.Error
		if remove != "" && errors.As(err, &ce) {
			return rc, err // the coordinator's answer: do not ask it twice
		}
		errList = append(errList, fmt.Errorf("%s: %w", ep, err))
	}
	return client.RingChange{}, errors.Join(errList...)
}

// watchRing prints the coordinator's progress every ringPoll until done
// holds for its record.
func watchRing(ctx context.Context, w io.Writer, endpoints []string, done func(rebalance.Record) bool) error {
	began := time.Now()
	last := ""
	for {
		rc, err := ringCall(ctx, endpoints, "")
		if err == nil && len(rc.Record) > 0 {
			var rec rebalance.Record
			if err := json.Unmarshal(rc.Record, &rec); err != nil {
				return fmt.Errorf("the coordinator's ring record: %w", err)
			}
			line := formatRingProgress(rec, rc)
			if line != last {
				fmt.Fprintf(w, "%6.1fs %s\n", time.Since(began).Seconds(), line)
				last = line
			}
			if done(rec) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the ring change did not finish in time (last: %s): %w", last, ctx.Err())
		case <-time.After(ringPoll):
		}
	}
}

// formatRingProgress is one line of progress.
func formatRingProgress(rec rebalance.Record, rc client.RingChange) string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d %s (coordinator %s, %d nodes)", rec.Epoch, rec.Phase, rc.Coordinator, len(rec.New))
	moves := slices.Clone(rc.Moves)
	slices.SortFunc(moves, func(a, b client.RingMove) int { return strings.Compare(a.Node, b.Node) })
	for _, m := range moves {
		state := "copying"
		if m.Copied {
			state = "copied"
		}
		fmt.Fprintf(&b, "; %s %s %s in %d blobs (%.1f%% of the hash space)", m.Node, state,
			formatBytes(m.CopiedBytes), m.CopiedBlobs, 100*m.Share)
	}
	return b.String()
}
