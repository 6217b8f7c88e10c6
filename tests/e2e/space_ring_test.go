package e2e

// TestRingChangeGivesSpaceBack grows a 3-node cluster holding 128 MiB at
// replication 3 to 5 nodes, and checks that once the changes settle the
// old nodes gave back what moved: every node's physical bytes (what `tyr
// cluster balance` shows as STORED) are within 1.15 times the mean, and
// their total within 1.3 times the logical bytes times the replication.
// Reproduce with
//
//	go test ./tests/e2e -run 'TestRingChangeGivesSpaceBack' -count=1 -v

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

func TestRingChangeGivesSpaceBack(t *testing.T) {
	t.Parallel()
	const (
		blobs     = 64
		blobBytes = 2 << 20
		logical   = blobs * blobBytes
		rf        = 3
	)
	lc := testserver.UpCluster(t, 3)
	c := dial(t, lc.Endpoints[0])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// 256 KiB chunks: 512 chunks to place.
	if _, err := c.CreateKeyspace(ctx, "moved", client.KeyspaceConfig{ChunkSize: 256 << 10, Replication: rf, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	data := make([]byte, blobBytes)
	for b := range blobs {
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		if _, err := c.WriteCreate(ctx, "moved", fmt.Sprintf("b%03d", b), 0, data); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if r := testserver.Run(t, "cluster", "add", "--dir", lc.Dir); r.Exit != 0 || !strings.Contains(r.Stdout, "clean") {
			t.Fatalf("tyr cluster add: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
		}
	}
	began := time.Now()
	usages := func() ([]client.NodeUsage, error) {
		var out []client.NodeUsage
		for k := 1; k <= 5; k++ {
			u, err := dial(t, lc.Endpoint(k)).NodeUsage(ctx)
			if err != nil {
				return nil, err
			}
			out = append(out, u)
		}
		return out, nil
	}
	var last []client.NodeUsage
	testserver.Eventually(t, 3*time.Minute, "the old nodes give the moved data's space back", func() (bool, string) {
		us, err := usages()
		if err != nil {
			return false, err.Error()
		}
		last = us
		var total, held uint64
		hi := uint64(0)
		for _, u := range us {
			total += u.StoredBytes
			held += u.LogicalBytes
			hi = max(hi, u.StoredBytes)
		}
		mean := float64(total) / float64(len(us))
		ok := float64(hi) <= 1.15*mean && float64(total) <= 1.3*logical*rf && held == logical*rf
		return ok, fmt.Sprintf("stored %s, max/mean %.3f, total/(logical x %d) %.3f, logical held %d of %d",
			storedList(us), float64(hi)/mean, rf, float64(total)/(logical*rf), held, logical*rf)
	})
	t.Logf("settled %v after the second add: stored %s", time.Since(began).Round(time.Second), storedList(last))
	// Every blob reads back through every node.
	for k := 1; k <= 5; k++ {
		nc := dial(t, lc.Endpoint(k))
		for b := range blobs {
			got, err := nc.Read(ctx, "moved", fmt.Sprintf("b%03d", b), 0, blobBytes)
			if err != nil || len(got) != blobBytes {
				t.Fatalf("read b%03d through node%d: %d bytes, %v", b, k, len(got), err)
			}
		}
	}
}

func storedList(us []client.NodeUsage) string {
	parts := make([]string, len(us))
	for i, u := range us {
		parts[i] = fmt.Sprintf("%s=%.1fMiB(logical %.1f)", u.NodeID, float64(u.StoredBytes)/(1<<20), float64(u.LogicalBytes)/(1<<20))
	}
	return strings.Join(parts, " ")
}
