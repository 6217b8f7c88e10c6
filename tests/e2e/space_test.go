package e2e

// Full disks: a node whose data directory sits on a small file system of
// its own (a tmpfs the test mounts) is filled until it refuses writes with
// the no-space error; every acknowledged write reads back, reads go on,
// deletes still work and free the space, and writes work again without a
// restart. On one server, and on a 3-node cluster (replication 2) where one
// node fills up. Reproduce with
//
//	go test ./tests/e2e -run 'TestFullDisk' -count=1 -v

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

const (
	// fullDiskBytes is the small file system's size; fullDiskFloor the
	// node's --min-free on it.
	fullDiskBytes = 256 << 20
	fullDiskFloor = "96MiB"
	// fullDiskBlob is the size of each blob written.
	fullDiskBlob = 1 << 20
	// fullDiskSlack is how far above the floor the free space may be
	// measured just after writes were refused: a memtable flush that ends
	// after the refusal deletes its write-ahead log, up to a memtable
	// (16 MiB by default) and a little.
	fullDiskSlack = 20 << 20
)

// atTheFloor reports whether a node's usage shows it full: free space below
// the floor, give or take fullDiskSlack.
func atTheFloor(u client.NodeUsage) bool {
	return u.MinFreeBytes > 0 && u.FreeBytes < u.MinFreeBytes+fullDiskSlack
}

// fillUntilFull writes blobs of fullDiskBlob random bytes through c until
// enough writes were refused with ErrNoSpace (refusals), and returns the
// acknowledged blobs. Any other error fails the test, as does a write
// refused for space that is not a definite refusal.
func fillUntilFull(t *testing.T, c *client.Client, ks, prefix string, refusals int) map[string][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(7, 7))
	acked := map[string][]byte{}
	refused := 0
	for i := 0; refused < refusals; i++ {
		if i > 4*fullDiskBytes/fullDiskBlob {
			t.Fatalf("%d blobs of %d bytes written, %d refused for space: the floor never held", len(acked), fullDiskBlob, refused)
		}
		data := make([]byte, fullDiskBlob)
		for j := 0; j < len(data); j += 8 {
			v := rng.Uint64()
			for k := range 8 {
				data[j+k] = byte(v >> (8 * k))
			}
		}
		key := fmt.Sprintf("%s%04d", prefix, i)
		_, err := c.WriteCreate(ctx, ks, key, 0, data)
		switch {
		case err == nil:
			acked[key] = data
		case errors.Is(err, client.ErrNoSpace):
			if !client.Refused(err) {
				t.Fatalf("write of %s refused for space, but not as a definite refusal: %v", key, err)
			}
			refused++
		default:
			t.Fatalf("write of %s after %d acknowledged: %v", key, len(acked), err)
		}
	}
	t.Logf("%d blobs of %d bytes acknowledged before %d writes were refused for space", len(acked), fullDiskBlob, refused)
	return acked
}

// checkAcked reads every acknowledged blob back.
func checkAcked(t *testing.T, c *client.Client, ks string, acked map[string][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for key, want := range acked {
		got, err := c.Read(ctx, ks, key, 0, uint64(len(want)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("acknowledged blob %s: %d bytes read, equal %v, err %v", key, len(got), bytes.Equal(got, want), err)
		}
	}
}

// deleteAllThenWrite deletes the blobs, then writes count new ones: each
// must be admitted once the space is reclaimed, with no restart, within a
// minute of the deletes.
func deleteAllThenWrite(t *testing.T, c *client.Client, ks string, acked map[string][]byte, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for key := range acked {
		if err := c.Delete(ctx, ks, key); err != nil {
			t.Fatalf("delete %s on a full disk: %v", key, err)
		}
	}
	deleted := time.Now()
	data := bytes.Repeat([]byte{0xa5}, fullDiskBlob)
	for i := range count {
		for {
			_, err := c.WriteCreate(ctx, ks, fmt.Sprintf("after-%d", i), 0, data)
			if err == nil {
				break
			}
			if !errors.Is(err, client.ErrNoSpace) || time.Since(deleted) > time.Minute {
				t.Fatalf("write %d, %v after deleting %d blobs: %v", i, time.Since(deleted), len(acked), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("%d writes admitted within %v of deleting %d blobs", count, time.Since(deleted).Round(time.Millisecond), len(acked))
}

func TestFullDiskOneNode(t *testing.T) {
	t.Parallel()
	dir := testserver.Tmpfs(t, fullDiskBytes)
	srv := testserver.StartIn(t, filepath.Join(dir, "data"), "--min-free", fullDiskFloor)
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := c.CreateKeyspace(ctx, "full", client.DefaultKeyspaceConfig()); err != nil {
		t.Fatal(err)
	}
	acked := fillUntilFull(t, c, "full", "b", 3)
	if len(acked) < 32 {
		t.Fatalf("only %d MiB acknowledged on a %d MiB file system with a floor of %s", len(acked), fullDiskBytes>>20, fullDiskFloor)
	}
	u, err := c.NodeUsage(ctx)
	if err != nil || !atTheFloor(u) || u.MinFreeBytes != 96<<20 {
		t.Fatalf("node usage when full: %+v, %v; want free within %d MiB of the floor of 96 MiB", u, err, fullDiskSlack>>20)
	}
	checkAcked(t, c, "full", acked)
	// A restart keeps what was acknowledged and still refuses writes.
	srv.Kill()
	srv.Restart()
	c = srv.Client()
	checkAcked(t, c, "full", acked)
	deleteAllThenWrite(t, c, "full", acked, 16)
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := c.Keyspace(ctx, "full")
	if err != nil || info.Blobs != 16 || info.LogicalBytes != 16*fullDiskBlob {
		t.Fatalf("keyspace info after the deletes and 16 writes: %+v, %v", info, err)
	}
	t.Logf("after: %d blobs, %d logical bytes, %d on disk, %d to reclaim", info.Blobs, info.LogicalBytes, info.DiskBytes, info.ReclaimBytes)
}

func TestFullDiskCluster(t *testing.T) {
	t.Parallel()
	lc := testserver.UpCluster(t, 3, "--sync", "--min-free", fullDiskFloor)
	// node2's data moves onto a small file system of its own.
	if r := testserver.Run(t, "cluster", "stop", "--dir", lc.Dir, "--node", "2"); r.Exit != 0 {
		t.Fatalf("tyr cluster stop --node 2: exit %d\n%s", r.Exit, r.Stderr)
	}
	testserver.MoveOnto(t, lc.NodeFile(2, "data"), fullDiskBytes)
	lc.Start(2)
	c := dial(t, lc.Endpoints[0])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := c.CreateKeyspace(ctx, "full", client.KeyspaceConfig{ChunkSize: 1 << 20, Replication: 2, MVCC: true, Sync: true}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, testserver.CatalogSpreadMax, "the keyspace on every node", func() (bool, string) {
		for _, ep := range lc.Endpoints {
			if _, err := dial(t, ep).Keyspace(ctx, "full"); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	// Writes whose chunk node2 holds are refused once it is full; the
	// others go on, so the test asks for more refusals.
	acked := fillUntilFull(t, c, "full", "b", 8)
	if len(acked) < 32 {
		t.Fatalf("only %d MiB acknowledged", len(acked))
	}
	n2 := dial(t, lc.Endpoints[1])
	if u, err := n2.NodeUsage(ctx); err != nil || !atTheFloor(u) {
		t.Fatalf("node2's usage when full: %+v, %v; want free within %d MiB of the floor", u, err, fullDiskSlack>>20)
	}
	for _, ep := range lc.Endpoints {
		checkAcked(t, dial(t, ep), "full", acked)
	}
	deleteAllThenWrite(t, c, "full", acked, 16)
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ep := range lc.Endpoints {
		got, err := dial(t, ep).Read(ctx, "full", "after-15", 0, fullDiskBlob)
		if err != nil || len(got) != fullDiskBlob {
			t.Fatalf("read after-15 through %s: %d bytes, %v", ep, len(got), err)
		}
	}
}
