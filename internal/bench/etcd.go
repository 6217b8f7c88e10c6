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
//
// etcd runs with its defaults: every raft entry is fsynced to its WAL before
// a write is acknowledged.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
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

	attempts, commits atomic.Uint64
	clients           int // of the phase being measured
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
	if workload == "counter" {
		return abortNote("etcd counter: Get, then Txn If ModRevision == read revision Then Put, retried",
			s.clients, &s.attempts, &s.commits)
	}
	return ""
}

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
	s.clients = n
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

// etcdRetriesMax bounds the attempts of one increment, as rmwOptions
// bounds tyr's.
const etcdRetriesMax = 1000

func (c *etcdConn) Add(ctx context.Context, delta uint64) error {
	key := c.s.key(counterKey)
	backoff := time.Millisecond
	for attempt := 0; ; attempt++ {
		c.s.attempts.Add(1)
		resp, err := c.c.Get(ctx, key)
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 {
			return fmt.Errorf("counter: %d values", len(resp.Kvs))
		}
		kv := resp.Kvs[0]
		v, err := strconv.ParseUint(string(kv.Value), 10, 64)
		if err != nil {
			return fmt.Errorf("counter %q: %w", kv.Value, err)
		}
		tr, err := c.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(key, strconv.FormatUint(v+delta, 10))).Commit()
		if err != nil {
			return err
		}
		if tr.Succeeded {
			c.s.commits.Add(1)
			return nil
		}
		if attempt+1 >= etcdRetriesMax {
			return fmt.Errorf("counter increment gave up after %d attempts", attempt+1)
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
