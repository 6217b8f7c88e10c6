package e2e

// Weighted tokens on a running cluster: three nodes of configured
// capacities 64, 128 and 256 MiB at 1 MiB per weight start on the ring of
// their advertised weights, and the ring coordinator's first change weighs
// them by capacity while blobs are written; with a reweight interval of one
// second the coordinator then weighs the ring against the bytes each node
// stores and proposes new weights, which take effect like any ring change,
// and every acknowledged write stays readable.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/testserver"
)

// capacityOrdered reports whether nodes node1, node2 and node3 have
// weights in the order of their capacities, 1:2:4, each at least 1.5
// times the one before.
func capacityOrdered(nodes []ring.Node) bool {
	if len(nodes) != 3 {
		return false
	}
	w := map[ring.NodeID]float64{}
	for _, n := range nodes {
		w[n.ID] = float64(n.Weight)
	}
	return w["node1"] > 0 && w["node2"] >= 1.5*w["node1"] && w["node3"] >= 1.5*w["node2"]
}

func TestReweightByCapacity(t *testing.T) {
	t.Parallel()
	testserver.Binary(t)
	began := time.Now()
	lc := testserver.UpCluster(t, 3, "--capacity", "64MiB,128MiB,256MiB",
		"--capacity-per-weight", "1MiB", "--reweight-interval", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The first ring is the view's, at the advertised weight 1, under
	// which the nodes placed chunks before it; the coordinator's first
	// change gives each node its capacity weight and moves the data.
	testserver.Eventually(t, 15*time.Second, "the first ring epoch", func() (bool, string) {
		rec, _, ok := ringRecord(t, lc.Endpoints)
		return ok, fmt.Sprintf("%+v", rec)
	})
	capacity := []ring.Node{{ID: "node1", Weight: 64}, {ID: "node2", Weight: 128}, {ID: "node3", Weight: 256}}
	coordinatorLog := func() string {
		b, _ := os.ReadFile(lc.NodeFile(1, "log"))
		return string(b)
	}

	c := dial(t, lc.Endpoints[0])
	if _, err := c.CreateKeyspace(ctx, "reweight", client.KeyspaceConfig{ChunkSize: 64 << 10, Replication: 2, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	written := map[string][]byte{}
	for i := range 32 {
		data := make([]byte, 96<<10)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		key := fmt.Sprintf("blob-%02d", i)
		if _, err := c.WriteCreate(ctx, "reweight", key, 0, data); err != nil {
			t.Fatal(err)
		}
		written[key] = data
	}
	t.Logf("cluster up and writes: %v", time.Since(began))

	// The writes ran while the ring took the capacity weights.
	testserver.Eventually(t, 20*time.Second, "the capacity weights proposed", func() (bool, string) {
		for _, line := range strings.Split(coordinatorLog(), "\n") {
			if strings.Contains(line, "ring capacity weights proposed") {
				return strings.Contains(line, `weights="node1=64 node2=128 node3=256"`), line
			}
		}
		return false, "no proposal logged"
	})

	// The coordinator then reweights: a later epoch, same members,
	// weights still in the order of the capacities, and clean everywhere.
	var rec rebalance.Record
	testserver.Eventually(t, 40*time.Second, "a reweighted epoch, clean", func() (bool, string) {
		var ok bool
		rec, _, ok = ringRecord(t, lc.Endpoints)
		return ok && rec.Phase == rebalance.PhaseClean && fmt.Sprint(rec.New) != fmt.Sprint(capacity) &&
			capacityOrdered(rec.New) && strings.Contains(coordinatorLog(), "ring reweight proposed"), fmt.Sprintf("%+v", rec)
	})
	t.Logf("epoch %d: %v (reweighted after %v)", rec.Epoch, rec.New, time.Since(began))
	if len(rec.Removed) != 0 {
		t.Errorf("epoch %d: members %v removed %v; want node1..node3", rec.Epoch, rec.New, rec.Removed)
	}

	// Every acknowledged write is readable, through every node.
	for k, ep := range lc.Endpoints {
		rc := dial(t, ep)
		for key, data := range written {
			got, err := rc.Read(ctx, "reweight", key, 0, uint64(len(data)))
			if err != nil {
				t.Fatalf("node%d: read %s: %v", k+1, key, err)
			}
			if !bytes.Equal(got, data) {
				at := 0
				for at < len(got) && got[at] == data[at] {
					at++
				}
				zeros := len(got) > at && bytes.Count(got[at:min(len(got), at+1024)], []byte{0}) == min(len(got), at+1024)-at
				t.Errorf("node%d: read %s: %d bytes, not the %d written: they differ from byte %d (chunk %d; zeros there: %v)",
					k+1, key, len(got), len(data), at, at/(64<<10), zeros)
			}
		}
	}
	t.Logf("total: %v", time.Since(began))
}
