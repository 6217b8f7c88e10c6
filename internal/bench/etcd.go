package bench

// etcd as a peer, under a key prefix of its own (bench-<random>/) that is
// deleted at the end. The workloads map onto it as:
//
//   counter  a transactional read-modify-write, as etcd has no increment:
//            Get the counter, then Txn If ModRevision(counter) == the
//            revision read Then Put the counter plus one; a Txn whose
//            condition failed is retried with the jittered exponential
//            backoff of tyr's RunTx (1 ms doubling to 200 ms).
//   read     Get of one key of --value-size bytes, linearizable (etcd's
//            default, as tyr's reads are).
//   bank     a key per account holding its balance in decimal: one Txn
//            getting both accounts (linearizable), then Txn If
//            ModRevision(from) and ModRevision(to) == the revisions read
//            Then Put both; retried as the counter is.
//
// etcd runs with its defaults: every raft entry is fsynced to its WAL before
// a write is acknowledged.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type etcdSystem struct {
	addr   string
	prefix string
	admin  *clientv3.Client
	info   SystemInfo

	// aborts counts the Txns whose condition failed.
	aborts atomic.Uint64
}

// etcdTxnOpsMax and etcdRequestBytesMax stay within etcd's default limits
// of operations in one Txn (--max-txn-ops, 128) and of a request's size
// (--max-request-bytes, 1.5 MiB), which bound one preload batch.
const (
	etcdTxnOpsMax       = 128
	etcdRequestBytesMax = 1 << 20
)

func etcdClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 10 * time.Second,
		Logger: zap.NewNop()})
}

func newEtcdSystem(ctx context.Context, addr string) (*etcdSystem, error) {
	admin, err := etcdClient(addr)
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", addr, err)
	}
	st, err := admin.Status(ctx, addr)
	if err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("etcd at %s: %w", addr, err)
	}
	return &etcdSystem{addr: addr, admin: admin, prefix: fmt.Sprintf("bench-%08x/", rand.Uint32()),
		info: SystemInfo{Version: "etcd " + st.Version,
			Settings: "defaults: WAL fsynced per raft entry; single member; linearizable Get"}}, nil
}

func (s *etcdSystem) Name() string     { return "etcd" }
func (s *etcdSystem) Info() SystemInfo { return s.info }

func (s *etcdSystem) Note(workload string) string {
	switch workload {
	case "counter":
		return "etcd counter: Get, then Txn If ModRevision == read revision Then Put, retried"
	case "bank":
		return "etcd bank: a key per account; Txn of 2 Gets, then Txn If both ModRevisions == those read " +
			"Then 2 Puts, retried"
	}
	return ""
}

func (s *etcdSystem) retries(workload string) bool {
	return workload == "counter" || workload == "bank"
}

func (s *etcdSystem) takeAborts() uint64 { return s.aborts.Swap(0) }

func (s *etcdSystem) Open(context.Context) error { return nil }

func (s *etcdSystem) Close(ctx context.Context) error {
	_, err := s.admin.Delete(ctx, s.prefix, clientv3.WithPrefix())
	if err != nil {
		err = fmt.Errorf("deleting %s* from %s: %w", s.prefix, s.addr, err)
	}
	return errors.Join(err, s.admin.Close())
}

func (s *etcdSystem) key(k string) string { return s.prefix + k }

func (s *etcdSystem) CreateCounter(ctx context.Context) error {
	_, err := s.admin.Put(ctx, s.key(counterKey), "0")
	return err
}

// Preload puts every key, as many in one Txn as etcd allows.
func (s *etcdSystem) Preload(ctx context.Context, keys []string, value []byte) error {
	per := max(1, min(etcdTxnOpsMax, etcdRequestBytesMax/max(len(value), 1)))
	return batches(len(keys), per, func(lo, hi int) error {
		ops := make([]clientv3.Op, 0, hi-lo)
		for _, k := range keys[lo:hi] {
			ops = append(ops, clientv3.OpPut(s.key(k), string(value)))
		}
		_, err := s.admin.Txn(ctx).Then(ops...).Commit()
		return err
	})
}

// Conns opens one client, with its own connection, per bench client.
func (s *etcdSystem) Conns(_ context.Context, n int) ([]conn, func() error, error) {
	var conns []conn
	closeAll := func() error {
		var err error
		for _, c := range conns {
			err = errors.Join(err, c.(*etcdConn).c.Close())
		}
		return err
	}
	for range n {
		c, err := etcdClient(s.addr)
		if err != nil {
			return nil, nil, errors.Join(err, closeAll())
		}
		conns = append(conns, &etcdConn{c: c, s: s})
	}
	return conns, closeAll, nil
}

type etcdConn struct {
	c *clientv3.Client
	s *etcdSystem
}

// Ping reads the server's status, which opens the connection without
// touching any key.
func (c *etcdConn) Ping(ctx context.Context) error {
	_, err := c.c.Status(ctx, c.s.addr)
	return err
}

func (c *etcdConn) Get(ctx context.Context, key string, _ int) ([]byte, error) {
	resp, err := c.c.Get(ctx, c.s.key(key))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) != 1 {
		return nil, fmt.Errorf("get %s: %d values", key, len(resp.Kvs))
	}
	return resp.Kvs[0].Value, nil
}

func (c *etcdConn) Add(ctx context.Context, delta uint64) error {
	key := c.s.key(counterKey)
	return retry(ctx, &c.s.aborts, func() (bool, error) {
		resp, err := c.c.Get(ctx, key)
		if err != nil {
			return false, err
		}
		if len(resp.Kvs) != 1 {
			return false, fmt.Errorf("counter: %d values", len(resp.Kvs))
		}
		kv := resp.Kvs[0]
		v, err := strconv.ParseUint(string(kv.Value), 10, 64)
		if err != nil {
			return false, fmt.Errorf("counter %q: %w", kv.Value, err)
		}
		tr, err := c.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(key, strconv.FormatUint(v+delta, 10))).Commit()
		if err != nil {
			return false, err
		}
		return tr.Succeeded, nil
	})
}

// CreateBank puts every account's initial balance.
func (s *etcdSystem) CreateBank(ctx context.Context, l bankLayout) error {
	keys := make([]string, l.accounts)
	for a := range keys {
		keys[a] = accountKey(a)
	}
	return s.Preload(ctx, keys, []byte(strconv.Itoa(bankInitial)))
}

// Balances gets every account in one Get of their prefix.
func (s *etcdSystem) Balances(ctx context.Context, l bankLayout) ([]uint64, error) {
	prefix := s.key(accountPrefix)
	resp, err := s.admin.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make([]uint64, l.accounts)
	seen := make([]bool, l.accounts)
	for _, kv := range resp.Kvs {
		a, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), prefix))
		if err != nil || a < 0 || a >= l.accounts || seen[a] {
			return nil, fmt.Errorf("unexpected key %q", kv.Key)
		}
		if out[a], err = strconv.ParseUint(string(kv.Value), 10, 64); err != nil {
			return nil, fmt.Errorf("account %d: %w", a, err)
		}
		seen[a] = true
	}
	if len(resp.Kvs) != l.accounts {
		return nil, fmt.Errorf("%d accounts, want %d", len(resp.Kvs), l.accounts)
	}
	return out, nil
}

// Transfer gets both balances with their revisions in one Txn, then puts
// both if neither changed since.
func (c *etcdConn) Transfer(ctx context.Context, _ bankLayout, t *transfer) error {
	keys := [2]string{c.s.key(accountKey(t.from)), c.s.key(accountKey(t.to))}
	return retry(ctx, &c.s.aborts, func() (bool, error) {
		resp, err := c.c.Txn(ctx).Then(clientv3.OpGet(keys[0]), clientv3.OpGet(keys[1])).Commit()
		if err != nil {
			return false, err
		}
		if len(resp.Responses) != 2 {
			return false, fmt.Errorf("a Txn of 2 Gets answered %d responses", len(resp.Responses))
		}
		var bal [2]uint64
		var rev [2]int64
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().GetKvs()
			if len(kvs) != 1 {
				return false, fmt.Errorf("%s: %d values", keys[i], len(kvs))
			}
			if bal[i], err = strconv.ParseUint(string(kvs[0].Value), 10, 64); err != nil {
				return false, fmt.Errorf("%s: %w", keys[i], err)
			}
			rev[i] = kvs[0].ModRevision
		}
		from, to := t.apply(bal[0], bal[1])
		tr, err := c.c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(keys[0]), "=", rev[0]),
				clientv3.Compare(clientv3.ModRevision(keys[1]), "=", rev[1])).
			Then(clientv3.OpPut(keys[0], strconv.FormatUint(from, 10)),
				clientv3.OpPut(keys[1], strconv.FormatUint(to, 10))).Commit()
		if err != nil {
			return false, err
		}
		return tr.Succeeded, nil
	})
}
