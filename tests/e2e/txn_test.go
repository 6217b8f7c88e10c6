package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/testserver"
)

const txnKeyspace = "txn"

func txnSetup(t *testing.T) (*testserver.Server, *client.Client) {
	t.Helper()
	srv := testserver.Start(t)
	c := srv.Client()
	if _, err := c.CreateKeyspace(context.Background(), txnKeyspace, client.KeyspaceConfig{ChunkSize: 4096, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	return srv, c
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func readU64(ctx context.Context, tx *client.Tx, key string) (uint64, error) {
	b, err := tx.Read(ctx, key, 0, 8)
	if err != nil {
		return 0, err
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("blob %q holds %d bytes", key, len(b))
	}
	return binary.LittleEndian.Uint64(b), nil
}

// TestAtomicCounter: 32 clients add 1 to one counter N times each; the
// final value is exact and each answer is a distinct new value.
func TestAtomicCounter(t *testing.T) {
	srv, c := txnSetup(t)
	ctx := context.Background()
	// The counter crosses a chunk boundary (4 KiB chunks): it just works.
	const off = 4096 - 3
	if err := c.Create(ctx, txnKeyspace, "ctr"); err != nil {
		t.Fatal(err)
	}
	const clients, n = 32, 40
	var wg sync.WaitGroup
	seen := make([][]uint64, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := srv.Client()
			for range n {
				v, err := cl.Atomic(ctx, txnKeyspace, "ctr", off, 8, client.FuncAdd, 1)
				if err != nil {
					t.Error(err)
					return
				}
				seen[i] = append(seen[i], v)
			}
		}()
	}
	wg.Wait()
	got, err := c.Read(ctx, txnKeyspace, "ctr", off, 8)
	if err != nil || binary.LittleEndian.Uint64(got) != clients*n {
		t.Fatalf("counter %x (%v), want %d", got, err, clients*n)
	}
	distinct := map[uint64]bool{}
	for _, s := range seen {
		for _, v := range s {
			distinct[v] = true
		}
	}
	if len(distinct) != clients*n {
		t.Fatalf("%d distinct new values, want %d", len(distinct), clients*n)
	}
	// CAS on the counter: a stale expectation fails, a current one works.
	if err := c.CompareAndSwap(ctx, txnKeyspace, "ctr", off, le64(1), le64(0)); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("stale CAS: %v", err)
	}
	if err := c.CompareAndSwap(ctx, txnKeyspace, "ctr", off, le64(clients*n), le64(7)); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Atomic(ctx, txnKeyspace, "ctr", off, 8, client.FuncMaxUnsigned, 5); err != nil || v != 7 {
		t.Fatalf("max after CAS: %d, %v", v, err)
	}
}

// TestTxIncrements: 32 clients increment one counter with read-modify-write
// transactions; no increment is lost and conflicts did happen.
func TestTxIncrements(t *testing.T) {
	srv, c := txnSetup(t)
	ctx := context.Background()
	if _, err := c.WriteCreate(ctx, txnKeyspace, "n", 0, le64(0)); err != nil {
		t.Fatal(err)
	}
	const clients, n = 32, 15
	var attempts, aborts atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := srv.Client()
			for range n {
				tries := 0
				err := cl.RunTx(ctx, txnKeyspace, func(tx *client.Tx) error {
					tries++
					v, err := readU64(ctx, tx, "n")
					if err != nil {
						return err
					}
					tx.Write("n", 0, le64(v+1))
					// Read-your-writes inside the transaction.
					if again, err := readU64(ctx, tx, "n"); err != nil || again != v+1 {
						return fmt.Errorf("own write not visible: %d, %v", again, err)
					}
					return nil
				}, &client.TxOptions{MaxRetries: 10000})
				if err != nil {
					t.Error(err)
					return
				}
				attempts.Add(int64(tries))
				aborts.Add(int64(tries - 1))
			}
		}()
	}
	wg.Wait()
	got, err := c.Read(ctx, txnKeyspace, "n", 0, 8)
	if err != nil || binary.LittleEndian.Uint64(got) != clients*n {
		t.Fatalf("counter %x (%v), want %d", got, err, clients*n)
	}
	t.Logf("%d transactions, %d attempts, %d aborts", clients*n, attempts.Load(), aborts.Load())
	if aborts.Load() == 0 {
		t.Errorf("no aborts under contention of %d clients", clients)
	}
}

// TestBankTransfers: concurrent transfers between 8 accounts keep the total;
// concurrent read-only transactions that commit always see that total.
func TestBankTransfers(t *testing.T) {
	srv, c := txnSetup(t)
	ctx := context.Background()
	const accounts, initial = 8, 1000
	key := func(i int) string { return fmt.Sprintf("acct/%d", i) }
	for i := range accounts {
		if _, err := c.WriteCreate(ctx, txnKeyspace, key(i), 0, le64(initial)); err != nil {
			t.Fatal(err)
		}
	}
	const movers, transfers, readers = 12, 25, 4
	var wg, rwg sync.WaitGroup
	stop := make(chan struct{})
	var snapshots atomic.Int64
	for range readers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			cl := srv.Client()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var total uint64
				err := cl.RunTx(ctx, txnKeyspace, func(tx *client.Tx) error {
					total = 0
					for i := range accounts {
						v, err := readU64(ctx, tx, key(i))
						if err != nil {
							return err
						}
						total += v
					}
					return nil
				}, &client.TxOptions{MaxRetries: 10000})
				if err != nil {
					t.Error(err)
					return
				}
				if total != accounts*initial {
					t.Errorf("read-only transaction saw a total of %d, want %d", total, accounts*initial)
					return
				}
				snapshots.Add(1)
			}
		}()
	}
	for w := range movers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := srv.Client()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range transfers {
				from, to := rng.IntN(accounts), rng.IntN(accounts-1)
				if to >= from {
					to++
				}
				amount := uint64(rng.IntN(50) + 1)
				err := cl.RunTx(ctx, txnKeyspace, func(tx *client.Tx) error {
					a, err := readU64(ctx, tx, key(from))
					if err != nil {
						return err
					}
					b, err := readU64(ctx, tx, key(to))
					if err != nil {
						return err
					}
					if a < amount {
						return nil // insufficient funds: commit only the reads
					}
					tx.Write(key(from), 0, le64(a-amount))
					tx.Write(key(to), 0, le64(b+amount))
					return nil
				}, &client.TxOptions{MaxRetries: 10000})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	var total uint64
	for i := range accounts {
		b, err := c.Read(ctx, txnKeyspace, key(i), 0, 8)
		if err != nil {
			t.Fatal(err)
		}
		total += binary.LittleEndian.Uint64(b)
	}
	if total != accounts*initial {
		t.Fatalf("final total %d, want %d", total, accounts*initial)
	}
	t.Logf("%d consistent read-only snapshots", snapshots.Load())
}

// TestTxView: a transaction sees its own buffered ops over a repeatable
// read, and a concurrent change makes its commit fail without effect.
func TestTxView(t *testing.T) {
	_, c := txnSetup(t)
	ctx := context.Background()
	if _, err := c.WriteCreate(ctx, txnKeyspace, "v", 0, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	tx := c.Begin(txnKeyspace)
	if got, err := tx.Read(ctx, "v", 0, 100); err != nil || string(got) != "hello" {
		t.Fatalf("first read %q %v", got, err)
	}
	// A concurrent writer changes the blob; the tx still reads its version.
	if _, err := c.Write(ctx, txnKeyspace, "v", 0, []byte("HELLO, world")); err != nil {
		t.Fatal(err)
	}
	tx.Append("v", []byte("!!"))
	tx.Atomic("v", 0, 1, client.FuncAdd, 1) // 'h' + 1 = 'i'
	tx.Truncate("v", 6)
	if got, err := tx.Read(ctx, "v", 0, 100); err != nil || string(got) != "iello!" {
		t.Fatalf("view %q %v", got, err)
	}
	if n, err := tx.Size(ctx, "v"); err != nil || n != 6 {
		t.Fatalf("size %d %v", n, err)
	}
	if _, err := tx.Read(ctx, "missing", 0, 1); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("read of a missing blob: %v", err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("commit after a concurrent write: %v, want ErrConflict", err)
	}
	if got, _ := c.Read(ctx, txnKeyspace, "v", 0, 100); string(got) != "HELLO, world" {
		t.Fatalf("failed commit changed the blob: %q", got)
	}
	// The same transaction without interference commits.
	tx = c.Begin(txnKeyspace)
	if _, err := tx.Read(ctx, "v", 0, 1); err != nil {
		t.Fatal(err)
	}
	tx.Atomic("v", 0, 1, client.FuncAdd, 1)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := tx.Results(); len(r) != 1 || r[0].Value != 'I' {
		t.Fatalf("results %+v", r)
	}
}

// TestAtomicBadInputs: malformed atomics and CAS are refused with a clear
// class and change nothing.
func TestAtomicBadInputs(t *testing.T) {
	_, c := txnSetup(t)
	ctx := context.Background()
	if _, err := c.WriteCreate(ctx, txnKeyspace, "b", 0, []byte("12345678")); err != nil {
		t.Fatal(err)
	}
	before, err := c.Stat(ctx, txnKeyspace, "b")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		op   client.Op
		want error
	}{
		{"width 3", client.AtomicOp("b", 0, 3, client.FuncAdd, 1), client.ErrInvalidArgument},
		{"width 0", client.AtomicOp("b", 0, 0, client.FuncAdd, 1), client.ErrInvalidArgument},
		{"width 9", client.AtomicOp("b", 0, 9, client.FuncAdd, 1), client.ErrInvalidArgument},
		{"unknown func", client.AtomicOp("b", 0, 8, client.AtomicFunc(99), 1), client.ErrInvalidArgument},
		{"no func", client.AtomicOp("b", 0, 8, client.AtomicFunc(0), 1), client.ErrInvalidArgument},
		{"offset past the blob limit", client.AtomicOp("b", client.BlobBytesMax-4, 8, client.FuncAdd, 1), client.ErrOutOfRange},
		{"CAS length mismatch", client.CASOp("b", 0, []byte("12"), []byte("x")), client.ErrInvalidArgument},
		{"CAS empty", client.CASOp("b", 0, nil, nil), client.ErrInvalidArgument},
		{"CAS too long", client.CASOp("b", 0, make([]byte, limits.CASBytesMax+1), make([]byte, limits.CASBytesMax+1)), client.ErrInvalidArgument},
		{"CAS past the blob limit", client.CASOp("b", client.BlobBytesMax-1, []byte("12"), []byte("34")), client.ErrOutOfRange},
	}
	for _, tc := range cases {
		// Each bad op rides with a good one, which must not apply either.
		_, err := c.Commit(ctx, txnKeyspace, client.WriteOp("b", 0, []byte("XX"), false), tc.op)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	after, err := c.Stat(ctx, txnKeyspace, "b")
	if err != nil || after.Version != before.Version || after.Size != before.Size {
		t.Fatalf("stat after bad inputs %+v, before %+v (%v)", after, before, err)
	}
	if got, _ := c.Read(ctx, txnKeyspace, "b", 0, 100); !bytes.Equal(got, []byte("12345678")) {
		t.Fatalf("blob changed: %q", got)
	}
	if _, err := c.Atomic(ctx, txnKeyspace, "nope", 0, 8, client.FuncAdd, 1); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("atomic on a missing blob: %v", err)
	}
}
