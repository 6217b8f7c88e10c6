package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// checkListData lists every blob under prefix with ListData and checks
// each one that came with bytes against want; it returns how many came
// with them.
func checkListData(t *testing.T, ctx context.Context, c *client.Client, ks, prefix string, dataMax int, want map[string][]byte) int {
	t.Helper()
	var with, total int
	after := ""
	for {
		page, next, err := c.ListData(ctx, ks, prefix, after, 0, dataMax)
		if err != nil {
			t.Fatal(err)
		}
		bytesIn := 0
		for _, b := range page {
			w, ok := want[b.Key]
			if !ok || b.Size != uint64(len(w)) {
				t.Fatalf("listed %s of %d bytes, want %d (known: %v)", b.Key, b.Size, len(w), ok)
			}
			total++
			if !b.HasData {
				if len(w) <= dataMax && len(w) <= client.ListDataBytesMax-bytesIn && len(w) <= 64<<10 {
					t.Errorf("%s (%d bytes) came without its bytes with %d bytes in the response", b.Key, len(w), bytesIn)
				}
				continue
			}
			if !bytes.Equal(b.Data, w) {
				t.Fatalf("%s: listed %d bytes that are not its own", b.Key, len(b.Data))
			}
			with++
			bytesIn += len(b.Data)
		}
		if bytesIn > client.ListDataBytesMax {
			t.Fatalf("a page carried %d bytes, above %d", bytesIn, client.ListDataBytesMax)
		}
		if next == "" {
			break
		}
		after = next
	}
	if total != len(want) {
		t.Fatalf("listed %d blobs, want %d", total, len(want))
	}
	return with
}

// ListData brings the bytes of blobs of at most dataMax bytes within
// their first chunk, up to ListDataBytesMax in a response, and refuses a
// limit out of range.
func TestListData(t *testing.T) {
	c := testserver.Start(t).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.CreateKeyspace(ctx, "lsd", client.KeyspaceConfig{ChunkSize: 64 << 10, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{
		"s/empty": {},
		"s/small": []byte("ten bytes."),
		"s/mid":   randomBytes(1, 50<<10),
		"s/chunk": randomBytes(2, 64<<10),   // one whole chunk
		"s/two":   randomBytes(3, 64<<10+1), // spills into a second chunk
	}
	for k, v := range want {
		if _, err := c.WriteCreate(ctx, "lsd", k, 0, v); err != nil {
			t.Fatal(err)
		}
	}
	if got := checkListData(t, ctx, c, "lsd", "s/", 1<<20, want); got != 4 {
		t.Errorf("%d blobs came with their bytes, want 4 (all but the one past its first chunk)", got)
	}
	if got := checkListData(t, ctx, c, "lsd", "s/", 20, want); got != 2 {
		t.Errorf("with a limit of 20 bytes, %d blobs came with their bytes, want 2", got)
	}
	// More small blobs than one response carries: 80 of 60 KiB.
	big := map[string][]byte{}
	for i := range 80 {
		k := fmt.Sprintf("b/%02d", i)
		big[k] = randomBytes(uint64(10+i), 60<<10)
		if _, err := c.WriteCreate(ctx, "lsd", k, 0, big[k]); err != nil {
			t.Fatal(err)
		}
	}
	// One page of 80: the first ones' bytes fill the response; the others
	// are listed without theirs.
	if got, fit := checkListData(t, ctx, c, "lsd", "b/", client.ListDataBytesMax, big), client.ListDataBytesMax/(60<<10); got != fit {
		t.Errorf("%d of 80 blobs came with their bytes, want the %d that fit", got, fit)
	}
	// Pages of 10 bring every one's.
	page, next, err := c.ListData(ctx, "lsd", "b/", "", 10, client.ListDataBytesMax)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 10 || next != "b/09" || !page[9].HasData {
		t.Errorf("a page of 10 blobs of 60 KiB: %d listed, next %q", len(page), next)
	}
	for _, bad := range []int{0, -1, client.ListDataBytesMax + 1} {
		if _, _, err := c.ListData(ctx, "lsd", "", "", 0, bad); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("data limit %d: %v, want an invalid argument", bad, err)
		}
	}
}

// On a cluster where each node holds some blobs (replication 1 on 3
// nodes), a listing through any node brings every small blob's bytes.
func TestListDataCluster(t *testing.T) {
	lc := testserver.UpCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c0, err := client.Dial(lc.Endpoint(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c0.Close()
	if _, err := c0.CreateKeyspace(ctx, "ldc", client.KeyspaceConfig{ChunkSize: 64 << 10, Replication: 1, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for i := range 60 {
		k := fmt.Sprintf("k%02d", i)
		want[k] = randomBytes(uint64(100+i), 100+i*37)
		if _, err := c0.WriteCreate(ctx, "ldc", k, 0, want[k]); err != nil {
			t.Fatal(err)
		}
	}
	// The ring puts the blobs on every node. (Asked right after the
	// writes, a node once counted none of its own: the ring is the
	// placement the writes used.)
	held := map[int]int{}
	for k := range want {
		held[lc.Holders("ldc", k, 1)[0]]++
	}
	for k := 1; k <= 3; k++ {
		if held[k] == 0 || held[k] == 60 {
			t.Fatalf("node%d holds %d of the 60 blobs: the test wants them spread", k, held[k])
		}
	}
	for k := 1; k <= 3; k++ {
		c, err := client.Dial(lc.Endpoint(k))
		if err != nil {
			t.Fatal(err)
		}
		if got := checkListData(t, ctx, c, "ldc", "", 1<<20, want); got != 60 {
			t.Errorf("through node%d, %d of 60 blobs came with their bytes", k, got)
		}
		c.Close()
	}
}
