package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBankLayout(t *testing.T) {
	l := bankLayout{accounts: 25, perBlob: 10}
	if l.blobs() != 3 || l.blobAccounts(0) != 10 || l.blobAccounts(2) != 5 || l.total() != 25*bankInitial {
		t.Fatalf("25 accounts, 10 per blob: %d blobs, %d and %d accounts in the first and last, total %d; "+
			"want 3, 10, 5, %d", l.blobs(), l.blobAccounts(0), l.blobAccounts(2), l.total(), 25*bankInitial)
	}
	for a, want := range map[int]struct {
		key string
		off uint64
	}{0: {"bank/0", 0}, 9: {"bank/0", 72}, 10: {"bank/1", 0}, 24: {"bank/2", 32}} {
		if key, off := l.place(a); key != want.key || off != want.off {
			t.Errorf("account %d at %s+%d, want %s+%d", a, key, off, want.key, want.off)
		}
	}
	// Every account has a place of its own, inside its blob.
	seen := map[string]int{}
	for a := range l.accounts {
		key, off := l.place(a)
		num, _ := strings.CutPrefix(key, "bank/")
		b, err := strconv.Atoi(num)
		if err != nil || b < 0 || b >= l.blobs() {
			t.Fatalf("account %d in blob %q, not one of the %d", a, key, l.blobs())
		}
		if off%balanceBytes != 0 || int(off)+balanceBytes > l.blobAccounts(b)*balanceBytes {
			t.Errorf("account %d at %s+%d, not a balance of its blob of %d accounts", a, key, off, l.blobAccounts(b))
		}
		at := fmt.Sprintf("%s+%d", key, off)
		if other, dup := seen[at]; dup {
			t.Errorf("accounts %d and %d share %s+%d", other, a, key, off)
		}
		seen[at] = a
	}
	var all []uint64
	for b := range l.blobs() {
		v := l.initialBlob(b)
		if len(v) != l.blobAccounts(b)*balanceBytes {
			t.Fatalf("blob %d of %d bytes, want %d", b, len(v), l.blobAccounts(b)*balanceBytes)
		}
		all = append(all, decodeBalances(v)...)
	}
	if err := checkBalances(l, all); err != nil {
		t.Fatalf("the initial blobs: %v", err)
	}
}

func TestPickTransfer(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	pairs := map[[2]int]int{}
	var amounts [bankTransferMax + 2]int
	for range 30000 {
		tr := pickTransfer(rng, 3)
		if tr.from == tr.to || tr.from < 0 || tr.from > 2 || tr.to < 0 || tr.to > 2 {
			t.Fatalf("transfer %+v among 3 accounts", tr)
		}
		if tr.amount < 1 || tr.amount > bankTransferMax {
			t.Fatalf("transfer of %d, want 1 to %d", tr.amount, bankTransferMax)
		}
		pairs[[2]int{tr.from, tr.to}]++
		amounts[tr.amount]++
	}
	// 6 ordered pairs, 5000 draws each expected: far from 4000 only if
	// the pick is biased.
	if len(pairs) != 6 {
		t.Errorf("pairs drawn: %v, want all 6", pairs)
	}
	for p, n := range pairs {
		if n < 4500 || n > 5500 {
			t.Errorf("pair %v drawn %d times of 30000, want about 5000", p, n)
		}
	}
	if amounts[1] == 0 || amounts[bankTransferMax] == 0 {
		t.Errorf("amounts 1 and %d never drawn", bankTransferMax)
	}
	if tr := pickTransfer(rng, 2); tr.from+tr.to != 1 {
		t.Errorf("two accounts: transfer %+v", tr)
	}

	for _, c := range []struct{ amount, from, to, wantFrom, wantTo uint64 }{
		{30, 1000, 5, 970, 35},
		{100, 50, 0, 0, 50}, // no more than the source holds
		{1, 0, 7, 0, 7},
	} {
		tr := transfer{from: 3, to: 1, amount: c.amount}
		if f, to := tr.apply(c.from, c.to); f != c.wantFrom || to != c.wantTo {
			t.Errorf("%d from %d to %d: %d and %d, want %d and %d", c.amount, c.from, c.to, f, to, c.wantFrom, c.wantTo)
		}
	}
	if lo, hi := (&transfer{from: 9, to: 2}).ordered(); lo != 2 || hi != 9 {
		t.Errorf("ordered 9, 2: %d, %d", lo, hi)
	}
}

func TestCheckBalances(t *testing.T) {
	l := bankLayout{accounts: 4, perBlob: 2}
	// Serial transfers keep the sum, whatever they move.
	bal := []uint64{bankInitial, bankInitial, bankInitial, bankInitial}
	rng := rand.New(rand.NewPCG(9, 10))
	for range 10000 {
		tr := pickTransfer(rng, l.accounts)
		bal[tr.from], bal[tr.to] = tr.apply(bal[tr.from], bal[tr.to])
	}
	if err := checkBalances(l, bal); err != nil {
		t.Fatalf("after serial transfers: %v", err)
	}
	for name, c := range map[string][]uint64{
		"money lost":     {1000, 1000, 1000, 999},
		"money made":     {1000, 1000, 1000, 1001},
		"account gone":   {2000, 1000, 1000},
		"wrapped around": {1 << 63, 1 << 63, 2000, 2000}, // sums to 4000 modulo 2^64
	} {
		if err := checkBalances(l, c); err == nil {
			t.Errorf("%s: %v passed the check", name, c)
		}
	}
	blob := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 5), 1<<40)
	if got := decodeBalances(blob); len(got) != 2 || got[0] != 5 || got[1] != 1<<40 {
		t.Errorf("decodeBalances = %v, want [5 %d]", got, uint64(1)<<40)
	}
}

func TestAbortRate(t *testing.T) {
	for _, c := range []struct {
		aborts, ops uint64
		want        float64
	}{{0, 0, 0}, {5, 0, 0}, {0, 10, 0}, {1, 3, 0.3333}, {250, 100, 2.5}} {
		if got := abortRate(c.aborts, c.ops); got != c.want {
			t.Errorf("abortRate(%d, %d) = %v, want %v", c.aborts, c.ops, got, c.want)
		}
	}
	r := Result{Ops: 3}
	if abortCell(r) != "–" || abortsCell(r) != "–" {
		t.Errorf("a system that does not retry shows aborts %q, %q", abortsCell(r), abortCell(r))
	}
	r.setAborts(1)
	if !r.RetriesOnConflict || r.Aborts != 1 || abortCell(r) != "0.333" || abortsCell(r) != "1" {
		t.Errorf("after setAborts(1) of 3 ops: %+v, cells %q %q", r, abortsCell(r), abortCell(r))
	}
	r = Result{}
	r.setAborts(0)
	if abortsCell(r) != "0" || abortCell(r) != "–" {
		t.Errorf("nothing committed, nothing aborted: cells %q %q, want \"0\" and \"–\"", abortsCell(r), abortCell(r))
	}
}

func TestRetryCountsAborts(t *testing.T) {
	var aborts atomic.Uint64
	calls := 0
	err := retry(context.Background(), &aborts, func() (bool, error) {
		calls++
		return calls == 4, nil
	})
	if err != nil || calls != 4 || aborts.Load() != 3 {
		t.Errorf("committed on the 4th attempt: err %v, %d attempts, %d aborts; want nil, 4, 3", err, calls, aborts.Load())
	}
	boom := errors.New("boom")
	aborts.Store(0)
	if err := retry(context.Background(), &aborts, func() (bool, error) { return false, boom }); err != boom ||
		aborts.Load() != 0 {
		t.Errorf("an error is not an abort: err %v, %d aborts", err, aborts.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	if err := retry(ctx, &aborts, func() (bool, error) { calls++; return false, nil }); !errors.Is(err, context.Canceled) ||
		calls != 1 || aborts.Load() != 1 {
		t.Errorf("cancelled during the backoff: err %v after %d attempts and %d aborts", err, calls, aborts.Load())
	}
}

// memBank is a bank in memory, serialized by a mutex, that counts one
// abort per transfer. A leaky one loses a unit of every transfer that
// moves money, which the check after the run must catch.
type memBank struct {
	name   string
	leak   bool
	mu     sync.Mutex
	bal    []uint64
	aborts atomic.Uint64
}

func (m *memBank) Name() string                 { return m.name }
func (m *memBank) Note(string) string           { return m.name + " in memory" }
func (m *memBank) Info() SystemInfo             { return SystemInfo{} }
func (m *memBank) Open(context.Context) error   { return nil }
func (m *memBank) Close(context.Context) error  { return nil }
func (m *memBank) retries(workload string) bool { return workload == "bank" }
func (m *memBank) takeAborts() uint64           { return m.aborts.Swap(0) }

func (m *memBank) Conns(_ context.Context, n int) ([]conn, func() error, error) {
	conns := make([]conn, n)
	for i := range conns {
		conns[i] = memBankConn{m}
	}
	return conns, func() error { return nil }, nil
}

func (m *memBank) CreateBank(_ context.Context, l bankLayout) error {
	m.bal = make([]uint64, l.accounts)
	for a := range m.bal {
		m.bal[a] = bankInitial
	}
	m.aborts.Add(1000) // setup aborts nothing a measurement should count
	return nil
}

func (m *memBank) Balances(context.Context, bankLayout) ([]uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]uint64(nil), m.bal...), nil
}

type memBankConn struct{ m *memBank }

func (c memBankConn) Ping(context.Context) error { return nil }

func (c memBankConn) Transfer(_ context.Context, _ bankLayout, t *transfer) error {
	m := c.m
	m.mu.Lock()
	from, to := t.apply(m.bal[t.from], m.bal[t.to])
	if m.leak && from != m.bal[t.from] {
		to--
	}
	m.bal[t.from], m.bal[t.to] = from, to
	m.mu.Unlock()
	m.aborts.Add(1)
	return nil
}

func bankConfig() Config {
	cfg := DefaultConfig()
	cfg.Workload, cfg.Clients, cfg.Duration, cfg.Seed = "bank", []int{1, 4}, 30*time.Millisecond, 1
	cfg.Accounts, cfg.AccountsPerBlob = 20, 10
	return cfg
}

func TestRunBankCountsAbortsPerPhase(t *testing.T) {
	cfg := bankConfig()
	var results []Result
	err := runBank(context.Background(), &cfg, []system{&memBank{name: "mem"}},
		func(r Result) error { results = append(results, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d results, want 2", len(results))
	}
	for _, r := range results {
		// One abort per transfer, counted in the phase that made it: none
		// of the setup's and none of the other phase's.
		if r.Ops == 0 || !r.RetriesOnConflict || r.Aborts != r.Ops || r.AbortsPerOp != 1 || r.Note != "mem in memory" {
			t.Errorf("result %+v: want transfers, as many aborts and 1 abort per op", r)
		}
	}
}

func TestRunBankChecksEverySystem(t *testing.T) {
	cfg := bankConfig()
	cfg.Clients = []int{2}
	err := runBank(context.Background(), &cfg, []system{&memBank{name: "sound"}, &memBank{name: "leaky", leak: true}},
		func(Result) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "leaky: bank check") || strings.Contains(err.Error(), "sound") {
		t.Fatalf("a bank that loses money: %v; want its check, and only its, to fail", err)
	}
}

func TestValidateBank(t *testing.T) {
	for _, c := range []struct{ accounts, perBlob int }{{1, 10}, {accountsMax + 1, 10}, {100, 0},
		{100, accountsPerBlobMax + 1}} {
		cfg := bankConfig()
		cfg.Accounts, cfg.AccountsPerBlob = c.accounts, c.perBlob
		if err := cfg.validate(); err == nil {
			t.Errorf("%d accounts, %d per blob: accepted", c.accounts, c.perBlob)
		}
	}
	cfg := bankConfig()
	if err := cfg.validate(); err != nil {
		t.Errorf("the test's configuration: %v", err)
	}
}

func bankResults() []Result {
	retried := func(r Result, aborts uint64) Result { r.setAborts(aborts); return r }
	return []Result{
		retried(Result{Workload: "bank", System: "tyr", Clients: 1, OpsPerS: 400, Ops: 800}, 0),
		retried(Result{Workload: "bank", System: "postgres", Clients: 1, OpsPerS: 800, Ops: 1600}, 0),
		{Workload: "bank", System: "zk-redis-durable", Clients: 1, OpsPerS: 100, Ops: 200},
		retried(Result{Workload: "bank", System: "tyr", Clients: 8, OpsPerS: 600, Ops: 1200}, 600),
		retried(Result{Workload: "bank", System: "postgres", Clients: 8, OpsPerS: 300, Ops: 600}, 750),
		{Workload: "bank", System: "zk-redis-durable", Clients: 8, OpsPerS: 150, Ops: 300},
		{Workload: "counter", System: "tyr", Clients: 8, OpsPerS: 2000, Ops: 4000},
		retried(Result{Workload: "counter", System: "tyr-rmw", Clients: 8, OpsPerS: 0}, 37),
	}
}

func TestReportAborts(t *testing.T) {
	var md strings.Builder
	if err := WriteReport(&md, bankResults(), BaseSystem, nil); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{
		"| bank | 8 | 600 | 300 | 2.00 | 150 | 4.00 |",
		// Only the systems that retry have abort columns.
		"| workload | clients | tyr aborts/op | postgres aborts/op |\n|---|---:|---:|---:|\n" +
			"| bank | 1 | 0.000 | 0.000 |\n| bank | 8 | 0.500 | 1.250 |\n",
		// The atomic counter does not retry; the RMW one aborted without
		// committing, which has no rate.
		"| workload | clients | tyr-rmw aborts/op |\n|---|---:|---:|\n| counter | 8 | – |\n",
		"| workload | system | clients | ops/s | MB/s | p50 µs | p99 µs | errors | aborts | aborts/op |",
		"| bank | postgres | 8 | 300.0 | 0.00 | 0.0 | 0.0 | 0 | 750 | 1.250 |",
		"| bank | zk-redis-durable | 8 | 150.0 | 0.00 | 0.0 | 0.0 | 0 | – | – |",
		"| bank | tyr | 1 | 400.0 | 0.00 | 0.0 | 0.0 | 0 | 0 | 0.000 |",
		"| counter | tyr-rmw | 8 | 0.0 | 0.00 | 0.0 | 0.0 | 0 | 37 | – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "zk-redis-durable aborts/op") {
		t.Errorf("the lock-based peer has an abort column:\n%s", out)
	}

	// Results of systems that never retry, as older files hold, keep
	// their report without abort columns.
	md.Reset()
	if err := WriteReport(&md, peerResults(), BaseSystem, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(md.String(), "abort") {
		t.Errorf("a report without retrying systems mentions aborts:\n%s", md.String())
	}
}

func TestAbortsInJSONAndTable(t *testing.T) {
	var buf bytes.Buffer
	for _, r := range bankResults() {
		if err := WriteJSON(&buf, r); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if !strings.Contains(lines[0], `"retries_on_conflict":true`) || strings.Contains(lines[2], "retries_on_conflict") ||
		!strings.Contains(lines[4], `"aborts":750,"aborts_per_op":1.25`) {
		t.Errorf("JSON lines:\n%s", buf.String())
	}
	back, err := ReadJSONL(&buf)
	if err != nil || len(back) != len(bankResults()) {
		t.Fatalf("read back %d results: %v", len(back), err)
	}
	for i, r := range bankResults() {
		if back[i] != r {
			t.Errorf("result %d does not round-trip:\n got %+v\nwant %+v", i, back[i], r)
		}
	}
	// A line written before aborts were recorded still reads.
	old, err := ReadJSONL(strings.NewReader(`{"workload":"counter","system":"etcd","clients":8,"ops_per_s":90,"ops":900}`))
	if err != nil || len(old) != 1 || old[0].RetriesOnConflict || old[0].Ops != 900 {
		t.Errorf("an older line: %+v, %v", old, err)
	}

	var table strings.Builder
	if err := WriteTable(&table, bankResults()); err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(table.String(), "\n")
	if !strings.HasSuffix(strings.TrimRight(rows[0], " "), "aborts  aborts/op") ||
		!strings.HasSuffix(strings.TrimRight(rows[5], " "), "750      1.250") ||
		!strings.HasSuffix(strings.TrimRight(rows[3], " "), "–          –") {
		t.Errorf("table:\n%s", table.String())
	}
	table.Reset()
	_ = WriteTable(&table, peerResults())
	if strings.Contains(table.String(), "abort") {
		t.Errorf("a table without retrying systems has abort columns:\n%s", table.String())
	}
}
