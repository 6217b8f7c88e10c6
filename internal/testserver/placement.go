package testserver

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/ring"
)

// Holders returns the nodes (1-based, as Signal takes them) that hold
// chunk 0 of key in keyspace ks of replication rf, by the ring node1
// reports: the blob's version managers.
func (c *LocalCluster) Holders(ks, key string, rf int) []int {
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
	var nodes []ring.Node
	addrs := map[ring.NodeID]string{}
	for _, m := range resp.GetMembers() {
		if m.GetState() != client.StateLeft {
			nodes = append(nodes, ring.Node{ID: ring.NodeID(m.GetId()), Weight: m.GetWeight()})
			addrs[ring.NodeID(m.GetId())] = m.GetRpcAddr()
		}
	}
	r, err := ring.New(ring.Config{VirtualNodesPerWeight: resp.GetVirtualNodesPerWeight(), TokensMax: resp.GetTokensMax(),
		HashVersion: resp.GetHashVersion()}, resp.GetRingId(), nodes)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := r.Replicas(ring.KeyspaceSeed(ks), key, 0, rf)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, id := range ids {
		k := 0
		for i := range c.Endpoints {
			if c.Endpoint(i+1) == addrs[id] {
				k = i + 1
			}
		}
		if k == 0 {
			t.Fatalf("ring member %s at %q is none of the cluster's nodes", id, addrs[id])
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
