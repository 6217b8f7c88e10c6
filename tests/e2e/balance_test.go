package e2e

// TestClusterBalance proves `tyr cluster balance` end to end: on a 3-node
// local cluster started with capacities 64, 128 and 256 MiB and holding a
// few MiB of blobs, every node reports its configured capacity and a
// non-zero number of bytes stored, the node that coordinated the writes
// reports a non-zero operation rate, and the max/mean utilization printed
// is the one the printed capacities and stored bytes give. Then, with one
// node stopped by SIGSTOP, that node is listed as unreachable and left out
// of the figure. Reproduce with
//
//	go test ./tests/e2e -run 'TestClusterBalance$' -count=1 -v

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// balanceLine is one member's line of `tyr cluster balance`.
type balanceLine struct {
	node, state, capacity, free, stored, logical, reclaim, utilization, ops string
}

// balanceOutput is what the test reads of `tyr cluster balance`.
type balanceOutput struct {
	lines   []balanceLine
	maxMean float64 // -1 if no max/mean line
	text    string
}

var (
	balanceColumns = regexp.MustCompile(`\s{2,}`)
	balanceMaxMean = regexp.MustCompile(`(?m)^max/mean utilization ([0-9.]+) over (\d+) of (\d+) members$`)
)

// runBalance runs `tyr cluster balance` on lc with extra flags, requires
// exit 0 and parses the output.
func runBalance(t *testing.T, lc *testserver.LocalCluster, extra ...string) balanceOutput {
	t.Helper()
	r := testserver.Run(t, append([]string{"cluster", "balance", "--dir", lc.Dir}, extra...)...)
	if r.Exit != 0 {
		t.Fatalf("tyr cluster balance: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	out := balanceOutput{maxMean: -1, text: r.Stdout}
	lines := strings.Split(r.Stdout, "\n")
	for i := 2; i < len(lines) && !strings.HasPrefix(lines[i], "max/mean") && lines[i] != ""; i++ {
		cells := balanceColumns.Split(strings.TrimSpace(lines[i]), -1)
		if len(cells) != 9 {
			t.Fatalf("line %q has %d columns, want 9:\n%s", lines[i], len(cells), r.Stdout)
		}
		out.lines = append(out.lines, balanceLine{cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], cells[6], cells[7], cells[8]})
	}
	if m := balanceMaxMean.FindStringSubmatch(r.Stdout); m != nil {
		out.maxMean, _ = strconv.ParseFloat(m[1], 64)
	}
	return out
}

// shownBytes reads a size as the command prints it ("4.72 MiB", "512 B").
func shownBytes(t *testing.T, s string) float64 {
	t.Helper()
	units := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
	number, unit, ok := strings.Cut(s, " ")
	v, err := strconv.ParseFloat(number, 64)
	if !ok || err != nil || units[unit] == 0 {
		t.Fatalf("size %q is not a number and a unit", s)
	}
	return v * units[unit]
}

func TestClusterBalance(t *testing.T) {
	t.Parallel()
	testserver.Binary(t) // build outside the measured steps
	began := time.Now()
	capacities := []string{"64.0 MiB", "128 MiB", "256 MiB"}
	lc := testserver.UpCluster(t, 3, "--capacity", "64MiB,128MiB,256MiB")
	t.Logf("cluster up: %v", time.Since(began))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dial(t, lc.Endpoints[0])
	if _, err := c.CreateKeyspace(ctx, "balance", client.KeyspaceConfig{ChunkSize: 64 << 10, Replication: 2, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	const seed = 5
	rng := rand.New(rand.NewPCG(seed, seed))
	data := make([]byte, 96<<10)
	for i := range 24 {
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if _, err := c.WriteCreate(ctx, "balance", fmt.Sprintf("blob-%02d", i), 0, data); err != nil {
			t.Fatal(err)
		}
	}

	t.Logf("cluster up and writes: %v", time.Since(began))

	// node1 coordinated the writes: its rate shows once their second is
	// over.
	var out balanceOutput
	testserver.Eventually(t, 10*time.Second, "node1 reports a non-zero operation rate", func() (bool, string) {
		out = runBalance(t, lc)
		if len(out.lines) != 3 {
			t.Fatalf("%d members listed, want 3:\n%s", len(out.lines), out.text)
		}
		ops, err := strconv.ParseFloat(out.lines[0].ops, 64)
		return err == nil && ops > 0, out.text
	})
	t.Logf("tyr cluster balance:\n%s", out.text)
	var utilizations []float64
	logical := 0.0
	for i, l := range out.lines {
		logical += shownBytes(t, l.logical)
		if want := fmt.Sprintf("node%d", i+1); l.node != want || l.state != client.StateAlive {
			t.Errorf("line %d: node %s %s, want %s alive", i+1, l.node, l.state, want)
		}
		if l.capacity != capacities[i] {
			t.Errorf("%s: capacity %q, want the configured %q", l.node, l.capacity, capacities[i])
		}
		stored := shownBytes(t, l.stored)
		if stored <= 0 {
			t.Errorf("%s: stored %q after writing %d bytes twice over 3 nodes", l.node, l.stored, 24*len(data))
		}
		utilizations = append(utilizations, stored/shownBytes(t, l.capacity))
	}
	var sum float64
	for _, u := range utilizations {
		sum += u
	}
	// The printed sizes have three significant digits: allow 2%.
	want := slices.Max(utilizations) / (sum / float64(len(utilizations)))
	if out.maxMean < 0 || math.Abs(out.maxMean-want) > 0.02*want || !strings.Contains(out.text, "over 3 of 3 members") {
		t.Errorf("max/mean utilization %v, want %.3f from the printed figures over 3 of 3 members:\n%s", out.maxMean, want, out.text)
	}

	// Each blob is 96 KiB in 64 KiB chunks at 2 replicas: the nodes' logical
	// bytes add up to twice the data (three printed digits: allow 2%).
	if wantLogical := float64(2 * 24 * len(data)); math.Abs(logical-wantLogical) > 0.02*wantLogical {
		t.Errorf("logical bytes add up to %.0f, want %.0f (two replicas of %d blobs of %d bytes):\n%s", logical, wantLogical, 24, len(data), out.text)
	}

	// A stopped node does not answer: it is listed, marked, and left out.
	lc.Signal(3, syscall.SIGSTOP)
	t.Cleanup(func() { lc.Signal(3, syscall.SIGCONT) }) // before the cluster is taken down
	out = runBalance(t, lc, "--timeout", "1s")
	lc.Signal(3, syscall.SIGCONT)
	if len(out.lines) != 3 || out.lines[2].capacity != "-" || out.lines[2].utilization != "-" {
		t.Errorf("stopped node3 not marked:\n%s", out.text)
	}
	u1, u2 := utilizationOf(t, out.lines[0]), utilizationOf(t, out.lines[1])
	want = math.Max(u1, u2) / ((u1 + u2) / 2)
	if math.Abs(out.maxMean-want) > 0.02*want || !strings.Contains(out.text, "over 2 of 3 members") ||
		!strings.Contains(out.text, "note: node3 is left out of the figures: unreachable: no answer from") {
		t.Errorf("with node3 stopped: max/mean %v, want %.3f over node1 and node2, and a note on node3:\n%s", out.maxMean, want, out.text)
	}
	t.Logf("with node3 stopped:\n%s", out.text)
	t.Logf("whole test: %v", time.Since(began))
}

// utilizationOf returns a line's stored bytes over its capacity.
func utilizationOf(t *testing.T, l balanceLine) float64 {
	return shownBytes(t, l.stored) / shownBytes(t, l.capacity)
}
