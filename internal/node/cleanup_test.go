package node

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/rebalance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/testserver"
	"github.com/tyrstore/tyr/internal/txn"
)

var cleanLine = regexp.MustCompile(`msg="ring change (cleaned up|cleanup stopped)" epoch=(\d+) "blobs dropped"=(\d+) "chunks dropped"=(\d+)`)

// cleanupsLogged returns, per epoch, the blobs and chunks the cleanup
// lines in log say were dropped, and whether each epoch's cleanup was
// stopped.
func cleanupsLogged(t *testing.T, log string) (blobs, chunks map[uint64]int, stopped map[uint64]bool) {
	t.Helper()
	blobs, chunks, stopped = map[uint64]int{}, map[uint64]int{}, map[uint64]bool{}
	for _, m := range cleanLine.FindAllStringSubmatch(log, -1) {
		e, _ := strconv.ParseUint(m[2], 10, 64)
		b, _ := strconv.Atoi(m[3])
		c, _ := strconv.Atoi(m[4])
		blobs[e] += b
		chunks[e] += c
		stopped[e] = m[1] == "cleanup stopped"
	}
	return blobs, chunks, stopped
}

// cleanupNode is node a of a ring of a, b, c (replication 3: it holds
// every chunk) with 64 blobs of 1 or 3 chunks of 4 KiB (blobBytes), and the records of
// adding d (epoch 2, clean) then e (epoch 3, installing).
func cleanupNode(t *testing.T, log *slog.Logger) (*Node, *storage.Keyspace, rebalance.Record, rebalance.Record) {
	t.Helper()
	eng, err := storage.Open(storage.Options{Dir: t.TempDir(), CacheBytes: 8 << 20, MemTableBytes: 1 << 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	ks, err := eng.Create("kss", keyspace.Config{ChunkBytes: 4 << 10, Replication: 3, MVCC: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		p, err := ks.Store.Prepare([]txn.Op{{Key: fmt.Sprintf("b%02d", i), Kind: txn.OpWrite, Data: blobBytes(i), Create: true}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	n := &Node{self: "a", cfg: Config{Log: log, Engine: eng}}
	n.epoch.mu.known = true
	abc := []ring.Node{{ID: "a", Weight: 1}, {ID: "b", Weight: 1}, {ID: "c", Weight: 1}}
	first, err := rebalance.First("a", abc)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rebalance.Propose(first, "a", append(abc, ring.Node{ID: "d", Weight: 1}), 3)
	if err != nil {
		t.Fatal(err)
	}
	r2.Phase = rebalance.PhaseClean
	r3, err := rebalance.Propose(r2, "a", append(r2.New, ring.Node{ID: "e", Weight: 1}), 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.setRing(r2); err != nil {
		t.Fatal(err)
	}
	return n, ks, r2, r3
}

// blobBytes is blob i's bytes: one chunk of 4 KiB if i is even, three if
// it is odd.
func blobBytes(i int) []byte { return bytes.Repeat([]byte{byte(i + 1)}, (1+2*(i%2))*4<<10) }

// keptChunks counts, per blob, the chunks whose bytes the store still
// reads (a dropped chunk reads as zeros), and the blobs it keeps.
func keptChunks(t *testing.T, ks *storage.Keyspace) (blobs int, chunks map[string]int) {
	t.Helper()
	chunks = map[string]int{}
	infos, _, err := ks.Store.List("", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	cs := ks.Store.ChunkBytes()
	for _, info := range infos {
		for c := uint64(0); c*cs < info.Size; c++ {
			b, err := ks.Store.ReadChunks(info.Key, c*cs, cs, 0, info.Size, 0)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(b, bytes.Repeat(b[:1], len(b))) && b[0] != 0 {
				chunks[info.Key]++
			}
		}
	}
	return len(infos), chunks
}

// TestCleanUpStoppedByNewerEpoch: an old owner's cleanup that a newer
// epoch interrupts (the next ring change began before it finished, as
// when nodes are added one after the other) logs what it dropped before
// it stopped, and the newer epoch's cleanup drops the rest: the two lines
// together count every blob and chunk the node gave up, and it ends
// holding exactly what the last ring places on it, chunk by chunk. The
// cleanup used to return without a line, so the drops it made went
// uncounted.
func TestCleanUpStoppedByNewerEpoch(t *testing.T) {
	var logBuf testserver.SyncBuffer
	n, ks, r2, r3 := cleanupNode(t, slog.New(slog.NewTextHandler(&logBuf, nil)))
	pl2, err := n.Placement("kss", 3)
	if err != nil {
		t.Fatal(err)
	}
	// Hold the lock of a blob the cleanup drops, past the first: the
	// cleanup waits there while the next epoch begins.
	var held string
	gone := 0
	for i := range 64 {
		key := fmt.Sprintf("b%02d", i)
		if !pl2.Manages(key) && !pl2.holdsAny(key, uint64(len(blobBytes(i))), 4<<10) {
			if gone++; gone == 3 {
				held = key
				break
			}
		}
	}
	if held == "" {
		t.Fatal("epoch 2 gives up fewer than 3 blobs of node a")
	}
	p, err := ks.Store.Prepare([]txn.Op{{Key: held, Kind: txn.OpWrite, Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.cleanUp(r2.Epoch)
	}()
	// Wait until the blobs given up before it are gone.
	deadline := time.Now().Add(cleanGrace + 20*time.Second)
	for time.Now().Before(deadline) {
		infos, _, err := ks.Store.List("", "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		if 64-len(infos) >= gone-1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if err := n.setRing(r3); err != nil {
		t.Fatal(err)
	}
	p.Abort()
	<-done
	blobsAfter2, _ := keptChunks(t, ks)
	blobs, _, stopped := cleanupsLogged(t, logBuf.String())
	if !stopped[r2.Epoch] {
		t.Fatalf("no line of epoch %d's cleanup stopped by the newer epoch; log:\n%s", r2.Epoch, logBuf.String())
	}
	if blobs[r2.Epoch] != 64-blobsAfter2 || blobs[r2.Epoch] < gone-1 {
		t.Fatalf("epoch %d's cleanup logged %d blobs dropped, and dropped %d (at least %d)", r2.Epoch, blobs[r2.Epoch], 64-blobsAfter2, gone-1)
	}

	// Epoch 3 ends; its cleanup finishes the job.
	r3.Phase = rebalance.PhaseClean
	if err := n.setRing(r3); err != nil {
		t.Fatal(err)
	}
	n.cleanUp(r3.Epoch)
	blobs, chunks, stopped := cleanupsLogged(t, logBuf.String())
	if stopped[r3.Epoch] {
		t.Fatalf("epoch %d's cleanup stopped; log:\n%s", r3.Epoch, logBuf.String())
	}
	pl, err := n.Placement("kss", 3)
	if err != nil {
		t.Fatal(err)
	}
	wantBlobs, wantChunks, givenUp, chunksGivenUp := 0, map[string]int{}, 0, 0
	for i := range 64 {
		key := fmt.Sprintf("b%02d", i)
		n := uint64(len(blobBytes(i))) / (4 << 10)
		held := 0
		for c := range n {
			if pl.Holds(key, c) {
				held++
			}
		}
		if held == 0 && !pl.Manages(key) {
			givenUp++
			continue
		}
		wantBlobs++
		if held > 0 {
			wantChunks[key] = held
		}
		chunksGivenUp += int(n) - held
	}
	gotBlobs, gotChunks := keptChunks(t, ks)
	if gotBlobs != wantBlobs || fmt.Sprint(gotChunks) != fmt.Sprint(wantChunks) {
		t.Fatalf("node a keeps %d blobs, chunks %v; the last ring places %d blobs, chunks %v on it", gotBlobs, gotChunks, wantBlobs, wantChunks)
	}
	if b := blobs[r2.Epoch] + blobs[r3.Epoch]; b != givenUp {
		t.Fatalf("the cleanups logged %d blobs dropped (%v), node a gave up %d", b, blobs, givenUp)
	}
	// A chunk is counted once per cleanup that drops something of it:
	// its pages, or its version once the node no longer manages the blob.
	if c := chunks[r2.Epoch] + chunks[r3.Epoch]; c < chunksGivenUp || chunks[r3.Epoch] == 0 {
		t.Fatalf("the cleanups logged %v chunks dropped; node a gave up %d chunks of the blobs it keeps", chunks, chunksGivenUp)
	}
	t.Logf("epoch %d: %d blobs, %d chunks dropped before it stopped; epoch %d: %d blobs, %d chunks",
		r2.Epoch, blobs[r2.Epoch], chunks[r2.Epoch], r3.Epoch, blobs[r3.Epoch], chunks[r3.Epoch])
}
