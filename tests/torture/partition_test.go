package torture

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/lease"
	"github.com/tyrstore/tyr/internal/testserver"
)

// TestTorturePartition is TestTortureCluster over a network that fails:
// each node runs in a network namespace of its own (testserver.NetCluster),
// and each fault hits one node drawn at random: it is cut off the network,
// both ways, for 1 to 8 s ("isolate"), or its link slows to 256 kbit/s for
// 2 to 6 s, delaying what it queues by up to 100 ms and dropping what
// overflows ("lossy"; a token bucket, since netem is often missing from
// container kernels). Its clients stay with
// it, so they see the partition too. A node cut off for longer than its
// read lease stops serving reads and catches up once it is back; the next
// fault waits for that. Each schedule (schedules_test.go) makes its own
// namespaces and removes them before the next begins. Needs root; skipped
// without.
//
//	TYR_TORTURE_SEED=<seed> TYR_TORTURE_DURATION=<length> go test -race -count=1 -run '^TestTorturePartition$' -v ./tests/torture
func TestTorturePartition(t *testing.T) {
	const nodes, replicas = 4, 2
	runSchedules(t, func(t *testing.T, seed uint64, length time.Duration, rep *scheduleReport) {
		faults := partitionSchedule(rand.New(rand.NewPCG(seed, 0x9a27)), length, nodes)
		nc := testserver.UpNetCluster(t, nodes)
		clusterTorture(t, seed, length, faults, rep, nc, nc.Endpoints, replicas, []client.Option{client.WithDialer(nc.Dialer())},
			func(f fault) bool {
				switch f.kind {
				case "isolate":
					nc.Isolate(f.node)
					time.Sleep(f.down)
					nc.Heal(f.node)
					// Cut off for longer than a lease, with room for the
					// renewals in flight, the node surely caught up.
					return f.down > lease.Duration+time.Second
				case "lossy":
					nc.Impair(f.node, "tbf", "rate", "256kbit", "burst", "4kb", "latency", "100ms")
					time.Sleep(f.down)
					nc.Clear(f.node)
					return false
				}
				t.Fatalf("unknown fault %v", f)
				return false
			})
	})
}

// partitionSchedule draws the faults of TestTorturePartition: a healthy gap
// of 1-3 s, then an isolation or a lossy link.
func partitionSchedule(r *rand.Rand, d time.Duration, nodes int) []fault {
	return drawFaults(r, d, nodes, time.Second, 3*time.Second, func() (string, time.Duration) {
		if r.IntN(3) != 0 {
			return "isolate", time.Duration(1000+r.IntN(7000)) * time.Millisecond
		}
		return "lossy", time.Duration(2000+r.IntN(4000)) * time.Millisecond
	})
}
