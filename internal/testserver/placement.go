package testserver

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/ring"
)

// Placer tells which nodes of a LocalCluster hold a key, from one copy of
// the ring, computed as clients and servers compute it.
type Placer struct {
	t    testing.TB
	r    *ring.Ring
	node map[ring.NodeID]int // member -> k of nodek
}

// Placer returns a Placer over the ring node1 reports now; it stays
// usable when nodes go down afterwards.
func (c *LocalCluster) Placer() Placer {
	t := c.t
	t.Helper()
	conn, err := grpc.NewClient(c.Endpoint(1), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := tyrpb.NewTyrClient(conn).Ring(ctx, &tyrpb.RingRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p := Placer{t: t, node: map[ring.NodeID]int{}}
	var nodes []ring.Node
	for _, m := range resp.GetMembers() {
		if m.GetState() == client.StateLeft {
			continue
		}
		nodes = append(nodes, ring.Node{ID: ring.NodeID(m.GetId()), Weight: m.GetWeight()})
		k := slices.Index(c.Endpoints, m.GetRpcAddr()) + 1
		if k == 0 {
			t.Fatalf("ring member %s serves at %s, none of the cluster's nodes (%v)", m.GetId(), m.GetRpcAddr(), c.Endpoints)
		}
		p.node[ring.NodeID(m.GetId())] = k
	}
	if len(nodes) != len(c.Endpoints) {
		t.Fatalf("the ring holds %d members, the cluster %d nodes", len(nodes), len(c.Endpoints))
	}
	p.r, err = ring.New(ring.Config{VirtualNodesPerWeight: resp.GetVirtualNodesPerWeight(), TokensMax: resp.GetTokensMax(),
		HashVersion: resp.GetHashVersion()}, resp.GetRingId(), nodes)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Holders returns the nodes (k of nodek, sorted) that hold chunk 0 of key
// in keyspace ks of replication rf: the blob's version managers.
func (p Placer) Holders(ks, key string, rf int) []int {
	p.t.Helper()
	ids, err := p.r.Replicas(ring.KeyspaceSeed(ks), key, 0, rf)
	if err != nil {
		p.t.Fatal(err)
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = p.node[id]
	}
	slices.Sort(out)
	return out
}

// On reports whether nodek holds chunk 0 of key (see Holders).
func (p Placer) On(ks, key string, rf int, k int) bool {
	p.t.Helper()
	return slices.Contains(p.Holders(ks, key, rf), k)
}

// Holders is Placer().Holders: which nodes hold chunk 0 of key.
func (c *LocalCluster) Holders(ks, key string, rf int) []int {
	c.t.Helper()
	return c.Placer().Holders(ks, key, rf)
}

// FreeLoopbackAddr returns a loopback address with a port that was free a
// moment ago, for a server flag that takes an address (--metrics-listen).
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// Metric returns the values of counter name in the Prometheus text that
// the metrics address addr serves, by the value of its one label; it
// fails the test if there are none.
func Metric(t testing.TB, addr, name string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), name+"{")
		if !ok {
			continue
		}
		_, rest, _ := strings.Cut(line, `="`)
		label, value, ok := strings.Cut(rest, `"} `)
		v, err := strconv.ParseFloat(value, 64)
		if !ok || err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
		out[label] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no %s in the metrics at %s", name, addr)
	}
	return out
}

// WaitRefused waits until connections to addr are refused, and a moment
// more, so that the connections clients held to it saw it close: a
// request sent while a killed process may still read it has an outcome
// only resolution can tell.
func WaitRefused(t testing.TB, addr string) {
	t.Helper()
	Eventually(t, 10*time.Second, addr+" refusing connections", func() (bool, string) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true, ""
		}
		_ = conn.Close()
		return false, "still accepting"
	})
	time.Sleep(100 * time.Millisecond)
}
