package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/testserver"
)

// clusterShape is the size of a test cluster and the replication of its
// keyspace.
type clusterShape struct {
	name               string
	nodes, replication int
}

// clusterShapes are the shapes the transactional cluster tests run on.
// With more nodes than replicas the blobs of one transaction mostly have
// different version managers, so a commit's chain holds members with no
// part in some of its blobs; with replication 1, two blobs share a version
// manager only when they share the one node.
var clusterShapes = []clusterShape{
	{"3n-rf1", 3, 1},
	{"4n-rf2", 4, 2},
	{"5n-rf3", 5, 3},
}

// forEachShape runs f in a subtest per cluster shape.
func forEachShape(t *testing.T, f func(t *testing.T, s clusterShape)) {
	for _, s := range clusterShapes {
		t.Run(s.name, func(t *testing.T) { f(t, s) })
	}
}

// placement tells which nodes keep what of a keyspace's blobs, computed from
// the ring a node reports as clients and servers compute it.
type placement struct {
	t    *testing.T
	r    *ring.Ring
	seed uint64
	rf   int
	// node maps a member to its index in the cluster's Endpoints.
	node map[ring.NodeID]int
}

func clusterPlacement(t *testing.T, lc *testserver.LocalCluster, ks string, rf int) placement {
	t.Helper()
	r, resp := ringOfCluster(t, lc.Endpoints[0])
	if r.Len() != len(lc.Endpoints) {
		t.Fatalf("the ring holds %d members, the cluster %d nodes", r.Len(), len(lc.Endpoints))
	}
	p := placement{t: t, r: r, seed: ring.KeyspaceSeed(ks), rf: rf, node: map[ring.NodeID]int{}}
	for _, m := range resp.GetMembers() {
		i := slices.Index(lc.Endpoints, m.GetRpcAddr())
		if i < 0 {
			t.Fatalf("member %s serves at %q, not an endpoint of the cluster (%v)", m.GetId(), m.GetRpcAddr(), lc.Endpoints)
		}
		p.node[ring.NodeID(m.GetId())] = i
	}
	return p
}

// replicas returns the nodes keeping chunk c of key, in node ID order.
func (p placement) replicas(key string, c uint64) []ring.NodeID {
	ids, err := p.r.Replicas(p.seed, key, c, p.rf)
	if err != nil {
		p.t.Fatalf("replicas of %s chunk %d: %v", key, c, err)
	}
	slices.Sort(ids)
	return ids
}

// endpoints returns the indexes in the cluster's Endpoints of the nodes
// keeping chunk c of key.
func (p placement) endpoints(key string, c uint64) []int {
	var out []int
	for _, id := range p.replicas(key, c) {
		out = append(out, p.node[id])
	}
	slices.Sort(out)
	return out
}

// spansVMs reports whether the blobs keys do not all have the same version
// managers.
func (p placement) spansVMs(keys ...string) bool {
	for _, k := range keys[min(1, len(keys)):] {
		if !slices.Equal(p.replicas(k, 0), p.replicas(keys[0], 0)) {
			return true
		}
	}
	return false
}

// vmSets returns how many distinct sets of version managers the blobs keys
// have.
func (p placement) vmSets(keys ...string) int {
	seen := map[string]bool{}
	for _, k := range keys {
		seen[fmt.Sprint(p.replicas(k, 0))] = true
	}
	return len(seen)
}

// spreadTxns is the uncontended multi-blob check: each of 32 clients,
// spread over the nodes, owns three blobs whose version managers differ
// pairwise (found from the ring): a, an 8-byte balance; b, two chunks with
// an 8-byte balance at the start of its chunk 1 (kept, where the ring
// allows, by other nodes than its chunk 0); and log, a list each
// transaction may append to. Each client runs, one after the other,
// transactions that move money between a and b (2 blobs), move it back and
// append to log (3 blobs), and read a and log and append to log (2 blobs, one
// of them only read). No two clients share a blob, so nothing can conflict:
// every transaction commits, every read returns exactly what the client's
// own commits left, and the blobs end as they say, on every replica.
func spreadTxns(t *testing.T, lc *testserver.LocalCluster, admin []*client.Client, ks string, s clusterShape, seed uint64) {
	const (
		clients   = 32
		txnsEach  = 6
		chunk     = 4096
		bOff      = chunk // b's balance: the first bytes of its chunk 1
		bSize     = 2 * chunk
		initial   = 1000
		amountMax = 100
		logSlack  = 64
		// candidates bounds the search for a client's blobs.
		candidates = 1000
	)
	p := clusterPlacement(t, lc, ks, s.replication)

	type owned struct {
		a, b, log string
		// The blobs of each kind of transaction (below), whether their
		// version managers differ, and how many sets of them they have.
		kinds [3][]string
		spans [3]bool
		sets  [3]int
	}
	mine := make([]owned, clients)
	bSplit := 0 // clients whose b has its chunk 1 on other nodes than its chunk 0
	for w := range mine {
		key := func(i int) string { return fmt.Sprintf("spread/%d/%d", w, i) }
		find := func(from int, ok func(k string) bool) (string, int) {
			for i := from; i < candidates; i++ {
				if k := key(i); ok(k) {
					return k, i
				}
			}
			return "", -1
		}
		a := key(0)
		differsFrom := func(others ...string) func(string) bool {
			return func(k string) bool {
				for _, o := range others {
					if !p.spansVMs(k, o) {
						return false
					}
				}
				return true
			}
		}
		b, bi := find(1, func(k string) bool {
			return differsFrom(a)(k) && !slices.Equal(p.replicas(k, 0), p.replicas(k, 1))
		})
		if b == "" {
			b, bi = find(1, differsFrom(a))
		} else {
			bSplit++
		}
		if b == "" {
			t.Fatalf("client %d: none of %d keys has other version managers than %s", w, candidates, a)
		}
		log, _ := find(bi+1, differsFrom(a, b))
		if log == "" {
			t.Fatalf("client %d: none of %d keys has other version managers than %s and %s", w, candidates, a, b)
		}
		o := owned{a: a, b: b, log: log, kinds: [3][]string{{a, b}, {a, b, log}, {a, log}}}
		for k, keys := range o.kinds {
			o.spans[k], o.sets[k] = p.spansVMs(keys...), p.vmSets(keys...)
		}
		mine[w] = o
	}
	t.Logf("%d clients, each with 3 blobs of pairwise different version managers (e.g. %s on %v, %s on %v, %s on %v); "+
		"%d of them have b's chunk 1 on other nodes than its chunk 0",
		clients, mine[0].a, p.replicas(mine[0].a, 0), mine[0].b, p.replicas(mine[0].b, 0), mine[0].log, p.replicas(mine[0].log, 0), bSplit)

	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterOpTimeout)
	for w, o := range mine {
		cl := admin[w%len(admin)]
		if _, err := cl.WriteCreate(ctx, ks, o.a, 0, le64(initial)); err != nil {
			t.Fatal(err)
		}
		bInit := make([]byte, bSize)
		binary.LittleEndian.PutUint64(bInit[bOff:], initial)
		if _, err := cl.WriteCreate(ctx, ks, o.b, 0, bInit); err != nil {
			t.Fatal(err)
		}
		if err := cl.Create(ctx, ks, o.log); err != nil {
			t.Fatal(err)
		}
	}
	cancel()

	type state struct {
		a, b uint64
		log  []byte
	}
	var (
		mu                  sync.Mutex
		committed, aborted  int
		unknown             errorTally
		spanning, threeSets int // committed transactions by the version managers of their blobs
		final               = make([]*state, clients)
		wg                  sync.WaitGroup
	)
	began := time.Now()
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := mine[w]
			cl := dial(t, lc.Endpoints[w%len(lc.Endpoints)])
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			want := &state{a: initial, b: initial, log: []byte{}}
			// expect reads up to n bytes of key at off in tx and checks
			// them. The log is read with room to spare, so that a record
			// too many shows.
			expect := func(ctx context.Context, tx *client.Tx, key string, off, n uint64, want []byte) error {
				got, err := tx.Read(ctx, key, off, n)
				if err == nil && !bytes.Equal(got, want) {
					t.Errorf("client %d: %s+%d reads %x in a transaction, want %x: its own last commit", w, key, off, got, want)
				}
				return err
			}
			for i := range txnsEach {
				amount := uint64(rng.IntN(amountMax) + 1)
				record := []byte(strconv.Itoa(i) + ",")
				next := *want
				keys := o.kinds[i%3]
				ctx, cancel := opCtx()
				tx := cl.Begin(ks)
				began := time.Now()
				var err error
				switch i % 3 {
				case 0: // a → b
					if err = expect(ctx, tx, o.a, 0, 8, le64(want.a)); err == nil {
						err = expect(ctx, tx, o.b, bOff, 8, le64(want.b))
					}
					next.a, next.b = want.a-amount, want.b+amount
					tx.Write(o.a, 0, le64(next.a))
					tx.Write(o.b, bOff, le64(next.b))
				case 1: // b → a, logged
					if err = expect(ctx, tx, o.b, bOff, 8, le64(want.b)); err == nil {
						err = expect(ctx, tx, o.a, 0, 8, le64(want.a))
					}
					if err == nil {
						err = expect(ctx, tx, o.log, 0, uint64(len(want.log))+logSlack, want.log)
					}
					next.a, next.b = want.a+amount, want.b-amount
					next.log = append(slices.Clone(want.log), record...)
					tx.Write(o.b, bOff, le64(next.b))
					tx.Write(o.a, 0, le64(next.a))
					tx.Append(o.log, record)
				case 2: // a only read, logged
					if err = expect(ctx, tx, o.log, 0, uint64(len(want.log))+logSlack, want.log); err == nil {
						err = expect(ctx, tx, o.a, 0, 8, le64(want.a))
					}
					next.log = append(slices.Clone(want.log), record...)
					tx.Append(o.log, record)
				}
				if err == nil {
					err = tx.Commit(ctx)
				} else {
					tx.Rollback()
				}
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					committed++
					want = &next
					if o.spans[i%3] {
						spanning++
					}
					if o.sets[i%3] == 3 {
						threeSets++
					}
				case errors.Is(err, client.ErrConflict):
					aborted++
					t.Errorf("client %d, transaction %d on %v, through node%d, after %v: %v",
						w, i, keys, w%len(lc.Endpoints)+1, time.Since(began).Round(time.Millisecond), err)
				default:
					unknown.add(fmt.Errorf("client %d, transaction %d on %v, through node%d, after %v: %w",
						w, i, keys, w%len(lc.Endpoints)+1, time.Since(began).Round(time.Millisecond), err))
				}
				mu.Unlock()
				if err != nil && !errors.Is(err, client.ErrConflict) {
					return // its outcome, so the blobs' state, is unknown
				}
			}
			final[w] = want
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	total := clients * txnsEach
	// A client stops at a transaction of unknown outcome: the rest of its
	// transactions do not run.
	t.Logf("%s: %d of %d uncontended transactions run in %v: %d committed, %d aborted, %d unknown; "+
		"%d committed ones had blobs with different version managers (%d with three different sets)",
		s.name, committed+aborted+unknown.total(), total, elapsed.Round(time.Millisecond), committed, aborted, unknown.total(),
		spanning, threeSets)
	if unknown.total() > 0 {
		t.Errorf("transactions of unknown outcome without faults: %s", unknown.String())
	}
	if committed != total {
		t.Errorf("%d of %d uncontended transactions committed, want all", committed, total)
	}
	if spanning != committed {
		t.Errorf("%d of the %d committed transactions had blobs with different version managers, want all: the blobs were chosen so",
			spanning, committed)
	}

	// Every replica of what each client wrote holds what its commits left,
	// once every node is in step.
	waitRingsAgree(t, lc, ks)
	ctx, cancel = context.WithTimeout(context.Background(), 2*clusterOpTimeout)
	defer cancel()
	const reportMax = 10
	var wrong []string
	for w, o := range mine {
		want := final[w]
		if want == nil {
			continue
		}
		for _, c := range []struct {
			key           string
			chunk, off, n uint64
			want          []byte
		}{
			{o.a, 0, 0, 8, le64(want.a)},
			{o.b, 1, bOff, 8, le64(want.b)},
			{o.log, 0, 0, uint64(len(want.log)) + logSlack, want.log},
		} {
			if got, err := admin[(w+1)%len(admin)].Read(ctx, ks, c.key, c.off, c.n); err != nil || !bytes.Equal(got, c.want) {
				wrong = append(wrong, fmt.Sprintf("client %d: %s+%d reads %x, %v; want %x", w, c.key, c.off, got, err, c.want))
			}
			for _, i := range p.endpoints(c.key, c.chunk) {
				got, info, err := admin[i].ReadPart(localRead(ctx), ks, c.key, c.off, c.n)
				switch {
				case err != nil || !bytes.Equal(got, c.want):
					wrong = append(wrong, fmt.Sprintf("client %d: node%d's replica of %s+%d holds %x, %v; want %x", w, i+1, c.key, c.off, got, err, c.want))
				case c.key == o.b && info.Size != bSize:
					wrong = append(wrong, fmt.Sprintf("client %d: node%d's replica of %s is %d bytes long, want %d", w, i+1, c.key, info.Size, bSize))
				}
			}
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d reads of the blobs after the transactions went wrong:\n%s", len(wrong), strings.Join(wrong[:min(len(wrong), reportMax)], "\n"))
	}
}
