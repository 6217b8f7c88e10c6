package node

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// FuzzPeerMessage: any bytes a peer sends as a chain message either fail to
// decode with an invalid-argument error or decode to an envelope that
// survives encoding and decoding unchanged. Any refusal text decodes to a
// classified error.
func FuzzPeerMessage(f *testing.F) {
	seed := encodeEnvelope(envelope{keyspace: "ks", version: 7, begun: 3, sent: 4,
		msg: chain.Message{Type: chain.MsgForward, From: "n1", To: "n2", Txn: chain.TxnID{Coordinator: "n1", Seq: 9},
			Index: 1, Chain: []ring.NodeID{"n1", "n2"}, Origin: []ring.NodeID{"n1", "n2", "n3"},
			Ops: []txn.Op{{Key: "k", Kind: txn.OpAppend, Data: []byte("x"), Create: true}}},
		bases: map[string]mvcc.Base{"k": {Version: 5, Size: 10, Chunks: map[uint64]uint64{0: 5}}}})
	b, err := proto.Marshal(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, "locked: blob \"k\"")
	f.Add([]byte{}, "stale 12: x")
	f.Add([]byte{0x08, 0x00}, "code 5: not found")
	f.Fuzz(func(t *testing.T, data []byte, refusal string) {
		if r := decodeRefusal(refusal); r.err == nil {
			t.Fatalf("refusal %q decoded to no error", refusal)
		} else if _, ok := errs.Code(r.err); !ok {
			t.Fatalf("refusal %q decoded to an unclassified error %v", refusal, r.err)
		}
		var m peerpb.Message
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		e, err := decodeEnvelope(&m)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalidArgument) {
				t.Fatalf("decode error of another class: %v", err)
			}
			return
		}
		again, err := decodeEnvelope(encodeEnvelope(e))
		if err != nil {
			t.Fatalf("a decoded envelope does not decode again: %v", err)
		}
		if !reflect.DeepEqual(normalize(e), normalize(again)) {
			t.Fatalf("round trip changed the envelope:\n%+v\n%+v", e, again)
		}
	})
}

// normalize makes empty and nil slices and maps compare equal.
func normalize(e envelope) envelope {
	if len(e.msg.Chain) == 0 {
		e.msg.Chain = nil
	}
	if len(e.msg.Origin) == 0 {
		e.msg.Origin = nil
	}
	if len(e.msg.Ops) == 0 {
		e.msg.Ops = nil
	}
	for i := range e.msg.Ops {
		if len(e.msg.Ops[i].Data) == 0 {
			e.msg.Ops[i].Data = nil
		}
	}
	if len(e.msg.Results) == 0 {
		e.msg.Results = nil
	}
	for k, b := range e.bases {
		if len(b.Chunks) == 0 {
			b.Chunks = nil
			e.bases[k] = b
		}
	}
	return e
}

// FuzzPeerRequests: the catch-up and read requests a peer may send, with
// any field values, get an answer or a classified error from a node that
// holds a blob, never a panic, and a read never returns more than asked.
func FuzzPeerRequests(f *testing.F) {
	tc := startClusterRF(f, 2, 2, 0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := tc.commit(ctx, 0, appendOp("k", "0123456789")); err != nil {
		f.Fatal(err)
	}
	n := tc.nodes[0]
	f.Add("k", uint64(0), uint64(10), uint64(0), uint64(10), uint64(0), "n2", "")
	f.Add("k", uint64(4090), uint64(10), uint64(1), uint64(1<<40), uint64(3), "n9", "k")
	f.Fuzz(func(t *testing.T, key string, off, length, version, size, expect uint64, node, after string) {
		for _, ks := range []string{testKeyspace, "missing"} {
			resp, err := n.ReadChunks(ctx, &peerpb.ReadChunksRequest{Keyspace: ks, Key: key, Offset: off, Length: length,
				Version: version, Size: size, Expect: expect})
			if err == nil && uint64(len(resp.GetData())) > length {
				t.Fatalf("ReadChunks returned %d bytes for %d asked", len(resp.GetData()), length)
			}
			_, _ = n.Chunks(ctx, &peerpb.ChunksRequest{Keyspace: ks, Key: key, Node: node})
			_, known := n.cfg.Cluster.View().Member(ring.NodeID(node))
			if lr, err := n.Lease(ctx, &peerpb.LeaseRequest{From: node}); err != nil || (lr.GetGranted() && (!known || node == "n1")) {
				t.Fatalf("Lease from %q: %v, granted %t (member %t)", node, err, lr.GetGranted(), known)
			}
			if rr, err := n.Revoke(ctx, &peerpb.RevokeRequest{Node: node}); err != nil || (rr.GetGranted() && !known) {
				t.Fatalf("Revoke of %q: %v, %v", node, err, rr)
			}
			vr, err := n.Versions(ctx, &peerpb.VersionsRequest{Keyspace: ks, StartAfter: after, Limit: uint32(length)})
			if err == nil {
				for _, b := range vr.GetBlobs() {
					if after != "" && b.GetKey() <= after {
						t.Fatalf("Versions after %q listed %q", after, b.GetKey())
					}
				}
			}
		}
	})
}

// FuzzPutRing: any bytes a peer sends as a ring epoch record either install
// a record that validates or fail with an invalid-argument error and leave
// the node's record as it was; never a panic.
func FuzzPutRing(f *testing.F) {
	tc := startClusterRF(f, 2, 2, 0, 1)
	n := tc.nodes[0]
	ctx := context.Background()
	f.Add([]byte(`{"epoch":1,"phase":5,"new":[{"id":"n1","weight":1},{"id":"n2","weight":1}]}`))
	f.Add([]byte(`{"epoch":2,"phase":1,"old":[{"id":"n1","weight":1}],"new":[{"id":"n1","weight":1},{"id":"n2","weight":1}],"moves":[{"to":"n2"}]}`))
	f.Add([]byte(`{"epoch":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		before, had := n.Ring()
		resp, err := n.PutRing(ctx, &peerpb.PutRingRequest{Record: b})
		var rec rebalance.Record
		valid := len(b) == 0 || (json.Unmarshal(b, &rec) == nil && rec.Validate() == nil)
		switch code := status.Code(err); {
		case valid && err != nil && code == codes.Unknown:
			t.Fatalf("valid record refused with an unclassified error: %v", err)
		case !valid && code != codes.InvalidArgument:
			t.Fatalf("invalid record %q: %v, want invalid argument", b, err)
		case err == nil && resp == nil:
			t.Fatal("no answer and no error")
		}
		if !valid {
			if after, has := n.Ring(); has != had || !reflect.DeepEqual(after, before) {
				t.Fatalf("invalid record %q changed the node's record from %+v to %+v", b, before, after)
			}
		}
	})
}

// FuzzDecommission: the node ID a ring change request names (tyr cluster
// remove, the RingChange RPC) is refused as not found unless it is a
// member of the ring, and a refused request leaves the ring record as it
// was. The fuzzer skips the members' IDs: removing one starts a change.
func FuzzDecommission(f *testing.F) {
	view := &membership.View{}
	for _, id := range []ring.NodeID{"n1", "n2"} {
		if _, err := view.Apply(membership.Event{Kind: membership.EventJoin, Meta: membership.Meta{
			ID: id, RPCAddr: "addr-" + string(id), Weight: 1, StartedUnixNano: 1}}); err != nil {
			f.Fatal(err)
		}
	}
	var n *Node
	for _, id := range []ring.NodeID{"n1", "n2"} {
		m := &Node{self: id, cfg: Config{Cluster: fakeCluster{self: id, view: view, dead: &sync.Map{}, catchingUp: &sync.Map{}}}}
		rec, err := rebalance.First(id, viewRingNodes(view))
		if err != nil {
			f.Fatal(err)
		}
		if err := m.setRing(rec); err != nil {
			f.Fatal(err)
		}
		if m.IsRingCoordinator() {
			n = m
		}
	}
	if n == nil {
		f.Fatal("neither node is the ring coordinator")
	}
	for _, s := range []string{"", "n3", "n1 ", "\xff", "N1", "n1\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		before, _ := n.Ring()
		if before.InNew(ring.NodeID(id)) {
			return
		}
		_, err := n.Decommission(ring.NodeID(id))
		if !errors.Is(err, errs.ErrNotFound) {
			t.Fatalf("Decommission(%q) of a node not in the ring %v: %v, want not found", id, before.New, err)
		}
		if after, _ := n.Ring(); !reflect.DeepEqual(after, before) {
			t.Fatalf("Decommission(%q) changed the ring record from %+v to %+v", id, before, after)
		}
	})
}
