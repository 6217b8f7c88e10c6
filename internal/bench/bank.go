package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/limits"
)

// The bank workload moves money between accounts: each operation is one
// serializable transaction that reads the balances of two random accounts
// and writes both back with a random amount moved from one to the other.
// However the transactions interleave, the sum of all balances never
// changes, which is checked on every system after the run.
//
// On tyr the balances are 8-byte little-endian integers, --accounts-per-blob of
// them side by side in one blob, so two transfers conflict when they touch
// the same blob; the peers keep one row, key or lock per account, the
// layout an application would give them.
const (
	// bankInitial is every account's balance at the start.
	bankInitial = 1000
	// bankTransferMax bounds the amount asked for by one transfer. A
	// transfer moves no more than the source account holds, so no balance
	// goes below zero.
	bankTransferMax = 100
	balanceBytes    = 8

	// accountsMax bounds --accounts: every account is created, and each
	// peer's lock or key made, before the measurement.
	accountsMax = 100000
	// accountsPerBlobMax keeps one blob within what one request carries.
	accountsPerBlobMax = limits.PayloadBytesMax / balanceBytes
)

// bankLayout places accounts in blobs on tyr: account a is at offset
// (a mod perBlob)*8 of blob a/perBlob.
type bankLayout struct {
	accounts, perBlob int
}

// blobs is the number of blobs holding the accounts; the last may hold
// fewer than perBlob.
func (l bankLayout) blobs() int { return ceilDiv(l.accounts, l.perBlob) }

// blobAccounts is the number of accounts in blob b.
func (l bankLayout) blobAccounts(b int) int {
	return min(l.perBlob, l.accounts-b*l.perBlob)
}

func bankBlobKey(b int) string { return "bank/" + strconv.Itoa(b) }

// place returns the blob holding account a and the offset of its balance.
func (l bankLayout) place(a int) (string, uint64) {
	return bankBlobKey(a / l.perBlob), uint64(a%l.perBlob) * balanceBytes
}

// initialBlob is blob b as the run starts: every balance bankInitial.
func (l bankLayout) initialBlob(b int) []byte {
	v := make([]byte, 0, l.blobAccounts(b)*balanceBytes)
	for range l.blobAccounts(b) {
		v = binary.LittleEndian.AppendUint64(v, bankInitial)
	}
	return v
}

// decodeBalances returns the balances a blob holds, in account order.
func decodeBalances(v []byte) []uint64 {
	out := make([]uint64, 0, len(v)/balanceBytes)
	for off := 0; off+balanceBytes <= len(v); off += balanceBytes {
		out = append(out, binary.LittleEndian.Uint64(v[off:]))
	}
	return out
}

// total is the sum of the balances, at the start and always.
func (l bankLayout) total() uint64 { return uint64(l.accounts) * bankInitial }

// accountKey names account a on the peers, which keep one per row, key and
// lock: accountPrefix and its number.
func accountKey(a int) string { return accountPrefix + strconv.Itoa(a) }

const accountPrefix = "acct/"

// transfer is one operation of the bank workload: move amount from account
// from to account to, or what from holds if that is less.
type transfer struct {
	from, to int
	amount   uint64
}

// pickTransfer draws a transfer between two distinct accounts of the
// accounts, uniformly, of 1 to bankTransferMax.
func pickTransfer(rng *rand.Rand, accounts int) transfer {
	from := rng.IntN(accounts)
	to := rng.IntN(accounts - 1)
	if to >= from {
		to++
	}
	return transfer{from: from, to: to, amount: 1 + rng.Uint64N(bankTransferMax)}
}

// apply returns the balances of the two accounts after t, given them
// before it.
func (t *transfer) apply(from, to uint64) (uint64, uint64) {
	moved := min(t.amount, from)
	return from - moved, to + moved
}

// ordered returns t's two accounts in ascending order: the order lock-based
// and row-locking peers take them in, so that no two transfers deadlock.
func (t *transfer) ordered() (int, int) {
	return min(t.from, t.to), max(t.from, t.to)
}

// checkBalances checks that balances, read from a system after the run,
// are all there and add up to what the accounts started with.
func checkBalances(l bankLayout, balances []uint64) error {
	if len(balances) != l.accounts {
		return fmt.Errorf("%d balances, want %d", len(balances), l.accounts)
	}
	var sum uint64
	for a, b := range balances {
		// Each balance is at most the total, so the sum of a correct bank
		// cannot wrap; one that is larger means money was made.
		if b > l.total() {
			return fmt.Errorf("account %d holds %d, more than the %d all accounts hold together", a, b, l.total())
		}
		sum += b
	}
	if sum != l.total() {
		return fmt.Errorf("balances sum to %d, want %d: money was made or lost", sum, l.total())
	}
	return nil
}

// bankSystem runs the bank workload: CreateBank gives every account its
// initial balance, Balances reads them all back after the run, and its
// conns are bankConns.
type bankSystem interface {
	system
	CreateBank(ctx context.Context, l bankLayout) error
	Balances(ctx context.Context, l bankLayout) ([]uint64, error)
}

type bankConn interface {
	// Transfer applies t as one serializable transaction, run again until
	// it commits if the system aborts it.
	Transfer(ctx context.Context, l bankLayout, t *transfer) error
}

// runBank measures transfers, then checks on every system that the
// balances still add up.
func runBank(ctx context.Context, cfg *Config, systems []system, emit func(Result) error) error {
	l := bankLayout{accounts: cfg.Accounts, perBlob: cfg.AccountsPerBlob}
	cfg.ValueSize = 2 * balanceBytes
	cfg.progress("bank: %d accounts of %d, %d per blob on tyr (%d blobs); transfers of 1 to %d",
		l.accounts, bankInitial, l.perBlob, l.blobs(), bankTransferMax)
	for _, s := range systems {
		cfg.progress("%s: creating %d accounts", s.Name(), l.accounts)
		if err := s.(bankSystem).CreateBank(ctx, l); err != nil {
			return fmt.Errorf("%s: creating the accounts: %w", s.Name(), err)
		}
	}
	op := func(ctx context.Context, c conn, _ int, rng *rand.Rand, _ []byte) (int, error) {
		t := pickTransfer(rng, l.accounts)
		return 2 * balanceBytes, c.(bankConn).Transfer(ctx, l, &t)
	}
	if err := forEachPhase(ctx, cfg, systems, emit, op); err != nil {
		return err
	}
	var errs []error
	for _, s := range systems {
		b, err := s.(bankSystem).Balances(ctx, l)
		if err == nil {
			err = checkBalances(l, b)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: bank check: %w", s.Name(), err))
			continue
		}
		cfg.progress("%s: %d balances sum to %d, as they started", s.Name(), l.accounts, l.total())
	}
	return errors.Join(errs...)
}

// CreateBank writes every blob of balances, batched as Preload is.
func (s *tyrSystem) CreateBank(ctx context.Context, l bankLayout) error {
	per := max(1, min(limits.OpsPerCommitMax, limits.CommitBytesMax/(l.perBlob*balanceBytes)))
	return batches(l.blobs(), per, func(lo, hi int) error {
		ops := make([]client.Op, 0, hi-lo)
		for b := lo; b < hi; b++ {
			ops = append(ops, client.WriteOp(bankBlobKey(b), 0, l.initialBlob(b), true))
		}
		_, err := s.admin.Commit(ctx, s.keyspace, ops...)
		return err
	})
}

func (s *tyrSystem) Balances(ctx context.Context, l bankLayout) ([]uint64, error) {
	out := make([]uint64, 0, l.accounts)
	for b := range l.blobs() {
		n := l.blobAccounts(b) * balanceBytes
		v, err := s.admin.Read(ctx, s.keyspace, bankBlobKey(b), 0, uint64(n))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", bankBlobKey(b), err)
		}
		if len(v) != n {
			return nil, fmt.Errorf("%s holds %d bytes, want %d", bankBlobKey(b), len(v), n)
		}
		out = append(out, decodeBalances(v)...)
	}
	return out, nil
}

// Transfer reads both balances in a transaction, writes both back and
// commits; the commit fails if either blob changed since it was read, and
// the transfer runs again with RunTx's backoff.
func (c *tyrConn) Transfer(ctx context.Context, l bankLayout, t *transfer) error {
	fromKey, fromOff := l.place(t.from)
	toKey, toOff := l.place(t.to)
	return runTx(ctx, c.c, c.ks, c.aborts, func(tx *client.Tx) error {
		from, err := readBalance(ctx, tx, fromKey, fromOff)
		if err != nil {
			return err
		}
		to, err := readBalance(ctx, tx, toKey, toOff)
		if err != nil {
			return err
		}
		from, to = t.apply(from, to)
		tx.Write(fromKey, fromOff, binary.LittleEndian.AppendUint64(nil, from))
		tx.Write(toKey, toOff, binary.LittleEndian.AppendUint64(nil, to))
		return nil
	})
}

func readBalance(ctx context.Context, tx *client.Tx, key string, off uint64) (uint64, error) {
	b, err := tx.Read(ctx, key, off, balanceBytes)
	if err != nil {
		return 0, err
	}
	if len(b) != balanceBytes {
		return 0, fmt.Errorf("balance at %s+%d of %d bytes", key, off, len(b))
	}
	return binary.LittleEndian.Uint64(b), nil
}

// rmwOptions let a hot transaction retry long enough to commit under any
// client count of the run, rather than fail as an error.
var rmwOptions = &client.TxOptions{MaxRetries: retriesMax}

// retriesMax bounds the attempts of one operation on every system that
// retries, so a system that never commits ends the run with errors.
const retriesMax = 1000

// runTx runs fn in a transaction with RunTx and adds its aborted attempts
// to aborts: every run of fn but the last, and the last too when the
// transaction gave up on a conflict. (One whose deadline passes in the
// backoff after a conflict is counted one short.)
func runTx(ctx context.Context, c *client.Client, ks string, aborts *atomic.Uint64, fn func(tx *client.Tx) error) error {
	runs := 0
	err := c.RunTx(ctx, ks, func(tx *client.Tx) error {
		runs++
		return fn(tx)
	}, rmwOptions)
	n := runs - 1
	if errors.Is(err, client.ErrConflict) {
		n = runs
	}
	if n > 0 {
		aborts.Add(uint64(n))
	}
	return err
}

// retry runs attempt until it commits, counting each attempt that did not
// in aborts and backing off between attempts as tyr's RunTx does: jittered,
// from 1 ms doubling to 200 ms. An error of attempt ends it.
func retry(ctx context.Context, aborts *atomic.Uint64, attempt func() (bool, error)) error {
	backoff := time.Millisecond
	for n := 1; ; n++ {
		committed, err := attempt()
		if err != nil {
			return err
		}
		if committed {
			return nil
		}
		aborts.Add(1)
		if n >= retriesMax {
			return fmt.Errorf("gave up after %d aborted attempts", n)
		}
		if err := sleepCtx(ctx, backoff/2+rand.N(backoff/2+1)); err != nil {
			return err
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
