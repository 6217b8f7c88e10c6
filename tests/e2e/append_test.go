package e2e

// TestAppendConcurrent proves that appends are atomic and serialized: 32
// goroutines append 50 distinct records each (1 byte to past a 64 KiB page)
// to one blob at once; every append must land exactly once, at the offset it
// returned, with no overlap and no gap (the returned ranges, sorted, tile
// [0, size) exactly), each appender's offsets must increase, and reading each
// range must return that record. It runs on an MVCC keyspace and on one with
// MVCC off and sync on.
//
// Record lengths and contents come from the seed. Reproduce a failure with:
//
//	TYR_SEED=<seed> go test -race -count=1 ./tests/e2e -run 'TestAppendConcurrent' -v

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// appendRecord is one acknowledged append.
type appendRecord struct {
	writer, seq int
	offset      uint64
	data        []byte
}

func TestAppendConcurrent(t *testing.T) {
	seed := seedFromEnv(t)
	srv := testserver.Start(t)
	c := srv.Client()
	for _, pass := range []struct {
		name    string
		cfg     client.KeyspaceConfig
		writers int
		records int
	}{
		{"mvcc", client.KeyspaceConfig{ChunkSize: modelChunk, MVCC: true, Sync: false}, 32, 50},
		{"nomvcc-sync", client.KeyspaceConfig{ChunkSize: modelChunk, MVCC: false, Sync: true}, 32, 20},
	} {
		t.Run(pass.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			ks := "append-" + pass.name
			if _, err := c.CreateKeyspace(ctx, ks, pass.cfg); err != nil {
				t.Fatal(err)
			}
			const key = "log"
			if err := c.Create(ctx, ks, key); err != nil {
				t.Fatal(err)
			}
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d (TYR_SEED=%d) keyspace %s: %s", seed, seed, ks, fmt.Sprintf(format, args...))
			}
			records := make([][]appendRecord, pass.writers)
			var wg sync.WaitGroup
			for w := 0; w < pass.writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(seed, uint64(w)))
					for seq := 0; seq < pass.records; seq++ {
						n := 1 + r.IntN(3*modelChunk)
						switch p := r.IntN(25); {
						case p < 5:
							n = 1 + r.IntN(16)
						case p < 6:
							n = modelPage + r.IntN(modelPage)
						}
						// A header makes each record distinct (when long
						// enough); random bytes fill the rest.
						data := randomBytes(r, n)
						copy(data, fmt.Sprintf("<%d.%d>", w, seq))
						off, err := c.Append(ctx, ks, key, data)
						if err != nil {
							t.Errorf("seed %d (TYR_SEED=%d) keyspace %s: writer %d append %d (%d bytes): %v",
								seed, seed, ks, w, seq, n, err)
							return
						}
						records[w] = append(records[w], appendRecord{w, seq, off, data})
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			var all []appendRecord
			for w, rs := range records {
				for i := 1; i < len(rs); i++ {
					if rs[i].offset <= rs[i-1].offset {
						fail("writer %d: append %d landed at %d, not after its append %d at %d",
							w, i, rs[i].offset, i-1, rs[i-1].offset)
					}
				}
				all = append(all, rs...)
			}
			slices.SortFunc(all, func(a, b appendRecord) int {
				return cmp.Or(cmp.Compare(a.offset, b.offset), cmp.Compare(a.writer, b.writer))
			})
			var end uint64
			for _, rec := range all {
				if rec.offset != end {
					fail("append %d.%d of %d bytes landed at %d, want %d (the end of the previous one): "+
						"appends overlap or leave a gap", rec.writer, rec.seq, len(rec.data), rec.offset, end)
				}
				end += uint64(len(rec.data))
			}
			st, err := c.Stat(ctx, ks, key)
			if err != nil {
				fail("stat: %v", err)
			}
			if st.Size != end {
				fail("blob size %d, want %d, the sum of %d appends", st.Size, end, len(all))
			}
			got, err := c.Read(ctx, ks, key, 0, end+1)
			if err != nil {
				fail("read: %v", err)
			}
			if uint64(len(got)) != end {
				fail("read %d bytes, want %d", len(got), end)
			}
			for _, rec := range all {
				if part := got[rec.offset : rec.offset+uint64(len(rec.data))]; !bytes.Equal(part, rec.data) {
					fail("append %d.%d at %d: %s", rec.writer, rec.seq, rec.offset, describeDiff(part, rec.data))
				}
			}
			// Reading each record's range on its own returns it too.
			for i := 0; i < len(all); i += 7 {
				rec := all[i]
				part, err := c.Read(ctx, ks, key, rec.offset, uint64(len(rec.data)))
				if err != nil || !bytes.Equal(part, rec.data) {
					fail("read of append %d.%d at [%d,+%d): err %v, %s", rec.writer, rec.seq, rec.offset,
						len(rec.data), err, describeDiff(part, rec.data))
				}
			}
			t.Logf("seed %d: %d appends, %d bytes", seed, len(all), end)
		})
	}
}
