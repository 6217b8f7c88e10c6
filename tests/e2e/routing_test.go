package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// Series of the metrics the routing test reads.
const (
	readsLocal     = `tyr_reads_total{path="local"}`
	readsForwarded = `tyr_reads_total{path="forwarded_out"}`
	readRPCs       = `tyr_ops_total{code="OK",op="Read"}`
	statRPCs       = `tyr_ops_total{code="OK",op="Stat"}`
	dataReads      = `tyr_data_path_reads_total`
)

// scrape returns the sample values of nodek's metrics, by series.
func scrape(t *testing.T, lc *testserver.LocalCluster, k int) map[string]float64 {
	t.Helper()
	return scrapeAddr(t, lc.MetricsAddr(k))
}

// scrapeAddr returns the sample values of the metrics served at addr, by
// series.
func scrapeAddr(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s metrics: %s", addr, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%s metrics line %q: %v", addr, line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// counts is one series on every node, node1 first.
type counts []float64

func (c counts) sum() float64 {
	s := 0.0
	for _, v := range c {
		s += v
	}
	return s
}

// measure scrapes every node before and after f and returns, per series,
// how much it grew on each node.
func measure(t *testing.T, lc *testserver.LocalCluster, f func()) map[string]counts {
	t.Helper()
	n := len(lc.Endpoints)
	before := make([]map[string]float64, n)
	for k := range n {
		before[k] = scrape(t, lc, k+1)
	}
	f()
	out := map[string]counts{}
	for k := range n {
		after := scrape(t, lc, k+1)
		for _, s := range []string{readsLocal, readsForwarded, readRPCs, statRPCs, dataReads} {
			if out[s] == nil {
				out[s] = make(counts, n)
			}
			out[s][k] = after[s] - before[k][s]
		}
	}
	return out
}

// waitRingsAgree waits until every node answers Ring with the same ring
// and members, every member alive and not catching up, and keyspace ks.
func waitRingsAgree(t *testing.T, lc *testserver.LocalCluster, ks string) {
	t.Helper()
	apis := make([]tyrpb.TyrClient, len(lc.Endpoints))
	for i, ep := range lc.Endpoints {
		conn, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		apis[i] = tyrpb.NewTyrClient(conn)
	}
	testserver.Eventually(t, 20*time.Second, "every node's ring agrees", func() (bool, string) {
		var first *tyrpb.RingResponse
		for i, api := range apis {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := api.Ring(ctx, &tyrpb.RingRequest{})
			cancel()
			if err != nil {
				return false, fmt.Sprintf("node%d: %v", i+1, err)
			}
			if len(r.GetMembers()) != len(apis) {
				return false, fmt.Sprintf("node%d knows %d members", i+1, len(r.GetMembers()))
			}
			for _, m := range r.GetMembers() {
				if m.GetState() != client.StateAlive || m.GetCatchingUp() {
					return false, fmt.Sprintf("node%d sees %s %s, catching up %v", i+1, m.GetId(), m.GetState(), m.GetCatchingUp())
				}
			}
			known := false
			for _, k := range r.GetKeyspaces() {
				known = known || k.GetName() == ks
			}
			if !known {
				return false, fmt.Sprintf("node%d's ring has no keyspace %s", i+1, ks)
			}
			if first == nil {
				first = r
			} else if r.GetRingId() != first.GetRingId() || r.GetMembersId() != first.GetMembersId() {
				return false, fmt.Sprintf("node%d's ring %x/%x differs from node1's %x/%x", i+1,
					r.GetRingId(), r.GetMembersId(), first.GetRingId(), first.GetMembersId())
			}
		}
		return true, ""
	})
}

// TestRouting: on 4 nodes with 2 replicas per blob, a client that routes
// reads sends each read and stat straight to the node that serves it, so
// every one costs exactly one server call and none is forwarded, the reads
// over the data path; a client
// that does not route costs a forward for every blob its endpoint does not
// serve. Each node serves the same blobs either way.
func TestRouting(t *testing.T) {
	const nodes, blobs = 4, 40
	lc := testserver.UpCluster(t, nodes, "--metrics")
	clients := dialAll(t, lc)
	const ks = "routing"
	replicatedKeyspace(t, clients, ks, client.KeyspaceConfig{Replication: 2, MVCC: true})
	waitRingsAgree(t, lc, ks)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	content := func(i int) []byte { return []byte(fmt.Sprintf("blob %d of the routing test", i)) }
	for i := range blobs {
		if _, err := clients[0].WriteCreate(ctx, ks, fmt.Sprintf("r/%d", i), 0, content(i)); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func(c *client.Client) {
		t.Helper()
		for i := range blobs {
			key := fmt.Sprintf("r/%d", i)
			data, err := c.Read(ctx, ks, key, 0, 1024)
			if err != nil {
				t.Fatalf("read %s: %v", key, err)
			}
			if !bytes.Equal(data, content(i)) {
				t.Fatalf("read %s: %q, want %q", key, data, content(i))
			}
			info, err := c.Stat(ctx, ks, key)
			if err != nil {
				t.Fatalf("stat %s: %v", key, err)
			}
			if info.Size != uint64(len(content(i))) {
				t.Fatalf("stat %s: size %d, want %d", key, info.Size, len(content(i)))
			}
		}
	}
	const requests = 2 * blobs // a read and a stat per blob

	plain, err := client.Dial(lc.Endpoints[0], client.WithoutRouting())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	unrouted := measure(t, lc, func() { readAll(plain) })
	forwards := unrouted[readsForwarded].sum()
	t.Logf("without routing: local %v, forwarded %v", unrouted[readsLocal], unrouted[readsForwarded])
	if got := unrouted[readsLocal].sum(); got != requests {
		t.Errorf("without routing: %v local reads, want %d", got, requests)
	}
	if forwards == 0 || forwards == requests {
		t.Errorf("without routing, node1 forwarded %v of %d reads: placement does not matter", forwards, requests)
	}
	if got := unrouted[readsForwarded][0]; got != forwards {
		t.Errorf("without routing, nodes other than node1 forwarded %v reads", forwards-got)
	}
	if got := unrouted[readRPCs].sum() + unrouted[statRPCs].sum(); got != requests+forwards {
		t.Errorf("without routing: %v server calls, want %v (one per request, one per forward)", got, requests+forwards)
	}

	routedClient, err := client.Dial(lc.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	defer routedClient.Close()
	start := time.Now()
	routed := measure(t, lc, func() { readAll(routedClient) })
	t.Logf("with routing: local %v, forwarded %v, %v", routed[readsLocal], routed[readsForwarded], time.Since(start))
	if got := routed[readsForwarded].sum(); got != 0 {
		t.Errorf("with routing: %v reads forwarded, want 0", got)
	}
	if got := routed[readsLocal].sum(); got != requests {
		t.Errorf("with routing: %v local reads, want %d", got, requests)
	}
	if got := routed[readRPCs].sum() + routed[statRPCs].sum(); got != requests {
		t.Errorf("with routing: %v server calls, want %d (exactly one per request)", got, requests)
	}
	if got := routed[dataReads].sum(); got != blobs {
		t.Errorf("with routing: %v reads over the data path, want %d (every read)", got, blobs)
	}
	for k := range nodes {
		if routed[readsLocal][k] != unrouted[readsLocal][k] {
			t.Errorf("node%d served %v reads routed and %v unrouted: the client's targets are not the servers'",
				k+1, routed[readsLocal][k], unrouted[readsLocal][k])
		}
	}
	if t.Failed() {
		t.Logf("node logs:\n%s", lc.Logs())
	}
}
