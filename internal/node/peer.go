package node

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/ring"
)

// peer sends queued messages to one node in batches, one Deliver call at a
// time. A batch holds at most deliverBatch messages and deliverBytesMax
// bytes, so that it fits one gRPC message. Messages that do not fit its
// queue (peerQueueMax messages, peerQueueBytesMax bytes), or whose call
// fails, are lost; the protocol sends them again.
//
// A Forward sent again while an earlier copy is still queued or in its
// Deliver call is dropped: it carries the commit's data again, and the
// copy ahead of it delivers the same. Only a copy whose call has returned
// leaves room for another, so a call that failed is retried on the
// protocol's next retransmission.
type peer struct {
	addr   string
	conn   grpc.ClientConnInterface
	client peerpb.PeerClient
	queue  chan queued
	queued atomic.Int64 // bytes in queue
	quit   chan struct{}
	stats  *counters // the sending node's

	mu sync.Mutex
	// inFlight holds the Forwards queued or in a Deliver call, by
	// forwardID.
	inFlight map[forwardID]bool
}

// queued is a message waiting in a peer's queue, with its encoded size
// and, for a Forward, its forwardID.
type queued struct {
	msg  *peerpb.Message
	size int
	id   forwardID
}

// forwardID names a Forward for coalescing: the same transaction, to the
// same place of the same chain (its members joined by NULs). The zero
// value names no message: every other kind, and every Forward's keyspace
// is named.
type forwardID struct {
	keyspace string
	txn      chain.TxnID
	index    int
	chain    string
	probe    bool
}

// forwardOf returns env's forwardID, zero if it is not a Forward.
func forwardOf(env envelope) forwardID {
	m := env.msg
	if m.Type != chain.MsgForward {
		return forwardID{}
	}
	members := make([]string, len(m.Chain))
	for i, id := range m.Chain {
		members[i] = string(id)
	}
	return forwardID{keyspace: env.keyspace, txn: m.Txn, index: m.Index, chain: strings.Join(members, "\x00"), probe: m.Probe}
}

func (p *peer) run(n *Node) {
	var next *queued // taken from the queue, but did not fit the last batch
	for {
		if next == nil {
			select {
			case q := <-p.queue:
				next = &q
			case <-p.quit:
				return
			}
		}
		batch, bytes, ids := []*peerpb.Message{next.msg}, next.size, []forwardID{next.id}
		next = nil
	drain:
		for len(batch) < deliverBatch {
			select {
			case q := <-p.queue:
				if bytes+q.size > deliverBytesMax {
					next = &q
					break drain
				}
				batch, bytes, ids = append(batch, q.msg), bytes+q.size, append(ids, q.id)
			default:
				break drain
			}
		}
		p.queued.Add(-int64(bytes))
		ctx, cancel := context.WithTimeout(context.Background(), deliverTimeout)
		_, err := p.client.Deliver(ctx, &peerpb.DeliverRequest{Messages: batch})
		cancel()
		p.landed(ids)
		p.stats.calls.Add(1)
		p.stats.sent.Add(uint64(len(batch)))
		if err != nil {
			p.stats.failures.Add(1)
			n.cfg.Log.Debug("peer delivery failed", "addr", p.addr, "messages", len(batch), "err", err)
		}
	}
}

// enqueue queues m, whose forwardID is id, unless the queue is full; an
// empty queue takes a message of any size. A Forward whose earlier copy
// is still on its way is taken without being queued, and counted as
// coalesced: that copy delivers it.
func (p *peer) enqueue(m *peerpb.Message, id forwardID) bool {
	if id != (forwardID{}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.inFlight[id] {
			p.stats.coalesced.Add(1)
			return true
		}
	}
	size := proto.Size(m) + deliverMessageOverhead
	if q := p.queued.Add(int64(size)); q > peerQueueBytesMax && q > int64(size) {
		p.queued.Add(-int64(size))
		return false
	}
	select {
	case p.queue <- queued{msg: m, size: size, id: id}:
		if id != (forwardID{}) {
			p.inFlight[id] = true
		}
		return true
	default:
		p.queued.Add(-int64(size))
		return false
	}
}

// landed forgets the Forwards of a Deliver call that returned.
func (p *peer) landed(ids []forwardID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		delete(p.inFlight, id)
	}
}

// send queues env for its recipient, starting a sender for a new peer or a
// peer whose address changed.
func (n *Node) send(env envelope) {
	to := env.msg.To
	addr, ok := n.cfg.Cluster.RPCAddr(to)
	if !ok {
		n.counters().dropped.Add(1)
		n.cfg.Log.Debug("no address for a chain member", "member", to)
		return
	}
	p, err := n.peer(to, addr)
	if err != nil {
		n.counters().dropped.Add(1)
		n.cfg.Log.Warn("cannot reach a chain member", "member", to, "addr", addr, "err", err)
		return
	}
	if !p.enqueue(encodeEnvelope(env), forwardOf(env)) {
		p.stats.dropped.Add(1)
		n.cfg.Log.Debug("peer queue full; message dropped", "member", to)
	}
}

func (n *Node) peer(id ring.NodeID, addr string) (*peer, error) {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	if p, ok := n.peers[id]; ok && p.addr == addr {
		return p, nil
	} else if ok {
		p.close()
	}
	conn, err := n.cfg.Dial(addr)
	if err != nil {
		return nil, err
	}
	p := &peer{addr: addr, conn: conn, client: peerpb.NewPeerClient(conn), queue: make(chan queued, peerQueueMax), quit: make(chan struct{}), stats: n.counters(),
		inFlight: map[forwardID]bool{}}
	n.peers[id] = p
	go p.run(n)
	return p, nil
}

// close stops the sender and closes the connection.
func (p *peer) close() {
	close(p.quit)
	if c, ok := p.conn.(io.Closer); ok {
		_ = c.Close()
	}
}

// Conn returns the connection to member id, for requests the server
// forwards to it.
func (n *Node) Conn(id ring.NodeID) (grpc.ClientConnInterface, error) {
	addr, ok := n.cfg.Cluster.RPCAddr(id)
	if !ok {
		return nil, fmt.Errorf("%w: no address for member %q", errs.ErrUnavailable, id)
	}
	p, err := n.peer(id, addr)
	if err != nil {
		return nil, fmt.Errorf("%w: member %q at %s: %w", errs.ErrUnavailable, id, addr, err)
	}
	return p.conn, nil
}
