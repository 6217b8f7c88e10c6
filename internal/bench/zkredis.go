package bench

// Redis locked by ZooKeeper as a peer: the seeds' lock-based baseline
// (§9.2), where a store without transactions is made consistent with
// ZooKeeper locks at the finest granularity, one per aggregate slot. Data
// lives in Redis under a random key prefix, locks under a random ZooKeeper
// path; both are deleted at the end. The workloads map onto it as:
//
//   counter   take the counter's lock (ZooKeeper's lock recipe: create an
//             ephemeral sequential node, wait until it is the lowest),
//             GET and SET the counter in Redis, release the lock (delete
//             the node).
//   monalisa  an event takes the lock of its slot in each of its 4
//             aggregates, always global, site, cluster, machine in that
//             order so that clients never deadlock; reads the 4 slots with
//             GETRANGE in one pipeline; writes them back with SETRANGE and
//             APPENDs the event to its generator's log in one MULTI/EXEC;
//             then releases the locks. A read is one GETRANGE of 800 bytes,
//             without a lock: each slot changes in one MULTI/EXEC.
//   bank      a lock and a Redis key per account; a transfer takes the
//             locks of both accounts (in account order, so that clients
//             never deadlock), MGETs both balances, MSETs both (one
//             command, so both change or neither), and releases the locks.
//
// ZooKeeper runs with its defaults (its transaction log fsynced before a
// lock node is acknowledged) and Redis with an fsync per write (appendonly
// yes, appendfsync always), as read from the server.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
)

type zkRedisSystem struct {
	zkAddr string
	root   string // the run's ZooKeeper path
	zk     *zk.Conn
	redis  *redisSystem // the Redis half, whose keys it deletes at the end
	name   string
	info   SystemInfo
}

// zkSessionTimeout is long enough that a slow fsync under load does not
// expire a session holding locks.
const zkSessionTimeout = 30 * time.Second

// quietZK keeps the ZooKeeper client's connection chatter out of the
// output.
type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

func zkConnect(addr string) (*zk.Conn, error) {
	c, _, err := zk.Connect([]string{addr}, zkSessionTimeout, zk.WithLogger(quietZK{}))
	return c, err
}

func newZKRedisSystem(ctx context.Context, zkAddr, redisAddr string) (*zkRedisSystem, error) {
	r, err := newRedisSystem(ctx, redisAddr)
	if err != nil {
		return nil, err
	}
	version, err := zkVersion(ctx, zkAddr)
	if err != nil {
		return nil, errors.Join(err, r.admin.Close())
	}
	c, err := zkConnect(zkAddr)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("zookeeper at %s: %w", zkAddr, err), r.admin.Close())
	}
	return &zkRedisSystem{zkAddr: zkAddr, zk: c, redis: r, name: "zk-" + r.name,
		root: fmt.Sprintf("/bench-%08x", rand.Uint32()),
		info: SystemInfo{Version: version + "; " + r.info.Version,
			Settings: "zookeeper defaults (transaction log fsynced); redis " + r.info.Settings}}, nil
}

// zkVersion asks the server with the srvr command, which ZooKeeper allows
// unless told otherwise.
func zkVersion(ctx context.Context, addr string) (string, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("zookeeper at %s: %w", addr, err)
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	if _, err := io.WriteString(nc, "srvr"); err != nil {
		return "", fmt.Errorf("zookeeper at %s: %w", addr, err)
	}
	out, err := io.ReadAll(io.LimitReader(nc, 4096))
	if err != nil {
		return "", fmt.Errorf("zookeeper at %s: srvr: %w", addr, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	v, ok := strings.CutPrefix(first, "Zookeeper version: ")
	if !ok {
		return "", fmt.Errorf("zookeeper at %s: srvr answered %q; is srvr in 4lw.commands.whitelist?", addr, first)
	}
	v, _, _ = strings.Cut(v, ",")
	return "zookeeper " + v, nil
}

func (s *zkRedisSystem) Name() string     { return s.name }
func (s *zkRedisSystem) Info() SystemInfo { return s.info }

func (s *zkRedisSystem) Note(workload string) string {
	switch workload {
	case "counter":
		return s.name + " counter: ZooKeeper lock, GET, SET, unlock"
	case "monalisa":
		return s.name + " monalisa: ZooKeeper locks on the event's 4 aggregate slots, GETRANGE each, SETRANGE each " +
			"+ APPEND in one MULTI/EXEC, unlock; a read is one GETRANGE of 800 bytes"
	case "bank":
		return s.name + " bank: ZooKeeper locks on both accounts (in account order), MGET, MSET, unlock"
	}
	return ""
}

var zkACL = zk.WorldACL(zk.PermAll)

func (s *zkRedisSystem) Open(context.Context) error {
	for _, p := range []string{s.root, s.root + "/locks"} {
		if _, err := s.zk.Create(p, nil, 0, zkACL); err != nil {
			return fmt.Errorf("zookeeper: create %s: %w", p, err)
		}
	}
	return nil
}

func (s *zkRedisSystem) Close(ctx context.Context) error {
	err := zkDeleteAll(s.zk, s.root)
	if err != nil {
		err = fmt.Errorf("zookeeper: deleting %s: %w", s.root, err)
	}
	s.zk.Close()
	return errors.Join(err, s.redis.Close(ctx))
}

// zkMultiMax bounds the ops of one ZooKeeper multi, far below its 1 MB
// request limit for the short paths used here.
const zkMultiMax = 1000

// zkDeleteAll deletes path and everything under it.
func zkDeleteAll(c *zk.Conn, path string) error {
	children, _, err := c.Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	var leaves []any
	for _, ch := range children {
		p := path + "/" + ch
		grand, _, err := c.Children(p)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		if len(grand) > 0 {
			if err := zkDeleteAll(c, p); err != nil {
				return err
			}
			continue
		}
		leaves = append(leaves, &zk.DeleteRequest{Path: p, Version: -1})
	}
	if err := zkMulti(c, leaves); err != nil {
		return err
	}
	return c.Delete(path, -1)
}

func zkMulti(c *zk.Conn, ops []any) error {
	return batches(len(ops), zkMultiMax, func(lo, hi int) error {
		_, err := c.Multi(ops[lo:hi]...)
		return err
	})
}

func (s *zkRedisSystem) lockPath(name string) string { return s.root + "/locks/" + name }

func slotLock(agg, slot int) string { return "a" + strconv.Itoa(agg) + "-s" + strconv.Itoa(slot) }

// createLocks creates the lock nodes' parents before the measurement, so
// that no lock taken during it pays for creating one.
func (s *zkRedisSystem) createLocks(names []string) error {
	ops := make([]any, len(names))
	for i, n := range names {
		ops[i] = &zk.CreateRequest{Path: s.lockPath(n), Acl: zkACL}
	}
	return zkMulti(s.zk, ops)
}

func (s *zkRedisSystem) CreateCounter(ctx context.Context) error {
	if err := s.createLocks([]string{counterKey}); err != nil {
		return fmt.Errorf("zookeeper: %w", err)
	}
	return s.redis.CreateCounter(ctx)
}

// CreateMonalisa stores every aggregate as zeros and creates a lock per
// aggregate slot; the logs are created by their first APPEND.
func (s *zkRedisSystem) CreateMonalisa(ctx context.Context, l *monalisaLayout) error {
	var locks []string
	aggs := make([]string, l.aggregates())
	for a := range aggs {
		aggs[a] = l.aggKey(a)
		for slot := range monalisaSlots {
			locks = append(locks, slotLock(a, slot))
		}
	}
	if err := s.createLocks(locks); err != nil {
		return fmt.Errorf("zookeeper: %w", err)
	}
	for g := range l.generators {
		s.redis.keys = append(s.redis.keys, s.redis.key(genKey(g)))
	}
	return s.redis.Preload(ctx, aggs, make([]byte, monalisaSlots*slotBytes))
}

func accountLock(a int) string { return "acct-" + strconv.Itoa(a) }

// CreateBank creates a lock per account and the accounts in Redis.
func (s *zkRedisSystem) CreateBank(ctx context.Context, l bankLayout) error {
	locks := make([]string, l.accounts)
	for a := range locks {
		locks[a] = accountLock(a)
	}
	if err := s.createLocks(locks); err != nil {
		return fmt.Errorf("zookeeper: %w", err)
	}
	return s.redis.CreateBank(ctx, l)
}

func (s *zkRedisSystem) Balances(ctx context.Context, l bankLayout) ([]uint64, error) {
	return s.redis.Balances(ctx, l)
}

// Conns gives each client a ZooKeeper session and a Redis connection of
// its own.
func (s *zkRedisSystem) Conns(ctx context.Context, n int) ([]conn, func() error, error) {
	rconns, closeRedis, err := s.redis.Conns(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	var sessions []*zk.Conn
	closeAll := func() error {
		for _, z := range sessions {
			z.Close()
		}
		return closeRedis()
	}
	conns := make([]conn, n)
	for i := range conns {
		z, err := zkConnect(s.zkAddr)
		if err != nil {
			return nil, nil, errors.Join(fmt.Errorf("zookeeper at %s: %w", s.zkAddr, err), closeAll())
		}
		sessions = append(sessions, z)
		conns[i] = &zkRedisConn{zk: z, r: rconns[i].(*redisConn), s: s}
	}
	return conns, closeAll, nil
}

type zkRedisConn struct {
	zk *zk.Conn
	r  *redisConn
	s  *zkRedisSystem
}

// Ping waits for the ZooKeeper session and opens the Redis connection.
func (c *zkRedisConn) Ping(ctx context.Context) error {
	if _, _, err := c.zk.Exists(c.s.root); err != nil {
		return fmt.Errorf("zookeeper: %w", err)
	}
	return c.r.Ping(ctx)
}

// locked runs fn holding the locks named, taken in their order and
// released in reverse.
func (c *zkRedisConn) locked(names []string, fn func() error) (err error) {
	held := make([]*zk.Lock, 0, len(names))
	defer func() {
		for i := len(held) - 1; i >= 0; i-- {
			if uerr := held[i].Unlock(); uerr != nil {
				err = errors.Join(err, fmt.Errorf("zookeeper: unlock: %w", uerr))
			}
		}
	}()
	for _, n := range names {
		l := zk.NewLock(c.zk, c.s.lockPath(n), zkACL)
		if err := l.Lock(); err != nil {
			return fmt.Errorf("zookeeper: lock %s: %w", n, err)
		}
		held = append(held, l)
	}
	return fn()
}

func (c *zkRedisConn) Add(ctx context.Context, delta uint64) error {
	key := c.s.redis.key(counterKey)
	return c.locked([]string{counterKey}, func() error {
		v, err := c.r.c.Get(ctx, key).Uint64()
		if err != nil {
			return err
		}
		return c.r.c.Set(ctx, key, v+delta, 0).Err()
	})
}

func (c *zkRedisConn) Record(ctx context.Context, l *monalisaLayout, w *monalisaWrite) error {
	var names [aggLevels]string
	var keys [aggLevels]string
	for i, a := range w.aggs {
		names[i] = slotLock(a, w.slot)
		keys[i] = c.s.redis.key(l.aggKey(a))
	}
	off := int64(slotOffset(w.slot))
	return c.locked(names[:], func() error {
		var reads [aggLevels]*redis.StringCmd
		if _, err := c.r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				reads[i] = p.GetRange(ctx, k, off, off+slotBytes-1)
			}
			return nil
		}); err != nil {
			return err
		}
		_, err := c.r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				p.SetRange(ctx, k, off, string(addToSlot([]byte(reads[i].Val()), w.value)))
			}
			p.Append(ctx, c.s.redis.key(genKey(w.gen)), string(w.event[:]))
			return nil
		})
		return err
	})
}

func (c *zkRedisConn) ReadAggregates(ctx context.Context, l *monalisaLayout, agg, from, n int) ([]byte, error) {
	off := int64(slotOffset(from))
	return c.r.c.GetRange(ctx, c.s.redis.key(l.aggKey(agg)), off, off+int64(n*slotBytes)-1).Bytes()
}

func (c *zkRedisConn) Transfer(ctx context.Context, _ bankLayout, t *transfer) error {
	lo, hi := t.ordered()
	keys := []string{c.s.redis.key(accountKey(t.from)), c.s.redis.key(accountKey(t.to))}
	return c.locked([]string{accountLock(lo), accountLock(hi)}, func() error {
		vals, err := c.r.c.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		bal, err := parseBalances(keys, vals)
		if err != nil {
			return err
		}
		from, to := t.apply(bal[0], bal[1])
		return c.r.c.MSet(ctx, keys[0], from, keys[1], to).Err()
	})
}
