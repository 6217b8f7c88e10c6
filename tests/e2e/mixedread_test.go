package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// The mixed-read check: writers overwrite ranges that span many chunks
// (and, for the large range, more than one read request) with a pattern
// naming the write, each range in one commit; concurrent readers read each
// range whole and must find exactly one write's pattern in it, never parts
// of two. Four nodes keep two replicas of each chunk, so the chunks of a
// range are spread over every node and reads go through version managers
// that fetch the chunks they do not hold from other nodes.
func TestMixedReads(t *testing.T) {
	lc := testserver.UpCluster(t, 4)
	clients := dialAll(t, lc)
	const ks = "mixed-reads"
	replicatedKeyspace(t, clients, ks, client.KeyspaceConfig{Replication: 2, MVCC: true, Sync: true, ChunkSize: 64 << 10})

	// A range of 256 KiB spans 4 chunks; one of 6 MiB spans 96 chunks and
	// two read requests.
	ranges := []struct {
		key  string
		size int
	}{{"small", 256 << 10}, {"large", 6 << 20}}
	pattern := func(writer, seq int, size int) []byte {
		unit := []byte(fmt.Sprintf("[w%d.%06d]", writer, seq))
		return bytes.Repeat(unit, size/len(unit)+1)[:size]
	}
	commitRange := func(c *client.Client, key string, data []byte) error {
		var ops []client.Op
		for off := 0; off < len(data); off += client.PayloadBytesMax {
			end := min(off+client.PayloadBytesMax, len(data))
			ops = append(ops, client.WriteOp(key, uint64(off), data[off:end], true))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := c.Commit(ctx, ks, ops...)
		return err
	}
	for _, r := range ranges {
		if err := commitRange(clients[0], r.key, pattern(9, 0, r.size)); err != nil {
			t.Fatal(err)
		}
	}

	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	var wg sync.WaitGroup
	var writes, reads atomic.Int64
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 1; ctx.Err() == nil; seq++ {
				for _, r := range ranges {
					if err := commitRange(clients[w], r.key, pattern(w, seq, r.size)); err != nil {
						t.Errorf("write of %s by w%d: %v", r.key, w, err)
						return
					}
					writes.Add(1)
				}
			}
		}()
	}
	for rd := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[(rd+1)%len(clients)]
			for ctx.Err() == nil {
				for _, r := range ranges {
					data, err := c.Read(context.Background(), ks, r.key, 0, uint64(r.size))
					if err != nil {
						t.Errorf("read of %s: %v", r.key, err)
						return
					}
					if len(data) != r.size {
						t.Errorf("read of %s: %d bytes, want %d", r.key, len(data), r.size)
						return
					}
					unit := data[:bytes.IndexByte(data, ']')+1]
					want := bytes.Repeat(unit, r.size/len(unit)+1)[:r.size]
					if !bytes.Equal(data, want) {
						at := 0
						for data[at] == want[at] {
							at++
						}
						t.Errorf("mixed read of %s: starts with write %s, differs from it at byte %d: %q", r.key, unit, at,
							data[at:min(at+24, len(data))])
						return
					}
					reads.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if writes.Load() < 4 || reads.Load() < 4 {
		t.Fatalf("%d writes and %d reads of ranges; want at least 4 of each", writes.Load(), reads.Load())
	}
	if !t.Failed() {
		t.Logf("%d range writes, %d range reads, none mixed", writes.Load(), reads.Load())
	}
}
