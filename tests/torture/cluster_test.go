package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// Bounds of the cluster nemesis's waits.
const (
	// deadMax bounds how long the survivors take to declare a killed node
	// dead (docs/cluster.md: 4-7 s measured).
	deadMax = 25 * time.Second
	// caughtUpMax bounds how long a restarted or resumed node takes to
	// catch up.
	caughtUpMax = 60 * time.Second
	// pauseNoticed: a pause longer than this (node.PauseMax, with room)
	// makes the node catch up when it resumes.
	pauseNoticed = 2500 * time.Millisecond
)

// TestTortureCluster is TestTorture against a 4-node cluster keeping two
// replicas of each 16 KiB chunk, so every register blob (up to 48 KiB) is
// spread over the nodes and most reads of one span chunks held by several.
// The clients dial all four nodes. Each fault hits one node drawn at
// random: a kill -9, after which the node is restarted once the others
// declared it dead, or a SIGSTOP/SIGCONT pause. The next fault waits until
// the node has caught up, so no chunk ever loses both replicas at once
// (what holds with f failed nodes: docs/architecture.md).
//
//	TYR_TORTURE_SEED=<seed> TYR_TORTURE_DURATION=<d> go test -race -count=1 -run TestTortureCluster -v ./tests/torture
func TestTortureCluster(t *testing.T) {
	const nodes = 4
	seed := seedFromEnv(t)
	duration := durationFromEnv(t)
	faults := schedule(rand.New(rand.NewPCG(seed, 0xc105e7)), duration, nodes)
	lc := testserver.UpCluster(t, nodes)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("catch-up lines of the nodes' logs:\n%s", lc.LogLines("catch", 30))
		}
	})
	admins := make([]*client.Client, nodes)
	for i, ep := range lc.Endpoints {
		c, err := client.Dial(ep)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		admins[i] = c
	}
	ctx := context.Background()
	if _, err := admins[0].CreateKeyspace(ctx, tortureKeyspace,
		client.KeyspaceConfig{ChunkSize: 16 << 10, Replication: 2, MVCC: true, Sync: true}); err != nil {
		t.Fatalf("create keyspace: %v", err)
	}
	for i, c := range admins {
		testserver.Eventually(t, 15*time.Second, fmt.Sprintf("keyspace on node%d", i+1), func() (bool, string) {
			_, err := c.Keyspace(ctx, tortureKeyspace)
			return err == nil, fmt.Sprint(err)
		})
	}
	caughtUp := make([]int, nodes+1)
	for k := 1; k <= nodes; k++ {
		caughtUp[k] = lc.WaitLog(k, "caught up", 0, caughtUpMax)
	}
	runTorture(t, seed, duration, faults, tortureTarget{endpoints: lc.Endpoints, inject: func(f fault) {
		k := f.node
		other := admins[k%nodes] // a node that stays up
		switch f.kind {
		case "kill":
			lc.Signal(k, syscall.SIGKILL)
			time.Sleep(f.down)
			testserver.Eventually(t, deadMax, fmt.Sprintf("node%d declared dead", k), func() (bool, string) {
				st := testserver.MemberState(other, fmt.Sprintf("node%d", k))
				return st == client.StateDead, "state " + st
			})
			lc.Start(k)
		case "pause":
			lc.Signal(k, syscall.SIGSTOP)
			time.Sleep(f.down)
			lc.Signal(k, syscall.SIGCONT)
			if f.down < pauseNoticed {
				return
			}
		}
		caughtUp[k] = lc.WaitLog(k, "caught up", caughtUp[k], caughtUpMax)
	}})
}
