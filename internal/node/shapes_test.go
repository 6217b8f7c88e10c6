package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/txn"
)

// TestMultiBlobShapes: uncontended commits on two or three blobs commit on
// every cluster shape, whatever node coordinates them, when the blobs'
// version managers differ and their chunks (4 KiB here) live on other
// nodes than their version managers: writes across chunks, appends,
// truncates, creates, deletes, atomic adds, compare-and-swap and read
// checks. After each commit every blob reads back, through a version
// manager, as a model of the commits says.
func TestMultiBlobShapes(t *testing.T) {
	for _, shape := range []struct{ nodes, rf int }{{1, 1}, {2, 1}, {3, 1}, {4, 2}, {5, 3}, {3, 3}} {
		t.Run(fmt.Sprintf("%dn-rf%d", shape.nodes, shape.rf), func(t *testing.T) {
			testMultiBlobShape(t, shape.nodes, shape.rf)
		})
	}
}

func testMultiBlobShape(t *testing.T, nodes, rf int) {
	const cs, commits = 4 << 10, 60
	tc := startClusterRF(t, nodes, rf, 0, 1)
	tc.waitCaughtUp(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(uint64(nodes), uint64(rf)))
	model := map[string][]byte{}
	versions := map[string]uint64{}
	keys := []string{"a", "b", "c", "d", "e", "f"}
	pl, err := tc.nodes[0].Placement(testKeyspace, rf)
	if err != nil {
		t.Fatal(err)
	}
	multiVM := 0
	for i := range commits {
		n := 2 + rng.IntN(2)
		picked := slices.Clone(keys)
		rng.Shuffle(len(picked), func(a, b int) { picked[a], picked[b] = picked[b], picked[a] })
		picked = picked[:n]
		var ops []txn.Op
		next := map[string][]byte{}
		for _, k := range picked {
			cur, exists := model[k]
			b := slices.Clone(cur)
			if exists && rng.IntN(3) == 0 {
				ops = append(ops, txn.Op{Key: k, Kind: txn.OpReadCheck, Version: versions[k]})
			}
			switch r := rng.IntN(10); {
			case !exists || r < 3:
				off := uint64(rng.IntN(3 * cs))
				data := bytes.Repeat([]byte{byte('a' + i%26)}, 1+rng.IntN(2*cs))
				ops = append(ops, txn.Op{Key: k, Kind: txn.OpWrite, Offset: off, Data: data, Create: true})
				if need := off + uint64(len(data)); uint64(len(b)) < need {
					b = append(b, make([]byte, need-uint64(len(b)))...)
				}
				copy(b[off:], data)
			case r < 5:
				data := bytes.Repeat([]byte{byte('A' + i%26)}, 1+rng.IntN(cs))
				ops = append(ops, txn.Op{Key: k, Kind: txn.OpAppend, Data: data})
				b = append(b, data...)
			case r < 6:
				size := uint64(rng.IntN(4 * cs))
				ops = append(ops, txn.Op{Key: k, Kind: txn.OpTruncate, Size: size})
				if uint64(len(b)) < size {
					b = append(b, make([]byte, size-uint64(len(b)))...)
				}
				b = b[:size]
			case r < 7:
				ops = append(ops, txn.Op{Key: k, Kind: txn.OpDelete})
				b = nil
			case r < 9 && len(b) >= 8:
				ops = append(ops, txn.Op{Key: k, Kind: txn.OpAtomic, Offset: 0, Width: 8, Func: txn.FuncAdd, Operand: 3})
				binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)+3)
			case len(b) >= 4:
				want := slices.Clone(b[:4])
				ops = append(ops, txn.Op{Key: k, Kind: txn.OpCompareAndSwap, Offset: 0, Expected: want, Data: []byte("cas!")})
				copy(b, "cas!")
			default:
				ops = append(ops, txn.Op{Key: k, Kind: txn.OpAppend, Data: []byte("x")})
				b = append(b, 'x')
			}
			next[k] = b
		}
		vms, _ := pl.vms(picked[0])
		for _, k := range picked[1:] {
			if other, _ := pl.vms(k); !slices.Equal(slices.Sorted(slices.Values(other)), slices.Sorted(slices.Values(vms))) {
				multiVM++
				break
			}
		}
		via := i % nodes
		results, err := tc.commit(ctx, via, ops...)
		if err != nil {
			t.Fatalf("commit %d via n%d (%s): %v", i, via+1, opsText(ops), err)
		}
		for j, op := range ops {
			if op.Kind != txn.OpDelete {
				versions[op.Key] = results[j].Version
			}
		}
		for k, b := range next {
			if b == nil {
				delete(model, k)
			} else {
				model[k] = b
			}
		}
		for _, k := range keys {
			tc.checkBlob(ctx, t, testKeyspace, pl, k, model[k], i)
		}
	}
	if nodes > rf && multiVM == 0 {
		t.Fatalf("no commit touched blobs with different version managers")
	}
	fetched := uint64(0)
	for _, n := range tc.nodes {
		fetched += n.Stats().BasesFetched
	}
	t.Logf("%d nodes, replication %d: %d of %d commits committed, %d on blobs whose version managers differ, %d attempts with bases fetched ahead",
		nodes, rf, commits, commits, multiVM, fetched)
}

// checkBlob reads blob key of keyspace through its first version manager
// and compares it with want (nil: absent).
func (tc *testCluster) checkBlob(ctx context.Context, t *testing.T, keyspace string, pl Placement, key string, want []byte, commit int) {
	t.Helper()
	vms, err := pl.vms(key)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range tc.nodes {
		if n.self != vms[0] {
			continue
		}
		ks, err := tc.engines[i].Acquire(keyspace)
		if err != nil {
			t.Fatal(err)
		}
		defer ks.Release()
		own, err := n.Placement(keyspace, int(ks.Config.Replication))
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := n.ReadThrough(ctx, ks, own, key, 0, limits.PayloadBytesMax, 0, false)
		switch {
		case want == nil && errors.Is(err, errs.ErrNotFound):
		case err != nil:
			t.Fatalf("after commit %d: read of %q on %s: %v", commit, key, n.self, err)
		case !bytes.Equal(got, want):
			t.Fatalf("after commit %d: %q reads %d bytes on %s, the model %d (first difference at %d)", commit, key, len(got), n.self, len(want), firstDiff(got, want))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func opsText(ops []txn.Op) string {
	var b bytes.Buffer
	for _, op := range ops {
		fmt.Fprintf(&b, "%s %s off=%d len=%d size=%d; ", op.Kind, op.Key, op.Offset, len(op.Data), op.Size)
	}
	return b.String()
}
