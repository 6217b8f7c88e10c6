package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/testserver"
)

// Transactions and atomic ops on clusters of real server processes: the
// single-server checks of txn_test.go, with commits coordinated by every
// node, reads served by whichever replica the client routes them to (or
// forwarded by its node), and replicas that must agree.

// clusterOpTimeout bounds one client call of the tests below, so a hang
// fails the test instead of blocking it.
const clusterOpTimeout = 20 * time.Second

// txnCluster starts nodes nodes, creates keyspace ks with cfg on them and
// waits until every node has it and every ring agrees.
func txnCluster(t *testing.T, nodes int, ks string, cfg client.KeyspaceConfig) (*testserver.LocalCluster, []*client.Client) {
	t.Helper()
	testserver.Binary(t) // build outside the measured steps
	began := time.Now()
	lc := testserver.UpCluster(t, nodes)
	clients := dialAll(t, lc)
	replicatedKeyspace(t, clients, ks, cfg)
	waitRingsAgree(t, lc, ks)
	t.Logf("%d nodes up, keyspace %s (replication %d, chunk size %d) on all of them in %v",
		nodes, ks, cfg.Replication, cfg.ChunkSize, time.Since(began).Round(time.Millisecond))
	return lc, clients
}

// opCtx is the context of one client call.
func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), clusterOpTimeout)
}

// errorTally counts errors by message, for a summary instead of one line
// per failed call.
type errorTally struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *errorTally) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[err.Error()]++
}

func (e *errorTally) total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.n {
		n += c
	}
	return n
}

func (e *errorTally) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	msgs := make([]string, 0, len(e.n))
	for m, c := range e.n {
		msgs = append(msgs, fmt.Sprintf("%d× %s", c, m))
	}
	sort.Strings(msgs)
	return strings.Join(msgs, "; ")
}

// TestClusterBank runs on each cluster shape (clusterShapes), keeping
// every blob MVCC. First the uncontended multi-blob check (spreadTxns):
// every transaction over blobs of different version managers commits.
// Then 32 clients spread over the nodes move random amounts between 100
// accounts held 10 to a blob in 10 blobs, in transactions, and read every
// account in read-only transactions (audits), under load that comes in
// waves of heavy and light. Every audit that commits (passes validation)
// saw a total of exactly 100×1000, audits that saw another total all fail
// validation, conflicts abort transfers without effect, the final total is
// 100×1000, and each blob's replicas are identical. No transfer ends
// otherwise than committed or aborted by a conflict, and enough of them
// commit (bankCommitShare), also among those whose two blobs have
// different version managers.
func TestClusterBank(t *testing.T) {
	const ks = "cluster-bank"
	seed := seedFromEnv(t)
	forEachShape(t, func(t *testing.T, s clusterShape) {
		lc, admin := txnCluster(t, s.nodes, ks, client.KeyspaceConfig{ChunkSize: 4096, Replication: uint32(s.replication), MVCC: true})
		t.Run("uncontended", func(t *testing.T) { spreadTxns(t, lc, admin, ks, s, seed) })
		t.Run("contended", func(t *testing.T) { bankLoad(t, lc, admin, ks, s, seed) })
		if t.Failed() {
			t.Logf("node warnings and errors:\n%s%s", lc.LogLines("level=WARN", 20), lc.LogLines("level=ERROR", 20))
		}
	})
}

// bankCommitShare is the share of the transfers of TestClusterBank that
// must commit. Each of the 32 clients has one transfer in flight at a time,
// touching 2 of the 10 blobs (1 in 10 stay in one blob), and validation is
// by blob: another transfer shares a blob with it with probability
// 1-(8/10)(7/9) ≈ 0.38, so each commit invalidates about 0.38×31 ≈ 12 of
// the transfers in flight. If a share p of them commits, one in flight
// sees about 12p commits land on its blobs before it validates, and
// commits if none does: p ≈ e^(-12p), p ≈ 0.2. Half of that must be met.
const bankCommitShare = 0.1

// bankLoad is the contended part of TestClusterBank, on the cluster lc
// with keyspace ks.
func bankLoad(t *testing.T, lc *testserver.LocalCluster, admin []*client.Client, ks string, s clusterShape, seed uint64) {
	const (
		blobs, perBlob, initial = 10, 10, 1000
		accounts                = blobs * perBlob
		blobBytes               = 8 * perBlob
		want                    = int64(accounts * initial)
		amountMax               = 100
		workers                 = 32
		loadFor                 = 6 * time.Second
		// Load waves (see below): cycles of cycle, the last lightFor of
		// each light.
		cycle, lightFor = 2 * time.Second, time.Second
		// In heavy load, one operation in auditEvery is a read-only audit.
		auditEvery = 8
		// In light load, the clients that move money, pausing lightPause
		// after each transfer, and those that audit.
		lightMovers, lightAuditors = 1, 6
		lightPause                 = 300 * time.Millisecond
		// The least number of transfers across version managers for their
		// share of commits to be checked.
		spanningMin = 20
	)
	nodes := s.nodes
	waitRingsAgree(t, lc, ks) // every node in step, as the load begins
	blobKey := func(b int) string { return fmt.Sprintf("bank/%d", b) }
	where := func(acct int) (string, uint64) { return blobKey(acct / perBlob), uint64(8 * (acct % perBlob)) }
	// Transfers by their blobs: in one blob, in two with the same version
	// managers, in two with different ones.
	const oneBlob, sameVMs, otherVMs = 0, 1, 2
	p := clusterPlacement(t, lc, ks, s.replication)
	kindOf := func(from, to int) int {
		fb, tb := blobKey(from/perBlob), blobKey(to/perBlob)
		switch {
		case fb == tb:
			return oneBlob
		case p.spansVMs(fb, tb):
			return otherVMs
		}
		return sameVMs
	}
	var allBlobs []string
	for b := range blobs {
		allBlobs = append(allBlobs, blobKey(b))
	}
	t.Logf("the %d bank blobs have %d distinct sets of version managers", blobs, p.vmSets(allBlobs...))
	kinds := make([][]int, accounts) // kinds[from][to]
	for from := range kinds {
		kinds[from] = make([]int, accounts)
		for to := range kinds[from] {
			kinds[from][to] = kindOf(from, to)
		}
	}
	init := make([]byte, 0, blobBytes)
	for range perBlob {
		init = binary.LittleEndian.AppendUint64(init, uint64(initial))
	}
	for b := range blobs {
		ctx, cancel := opCtx()
		_, err := admin[b%nodes].WriteCreate(ctx, ks, blobKey(b), 0, init)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	readBalance := func(ctx context.Context, tx *client.Tx, acct int) (int64, error) {
		key, off := where(acct)
		b, err := tx.Read(ctx, key, off, 8)
		if err != nil {
			return 0, err
		}
		if len(b) != 8 {
			return 0, fmt.Errorf("account %d: %d bytes at %s+%d", acct, len(b), key, off)
		}
		return int64(binary.LittleEndian.Uint64(b)), nil
	}

	var (
		commits, conflicts [3]atomic.Int64 // transfers, by kind
		noops              atomic.Int64    // transfers from an account to itself: skipped
		// Read-only audits, by phase (0 heavy, 1 light): committed, and
		// aborted by conflicts, in all and after seeing a wrong total.
		audits, auditConflicts, auditTorn [2]atomic.Int64
		others                            errorTally
		wg                                sync.WaitGroup
	)
	sum := func(a *[3]atomic.Int64) int64 { return a[0].Load() + a[1].Load() + a[2].Load() }
	// audit reads every blob in a read-only transaction and commits it: a
	// committed audit must have seen the right total.
	audit := func(cl *client.Client, phase int) {
		ctx, cancel := opCtx()
		defer cancel()
		tx := cl.Begin(ks)
		var total int64
		var err error
		for b := 0; b < blobs && err == nil; b++ {
			var data []byte
			if data, err = tx.Read(ctx, blobKey(b), 0, blobBytes); err == nil && len(data) != blobBytes {
				err = fmt.Errorf("audit read %d bytes of %s, want %d", len(data), blobKey(b), blobBytes)
			}
			for i := 0; err == nil && i < perBlob; i++ {
				total += int64(binary.LittleEndian.Uint64(data[8*i:]))
			}
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		switch {
		case err == nil:
			audits[phase].Add(1)
			if total != want {
				t.Errorf("a read-only transaction committed after seeing a total of %d, want %d", total, want)
			}
		case errors.Is(err, client.ErrConflict):
			auditConflicts[phase].Add(1)
			if total != want {
				auditTorn[phase].Add(1) // an inconsistent view, refused at commit as it must be
			}
		default:
			others.add(fmt.Errorf("audit: %w", err))
		}
	}
	transfer := func(cl *client.Client, rng *rand.Rand) {
		from, to := rng.IntN(accounts), rng.IntN(accounts)
		amount := int64(rng.IntN(amountMax) + 1)
		if from == to {
			noops.Add(1)
			return
		}
		ctx, cancel := opCtx()
		defer cancel()
		tx := cl.Begin(ks)
		a, err := readBalance(ctx, tx, from)
		var b int64
		if err == nil {
			b, err = readBalance(ctx, tx, to)
		}
		if err == nil {
			// Balances may go negative: the sum is what is checked.
			fromKey, fromOff := where(from)
			toKey, toOff := where(to)
			tx.Write(fromKey, fromOff, binary.LittleEndian.AppendUint64(nil, uint64(a-amount)))
			tx.Write(toKey, toOff, binary.LittleEndian.AppendUint64(nil, uint64(b+amount)))
			err = tx.Commit(ctx)
		} else {
			tx.Rollback()
		}
		switch kind := kinds[from][to]; {
		case err == nil:
			commits[kind].Add(1)
		case errors.Is(err, client.ErrConflict):
			conflicts[kind].Add(1)
		default:
			others.add(fmt.Errorf("transfer: %w", err))
		}
	}
	// Without concurrent transfers, an audit through each node commits.
	for n, c := range admin {
		audit(c, 1)
		if got := audits[1].Load(); got != int64(n+1) {
			t.Fatalf("an audit through node%d without concurrent transfers did not commit: %s, %d conflicts",
				n+1, others.String(), auditConflicts[1].Load())
		}
	}
	audits[1].Store(0)

	// The load comes in waves. In the heavy part of each cycle every
	// client moves money flat out and audits now and then; audits then
	// overlap so many commits that they almost never pass validation. In
	// the light part a few clients keep moving money while a few others
	// audit, and the rest pause: audits then overlap some commits, not all
	// of them, and both outcomes of validation are seen.
	began := time.Now()
	deadline := began.Add(loadFor)
	phaseAt := func(now time.Time) (light bool, ends time.Time) {
		in := now.Sub(began) % cycle
		if in < cycle-lightFor {
			return false, now.Add(cycle - lightFor - in)
		}
		return true, now.Add(cycle - in)
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := dial(t, lc.Endpoints[w%nodes])
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for now := time.Now(); now.Before(deadline); now = time.Now() {
				light, ends := phaseAt(now)
				switch {
				case !light && rng.IntN(auditEvery) == 0:
					audit(cl, 0)
				case !light:
					transfer(cl, rng)
				case w < lightMovers:
					transfer(cl, rng)
					time.Sleep(min(lightPause, time.Until(ends)))
				case w < lightMovers+lightAuditors:
					audit(cl, 1)
				default:
					time.Sleep(time.Until(ends))
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)

	waitRingsAgree(t, lc, ks)
	ctx, cancel := opCtx()
	defer cancel()
	var total int64
	for b := range blobs {
		data, err := admin[b%nodes].Read(ctx, ks, blobKey(b), 0, blobBytes)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != blobBytes {
			t.Fatalf("%s holds %d bytes, want %d", blobKey(b), len(data), blobBytes)
		}
		for i := range perBlob {
			total += int64(binary.LittleEndian.Uint64(data[8*i:]))
		}
		// Every replica, byte for byte and version for version.
		var first []byte
		var firstInfo client.BlobInfo
		replicas := p.endpoints(blobKey(b), 0)
		for j, n := range replicas {
			local, info, err := admin[n].ReadPart(localRead(ctx), ks, blobKey(b), 0, blobBytes)
			if err != nil {
				t.Fatalf("node%d: local read of %s: %v", n+1, blobKey(b), err)
			}
			if j == 0 {
				first, firstInfo = local, info
			} else if !bytes.Equal(local, first) || info.Version != firstInfo.Version {
				t.Errorf("%s: node%d holds %x at version %d, node%d %x at version %d",
					blobKey(b), n+1, local, info.Version, replicas[0]+1, first, firstInfo.Version)
			}
		}
	}
	committed, aborted := sum(&commits), sum(&conflicts)
	t.Logf("%s: %v of load by %d clients: %d transfers committed (%.0f/s), %d aborted by conflicts (%.1f%%), %d unknown, %d skipped (same account); "+
		"read-only audits in heavy load: %d committed, %d aborted by conflicts (%d of them had seen a wrong total), "+
		"in light load: %d committed, %d aborted (%d had seen a wrong total)",
		s.name, elapsed.Round(time.Millisecond), workers, committed, float64(committed)/elapsed.Seconds(), aborted,
		100*float64(aborted)/float64(max(1, committed+aborted)), others.total(), noops.Load(),
		audits[0].Load(), auditConflicts[0].Load(), auditTorn[0].Load(),
		audits[1].Load(), auditConflicts[1].Load(), auditTorn[1].Load())
	t.Logf("%s: transfers committed/aborted: in one blob %d/%d, across blobs of the same version managers %d/%d, of different ones %d/%d",
		s.name, commits[oneBlob].Load(), conflicts[oneBlob].Load(), commits[sameVMs].Load(), conflicts[sameVMs].Load(),
		commits[otherVMs].Load(), conflicts[otherVMs].Load())
	if total != want {
		t.Errorf("final total %d, want %d", total, want)
	}
	if others.total() > 0 {
		t.Errorf("transfers or audits of unknown outcome in a run without faults: %s", others.String())
	}
	if share := float64(committed) / float64(max(1, committed+aborted)); share < bankCommitShare {
		t.Errorf("%d of %d transfers committed (%.1f%%), want at least %.0f%%", committed, committed+aborted, 100*share, 100*bankCommitShare)
	}
	switch c, a := commits[otherVMs].Load(), conflicts[otherVMs].Load(); {
	case c+a < spanningMin:
		t.Errorf("only %d transfers between blobs of different version managers, want at least %d to check their commits", c+a, spanningMin)
	case float64(c) < bankCommitShare*float64(c+a):
		t.Errorf("%d of %d transfers between blobs of different version managers committed (%.1f%%), want at least %.0f%%",
			c, c+a, 100*float64(c)/float64(c+a), 100*bankCommitShare)
	}
	if audits[0].Load()+audits[1].Load() == 0 {
		t.Errorf("no read-only audit committed")
	}
}

// TestClusterHotCounter runs on each cluster shape (clusterShapes): 32
// clients spread over the nodes increment one 8-byte counter, first with
// read-modify-write transactions retried on conflict (phase A), then with
// atomic adds (phase B), each for a fixed time. In both phases the counter
// ends at exactly the number of acknowledged increments, every
// acknowledged increment has its own value (0..n-1 read by the committed
// transactions, 1..n returned by the atomics), and no increment fails
// otherwise than by a conflict. Progress: every aborted attempt of phase A
// was invalidated by an increment committed while it was in flight, and
// each committed increment lands inside at most one attempt of each other
// client (a client runs one at a time), so there are at most 31 aborted
// attempts per increment; atomic adds queue on the blob instead of
// aborting, so none is refused. The throughput of each phase and their
// ratio are logged, with the aborts of phase A.
func TestClusterHotCounter(t *testing.T) {
	forEachShape(t, hotCounter)
}

func hotCounter(t *testing.T, s clusterShape) {
	const (
		ks             = "cluster-hot"
		workers        = 32
		phaseFor       = 3 * time.Second
		txKey, atomKey = "hot/tx", "hot/atomic"
		maxBackoff     = 50 * time.Millisecond
		retriesMax     = 1 << 20
	)
	nodes := s.nodes
	lc, admin := txnCluster(t, nodes, ks, client.KeyspaceConfig{ChunkSize: 4096, Replication: uint32(s.replication), MVCC: true})
	p := clusterPlacement(t, lc, ks, s.replication)
	t.Logf("%s on %v, %s on %v", txKey, p.replicas(txKey, 0), atomKey, p.replicas(atomKey, 0))
	for i, key := range []string{txKey, atomKey} {
		ctx, cancel := opCtx()
		_, err := admin[i].WriteCreate(ctx, ks, key, 0, make([]byte, 8))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	cls := make([]*client.Client, workers)
	for w := range cls {
		cls[w] = dial(t, lc.Endpoints[w%nodes])
	}
	counter := func(key string) uint64 {
		t.Helper()
		ctx, cancel := opCtx()
		defer cancel()
		b, err := admin[2].Read(ctx, ks, key, 0, 8)
		if err != nil || len(b) != 8 {
			t.Fatalf("read %s: %x, %v", key, b, err)
		}
		return binary.LittleEndian.Uint64(b)
	}
	// run runs one phase: inc on each client until phaseFor passes; inc
	// returns the value that identifies the increment. An increment
	// refused with a conflict did not happen: it is counted, not retried.
	// One of unknown outcome ends its client.
	run := func(name string, inc func(cl *client.Client) (uint64, error)) (values []uint64, elapsed time.Duration, refused *errorTally, unknown int64) {
		refused = &errorTally{}
		var unknowns atomic.Int64
		var mu sync.Mutex
		var wg sync.WaitGroup
		began := time.Now()
		deadline := began.Add(phaseFor)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []uint64
				defer func() {
					mu.Lock()
					values = append(values, mine...)
					mu.Unlock()
				}()
				for time.Now().Before(deadline) {
					v, err := inc(cls[w])
					if errors.Is(err, client.ErrConflict) {
						refused.add(err)
						continue
					}
					if err != nil {
						unknowns.Add(1)
						t.Errorf("%s: client %d: an increment of unknown outcome after %d acknowledged ones: %v", name, w, len(mine), err)
						return
					}
					mine = append(mine, v)
				}
			}()
		}
		wg.Wait()
		return values, time.Since(began), refused, unknowns.Load()
	}

	// Phase A: transactions, retried on conflict.
	var attempts, failures atomic.Int64
	txValues, txElapsed, txRefused, txUnknown := run("transactions", func(cl *client.Client) (uint64, error) {
		ctx, cancel := opCtx()
		defer cancel()
		var read uint64
		err := cl.RunTx(ctx, ks, func(tx *client.Tx) error {
			attempts.Add(1)
			v, err := readU64(ctx, tx, txKey)
			if err != nil {
				return err
			}
			read = v
			tx.Write(txKey, 0, le64(v+1))
			return nil
		}, &client.TxOptions{MaxRetries: retriesMax, MaxBackoff: maxBackoff})
		if err != nil {
			failures.Add(1)
		}
		return read, err
	})
	txN := uint64(len(txValues))
	// Every other attempt was aborted by a conflict (of a read or, mostly,
	// of the commit): RunTx retries nothing else. failures are the
	// increments refused or of unknown outcome.
	aborts := attempts.Load() - int64(txN) - failures.Load()
	if got := counter(txKey); got != txN {
		t.Errorf("transactions: counter %d, want %d acknowledged increments", got, txN)
	}
	checkDistinct(t, "transactions (values read)", txValues, 0)

	// Phase B: atomic adds.
	atomValues, atomElapsed, atomRefused, atomUnknown := run("atomics", func(cl *client.Client) (uint64, error) {
		ctx, cancel := opCtx()
		defer cancel()
		return cl.Atomic(ctx, ks, atomKey, 0, 8, client.FuncAdd, 1)
	})
	atomN := uint64(len(atomValues))
	if got := counter(atomKey); got != atomN {
		t.Errorf("atomics: counter %d, want %d acknowledged increments", got, atomN)
	}
	checkDistinct(t, "atomics (new values)", atomValues, 1)

	txRate := float64(txN) / txElapsed.Seconds()
	atomRate := float64(atomN) / atomElapsed.Seconds()
	t.Logf("%s: phase A, transactions: %d increments committed in %v, %.1f/s, %d attempts, %d aborted by conflicts (%.2f per increment), %d unknown",
		s.name, txN, txElapsed.Round(time.Millisecond), txRate, attempts.Load(), aborts, float64(aborts)/float64(max(1, txN)), txUnknown)
	t.Logf("%s: phase B, atomics: %d increments committed in %v, %.1f/s, %d refused with a conflict, %d unknown",
		s.name, atomN, atomElapsed.Round(time.Millisecond), atomRate, atomRefused.total(), atomUnknown)
	for _, ph := range []struct {
		name    string
		refused *errorTally
	}{{"transactions", txRefused}, {"atomics", atomRefused}} {
		if n := ph.refused.total(); n > 0 {
			// Definite refusals, so exactness holds, but each is a client
			// that could not get an increment in for the server's whole
			// retry time.
			t.Logf("%s: %d increments refused with a conflict after the server's retries: %s", ph.name, n, ph.refused)
		}
	}
	if txRate > 0 {
		t.Logf("atomics/transactions throughput ratio: %.2f", atomRate/txRate)
	}
	if txN == 0 || atomN == 0 {
		t.Errorf("no progress: %d transactional and %d atomic increments acknowledged", txN, atomN)
	}
	if aborts > (workers-1)*int64(txN) {
		t.Errorf("phase A: %d attempts aborted for %d committed increments, want at most %d per increment", aborts, txN, workers-1)
	}
	if n := atomRefused.total(); n > 0 {
		t.Errorf("phase B: %d atomic adds refused with a conflict, want none", n)
	}
	if t.Failed() {
		t.Logf("node warnings and errors:\n%s%s", lc.LogLines("level=WARN", 20), lc.LogLines("level=ERROR", 20))
	}
}

// checkDistinct checks that values are exactly from, from+1, ...,
// from+len(values)-1, each once.
func checkDistinct(t *testing.T, what string, values []uint64, from uint64) {
	t.Helper()
	sorted := slices.Sorted(slices.Values(values))
	for i, v := range sorted {
		if v != from+uint64(i) {
			t.Errorf("%s: the %d acknowledged increments are not each of %d..%d once: sorted, #%d is %d",
				what, len(values), from, from+uint64(len(values))-1, i, v)
			return
		}
	}
}

// TestClusterRepeatableRead: a transaction whose client talks to node1
// reads a blob (as a whole, across its two chunks, and within its second
// chunk), a client of node2 then commits a change to that blob, and the
// transaction's second reads return the very bytes of its first ones,
// although a plain read already returns the new ones. Its commit then
// fails with ErrConflict and changes nothing, whether it writes another
// blob or the blob it read, and a read-only transaction fails validation
// the same way; the same transaction without interference commits. It is
// done with a client that routes its reads to the nodes that serve them
// and with one that sends everything to node1, which forwards.
func TestClusterRepeatableRead(t *testing.T) {
	const (
		ks        = "cluster-rr"
		chunk     = 4096
		blobBytes = chunk + 1904 // two chunks
	)
	lc, _ := txnCluster(t, 3, ks, client.KeyspaceConfig{ChunkSize: chunk, Replication: 3, MVCC: true})
	writer := dial(t, lc.Endpoints[1])
	unrouted, err := client.Dial(lc.Endpoints[0], client.WithoutRouting())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unrouted.Close() })
	readers := []struct {
		name string
		c    *client.Client
	}{{"routed", dial(t, lc.Endpoints[0])}, {"unrouted", unrouted}}

	content := func(gen int) []byte {
		unit := []byte(fmt.Sprintf("<generation %d>", gen))
		return bytes.Repeat(unit, blobBytes/len(unit)+1)[:blobBytes]
	}
	for _, r := range readers {
		t.Run(r.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			key, other := "rr/"+r.name, "rr/"+r.name+"/other"
			gen := 0
			// write commits the next generation through node2 and checks
			// that plain reads through either client see it at once.
			write := func() []byte {
				t.Helper()
				gen++
				data := content(gen)
				if _, err := writer.WriteCreate(ctx, ks, key, 0, data); err != nil {
					t.Fatalf("write of generation %d: %v", gen, err)
				}
				for _, c := range []*client.Client{writer, r.c} {
					if got, err := c.Read(ctx, ks, key, 0, blobBytes); err != nil || !bytes.Equal(got, data) {
						t.Fatalf("plain read after the write of generation %d: %.40q…, %v", gen, got, err)
					}
				}
				return data
			}
			// reads reads the whole blob and a range within its second
			// chunk in tx.
			reads := func(tx *client.Tx) (whole, part []byte) {
				t.Helper()
				whole, err := tx.Read(ctx, key, 0, 2*chunk)
				if err != nil {
					t.Fatalf("transaction read of %s: %v", key, err)
				}
				part, err = tx.Read(ctx, key, chunk+100, 200)
				if err != nil {
					t.Fatalf("transaction read of %s within chunk 1: %v", key, err)
				}
				return whole, part
			}
			absent := func(k string) {
				t.Helper()
				if _, err := r.c.Stat(ctx, ks, k); !errors.Is(err, client.ErrNotFound) {
					t.Fatalf("%s after a failed commit: %v, want ErrNotFound", k, err)
				}
			}
			// interfered runs a transaction that reads key, has it changed
			// by node2's client, reads it again, adds ops, and commits: the
			// commit must fail with ErrConflict and leave the blob as the
			// writer left it.
			interfered := func(what string, ops func(tx *client.Tx)) {
				t.Helper()
				first := content(gen)
				tx := r.c.Begin(ks)
				whole1, part1 := reads(tx)
				if !bytes.Equal(whole1, first) || !bytes.Equal(part1, first[chunk+100:chunk+300]) {
					t.Fatalf("%s: first read %.40q…, want generation %d", what, whole1, gen)
				}
				changed := write()
				whole2, part2 := reads(tx)
				if !bytes.Equal(whole2, whole1) || !bytes.Equal(part2, part1) {
					t.Fatalf("%s: not a repeatable read: first %.40q… / %.20q, then %.40q… / %.20q",
						what, whole1, part1, whole2, part2)
				}
				ops(tx)
				if err := tx.Commit(ctx); !errors.Is(err, client.ErrConflict) {
					t.Fatalf("%s: commit after a concurrent write: %v, want ErrConflict", what, err)
				}
				if got, err := r.c.Read(ctx, ks, key, 0, blobBytes); err != nil || !bytes.Equal(got, changed) {
					t.Fatalf("%s: after the failed commit %s reads %.40q…, %v; want generation %d", what, key, got, err, gen)
				}
				absent(other)
			}
			write()
			interfered("writing another blob", func(tx *client.Tx) { tx.Write(other, 0, []byte("must not exist")) })
			interfered("writing the blob read", func(tx *client.Tx) {
				tx.Write(key, 0, []byte("must not land"))
				tx.Write(other, 0, []byte("must not exist"))
			})
			interfered("read-only", func(*client.Tx) {})

			// Without interference, the same transactions commit.
			tx := r.c.Begin(ks)
			whole1, _ := reads(tx)
			whole2, _ := reads(tx)
			if !bytes.Equal(whole1, whole2) || !bytes.Equal(whole1, content(gen)) {
				t.Fatalf("reads without interference differ: %.40q… then %.40q…", whole1, whole2)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("read-only commit without interference: %v", err)
			}
			tx = r.c.Begin(ks)
			reads(tx)
			tx.Write(other, 0, []byte("committed"))
			tx.Write(key, 0, []byte("COMMITTED"))
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit without interference: %v", err)
			}
			want := append([]byte("COMMITTED"), content(gen)[9:]...)
			if got, err := writer.Read(ctx, ks, key, 0, blobBytes); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s after the commit through node1: %.40q…, %v", key, got, err)
			}
			if got, err := writer.Read(ctx, ks, other, 0, 100); err != nil || string(got) != "committed" {
				t.Fatalf("%s after the commit through node1: %q, %v", other, got, err)
			}
		})
	}
}

// ringOfCluster returns the ring the node at endpoint reports, built as
// clients and servers build it.
func ringOfCluster(t *testing.T, endpoint string) (*ring.Ring, *tyrpb.RingResponse) {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := opCtx()
	defer cancel()
	resp, err := tyrpb.NewTyrClient(conn).Ring(ctx, &tyrpb.RingRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []ring.Node
	for _, m := range resp.GetMembers() {
		if m.GetState() != client.StateLeft {
			nodes = append(nodes, ring.Node{ID: ring.NodeID(m.GetId()), Weight: m.GetWeight()})
		}
	}
	r, err := ring.New(ring.Config{VirtualNodesPerWeight: resp.GetVirtualNodesPerWeight(), TokensMax: resp.GetTokensMax(),
		HashVersion: resp.GetHashVersion()}, resp.GetRingId(), nodes)
	if err != nil {
		t.Fatal(err)
	}
	return r, resp
}

// TestClusterStraddlingAtomic: on 4 nodes keeping two replicas of each
// 4 KiB chunk, 16 clients spread over the nodes add 1 to 8-byte counters
// at offset 4096-3, which straddle chunks 0 and 1, in blobs whose two
// chunks are held by different pairs of nodes (found from the ring). Half
// the blobs start empty (the first add extends them across the boundary),
// half start 8 KiB long. Every add is acknowledged, each counter ends at
// exactly its number of acknowledged adds, and each add returned a value of
// its own.
func TestClusterStraddlingAtomic(t *testing.T) {
	const (
		ks          = "cluster-straddle"
		nodes       = 4
		replication = 2
		chunk       = 4096
		off         = chunk - 3
		counters    = 4
		workers     = 16
		addsEach    = 25
	)
	lc, admin := txnCluster(t, nodes, ks, client.KeyspaceConfig{ChunkSize: chunk, Replication: replication, MVCC: true})
	r, resp := ringOfCluster(t, lc.Endpoints[0])
	seed := ring.KeyspaceSeed(ks)
	var keys []string
	tried, differing := 0, 0
	for i := 0; len(keys) < counters; i++ {
		if i == 1000 {
			t.Fatalf("no %d of the first 1000 keys have chunks 0 and 1 on different nodes", counters)
		}
		key := fmt.Sprintf("straddle/%d", i)
		c0, err0 := r.Replicas(seed, key, 0, replication)
		c1, err1 := r.Replicas(seed, key, 1, replication)
		if err0 != nil || err1 != nil {
			t.Fatalf("replicas of %s: %v, %v", key, err0, err1)
		}
		tried++
		slices.Sort(c0)
		slices.Sort(c1)
		if slices.Equal(c0, c1) {
			continue
		}
		differing++
		keys = append(keys, key)
		t.Logf("%s: chunk 0 on %v, chunk 1 on %v", key, c0, c1)
	}
	t.Logf("%d of the %d keys tried have chunks 0 and 1 on different node pairs (ring %x of %d members)",
		differing, tried, resp.GetRingId(), r.Len())

	for i, key := range keys {
		ctx, cancel := opCtx()
		var err error
		if i%2 == 0 {
			err = admin[i%nodes].Create(ctx, ks, key)
		} else {
			_, err = admin[i%nodes].WriteCreate(ctx, ks, key, 0, make([]byte, 2*chunk))
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu      sync.Mutex
		values  = make([][]uint64, counters)
		errs    errorTally
		wg      sync.WaitGroup
		unknown atomic.Int64
	)
	began := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := dial(t, lc.Endpoints[w%nodes])
			for i := range addsEach {
				k := (w + i) % counters
				ctx, cancel := opCtx()
				v, err := cl.Atomic(ctx, ks, keys[k], off, 8, client.FuncAdd, 1)
				cancel()
				if err != nil {
					// Its outcome is unknown: stop this client, so the
					// final values can still be checked against the
					// acknowledged adds of the others (± these).
					unknown.Add(1)
					errs.add(fmt.Errorf("through node%d: %w", w%nodes+1, err))
					return
				}
				mu.Lock()
				values[k] = append(values[k], v)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	ctx, cancel := opCtx()
	defer cancel()
	acked := 0
	for k, key := range keys {
		acked += len(values[k])
		b, err := admin[(k+1)%nodes].Read(ctx, ks, key, off, 8)
		if err != nil || len(b) != 8 {
			t.Errorf("read of the counter of %s: %x, %v", key, b, err)
			continue
		}
		got := binary.LittleEndian.Uint64(b)
		if got != uint64(len(values[k])) {
			t.Errorf("%s: counter %d, want %d acknowledged adds (%d adds of unknown outcome in all)", key, got, len(values[k]), unknown.Load())
		}
		checkDistinct(t, key, values[k], 1)
	}
	t.Logf("%d of %d straddling atomic adds acknowledged in %v (%.1f/s), %d failed",
		acked, workers*addsEach, elapsed.Round(time.Millisecond), float64(acked)/elapsed.Seconds(), unknown.Load())
	if errs.total() > 0 {
		t.Errorf("%d straddling atomic adds failed (each ended its client): %s", errs.total(), errs.String())
	}
	if t.Failed() {
		t.Logf("node warnings and errors:\n%s%s", lc.LogLines("level=WARN", 20), lc.LogLines("level=ERROR", 20))
	}
}
