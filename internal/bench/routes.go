package bench

import (
	"fmt"
	"sync"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/ring"
)

// routes finds the node that serves a blob as the servers do
// (node.ReadTarget): the blob's version managers on the ring of the
// members not left, the first of them in node-ID order that is alive. It
// is computed once, from one node's view at the start of the run; a
// membership change during the run makes requests take an extra hop, not
// fail.
type routes struct {
	ring  *ring.Ring
	seed  uint64
	rf    int
	alive map[ring.NodeID]int // index into addrs
	addrs []string            // client endpoints of the alive members

	mu    sync.Mutex
	cache map[string]int // key → index into addrs
}

func newRoutes(st client.ClusterStatus, keyspace string, rf int) (*routes, error) {
	r := &routes{seed: ring.KeyspaceSeed(keyspace), rf: rf, alive: map[ring.NodeID]int{}, cache: map[string]int{}}
	var nodes []ring.Node
	for _, m := range st.Members {
		if m.State == client.StateLeft {
			continue
		}
		nodes = append(nodes, ring.Node{ID: ring.NodeID(m.ID), Weight: m.Weight})
		if m.State == client.StateAlive {
			r.alive[ring.NodeID(m.ID)] = len(r.addrs)
			r.addrs = append(r.addrs, m.RPCAddr)
		}
	}
	rg, err := ring.New(ring.Config{}, 0, nodes)
	if err != nil {
		return nil, fmt.Errorf("the ring of %s's cluster status: %w", st.Self, err)
	}
	if rf > rg.Len() {
		return nil, fmt.Errorf("replication %d exceeds the %d members of the ring", rf, rg.Len())
	}
	r.ring = rg
	return r, nil
}

// target returns the index in addrs of the node serving key.
func (r *routes) target(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.cache[key]; ok {
		return i
	}
	i := 0 // any node forwards what it does not serve
	if vms, err := r.ring.VersionManagers(r.seed, key, r.rf); err == nil {
		if id, ok := ring.ReadTarget(vms, func(id ring.NodeID) bool { _, alive := r.alive[id]; return alive }); ok {
			i = r.alive[id]
		}
	}
	r.cache[key] = i
	return i
}
