package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisSystem runs the same logical workloads against a Redis server: a
// blob write is SET key value, a read is GET key, and a stream is one key per
// part. Every key carries a random prefix and is deleted at the end, so a
// shared Redis keeps nothing and loses nothing of its own.
//
// The bank keeps a key per account, its balance in decimal. Redis has no
// serializable read-modify-write of several keys but optimistically: a
// transfer WATCHes both keys and MGETs them (one pipeline), then MSETs both
// in MULTI/EXEC; EXEC refuses the transaction if a watched key changed
// since WATCH, and the transfer runs again with tyr's RunTx backoff,
// counted as an abort.
type redisSystem struct {
	addr   string
	name   string
	prefix string
	admin  *redis.Client
	info   SystemInfo
	// keys remembers what was written so Close deletes exactly that.
	keys []string

	// aborts counts the bank's transactions EXEC refused.
	aborts atomic.Uint64
}

// RedisPartBytes is the size of one stream part on Redis: each part is one
// key, as Redis has no way to write into the middle of a large value
// without reading it first.
const RedisPartBytes = 4 << 20

func redisOptions(addr string, pool int) *redis.Options {
	return &redis.Options{
		Addr:     addr,
		PoolSize: pool,
		// A slow fsync under load should show up as latency, not as a
		// client-side timeout error, within the per-operation deadline.
		ReadTimeout:           -1,
		WriteTimeout:          -1,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		// Maintenance notifications are a feature of managed Redis; asking
		// a plain server for them only adds a failed command per connection.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

func newRedisSystem(ctx context.Context, addr string) (*redisSystem, error) {
	admin := redis.NewClient(redisOptions(addr, 4))
	if err := admin.Ping(ctx).Err(); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	return &redisSystem{addr: addr, admin: admin, name: redisName(ctx, admin), info: redisInfo(ctx, admin),
		prefix: fmt.Sprintf("bench-%08x:", rand.Uint32())}, nil
}

// redisInfo reads the server's version and persistence settings.
func redisInfo(ctx context.Context, c *redis.Client) SystemInfo {
	var info SystemInfo
	if text, err := c.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				info.Version = "redis " + v
			}
		}
	}
	var settings []string
	for _, p := range []string{"appendonly", "appendfsync", "save"} {
		if m, err := c.ConfigGet(ctx, p).Result(); err == nil {
			settings = append(settings, fmt.Sprintf("%s %q", p, m[p]))
		}
	}
	info.Settings = strings.Join(settings, ", ")
	return info
}

func (s *redisSystem) Info() SystemInfo { return s.info }

// redisName labels the server by its durability, read from its own
// configuration, because the same numbers mean very different things for a
// Redis that fsyncs every write and one that keeps everything in memory.
func redisName(ctx context.Context, c *redis.Client) string {
	get := func(p string) (string, bool) {
		m, err := c.ConfigGet(ctx, p).Result()
		if err != nil {
			return "", false
		}
		v, ok := m[p]
		return v, ok
	}
	aof, ok1 := get("appendonly")
	fsync, ok2 := get("appendfsync")
	save, ok3 := get("save")
	switch {
	case !ok1 || !ok2 || !ok3:
		return "redis"
	case aof == "yes" && fsync == "always":
		return "redis-durable"
	case aof == "yes":
		return "redis-aof-" + fsync
	case save == "":
		return "redis-memory"
	default:
		return "redis-rdb"
	}
}

func (s *redisSystem) Name() string { return s.name }

func (s *redisSystem) Note(workload string) string {
	switch workload {
	case "stream":
		return fmt.Sprintf("%s stream: the logical value is split into keys of %d MiB, "+
			"put with SET and got with GET, one key per part", s.name, RedisPartBytes>>20)
	case "bank":
		return s.name + " bank: a key per account; WATCH both + MGET, then MSET in MULTI/EXEC, " +
			"retried when EXEC refuses because a watched key changed"
	}
	return ""
}

func (s *redisSystem) retries(workload string) bool { return workload == "bank" }
func (s *redisSystem) takeAborts() uint64           { return s.aborts.Swap(0) }

func (s *redisSystem) Open(context.Context) error { return nil }

func (s *redisSystem) Close(ctx context.Context) error {
	err := batches(len(s.keys), 1000, func(lo, hi int) error {
		return s.admin.Del(ctx, s.keys[lo:hi]...).Err()
	})
	if err != nil {
		err = fmt.Errorf("deleting bench keys from %s: %w", s.addr, err)
	}
	return errors.Join(err, s.admin.Close())
}

func (s *redisSystem) key(k string) string { return s.prefix + k }

// Create has nothing to do: SET creates keys. The keys are remembered so
// they are deleted at the end.
func (s *redisSystem) Create(_ context.Context, keys []string) error {
	for _, k := range keys {
		s.keys = append(s.keys, s.key(k))
	}
	return nil
}

// pipelineBytesMax bounds one preload pipeline, as tyr's commits are bounded,
// so large values do not make one huge request.
const pipelineBytesMax = 16 << 20

// Preload sets every key, pipelined to keep setup short.
func (s *redisSystem) Preload(ctx context.Context, keys []string, value []byte) error {
	for _, k := range keys {
		s.keys = append(s.keys, s.key(k))
	}
	per := max(1, min(256, pipelineBytesMax/max(len(value), 1)))
	return batches(len(keys), per, func(lo, hi int) error {
		_, err := s.admin.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys[lo:hi] {
				p.Set(ctx, s.key(k), value, 0)
			}
			return nil
		})
		return err
	})
}

// Conns opens a pool of exactly n connections and pins one to each client,
// so each client has its own connection, as with tyr.
func (s *redisSystem) Conns(_ context.Context, n int) ([]conn, func() error, error) {
	pool := redis.NewClient(redisOptions(s.addr, n))
	conns := make([]conn, n)
	for i := range conns {
		conns[i] = &redisConn{c: pool.Conn(), s: s}
	}
	closeAll := func() error {
		var err error
		for _, c := range conns {
			err = errors.Join(err, c.(*redisConn).c.Close())
		}
		return errors.Join(err, pool.Close())
	}
	return conns, closeAll, nil
}

type redisConn struct {
	c *redis.Conn
	s *redisSystem
}

func (c *redisConn) Ping(ctx context.Context) error { return c.c.Ping(ctx).Err() }

func (c *redisConn) Put(ctx context.Context, key string, value []byte) error {
	return c.c.Set(ctx, c.s.key(key), value, 0).Err()
}

func (c *redisConn) Get(ctx context.Context, key string, _ int) ([]byte, error) {
	return c.c.Get(ctx, c.s.key(key)).Bytes()
}

func (s *redisSystem) objects() {}

func (c *redisConn) PutObject(ctx context.Context, key string, value []byte) error {
	return c.Put(ctx, key, value)
}

func (c *redisConn) GetObject(ctx context.Context, key string, n int) ([]byte, error) {
	return c.Get(ctx, key, n)
}

func (s *redisSystem) PartBytes() int { return RedisPartBytes }

// StreamOpen sizes the pool to the parts in flight, since a Redis
// connection serves one request at a time.
func (s *redisSystem) StreamOpen(_ context.Context, parts, inFlight int) (streamConn, error) {
	r := &redisStream{s: s, pool: redis.NewClient(redisOptions(s.addr, inFlight))}
	for i := range parts {
		s.keys = append(s.keys, r.partKey(i))
	}
	return r, nil
}

type redisStream struct {
	s    *redisSystem
	pool *redis.Client
}

func (r *redisStream) partKey(i int) string { return r.s.key("stream:" + strconv.Itoa(i)) }

func (r *redisStream) PutPart(ctx context.Context, i int, data []byte) error {
	return r.pool.Set(ctx, r.partKey(i), data, 0).Err()
}

func (r *redisStream) GetPart(ctx context.Context, i int, _ int) ([]byte, error) {
	return r.pool.Get(ctx, r.partKey(i)).Bytes()
}

// Close keeps the parts: they are deleted with the other keys when the
// system closes.
func (r *redisStream) Close() error { return r.pool.Close() }

// CreateBank sets a key per account to its initial balance.
func (s *redisSystem) CreateBank(ctx context.Context, l bankLayout) error {
	keys := make([]string, l.accounts)
	for a := range keys {
		keys[a] = accountKey(a)
	}
	return s.Preload(ctx, keys, []byte(strconv.Itoa(bankInitial)))
}

func (s *redisSystem) Balances(ctx context.Context, l bankLayout) ([]uint64, error) {
	out := make([]uint64, 0, l.accounts)
	err := batches(l.accounts, 1000, func(lo, hi int) error {
		keys := make([]string, 0, hi-lo)
		for a := lo; a < hi; a++ {
			keys = append(keys, s.key(accountKey(a)))
		}
		vals, err := s.admin.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		bal, err := parseBalances(keys, vals)
		out = append(out, bal...)
		return err
	})
	return out, err
}

// parseBalances parses what MGET answered for keys.
func parseBalances(keys []string, vals []any) ([]uint64, error) {
	if len(vals) != len(keys) {
		return nil, fmt.Errorf("MGET of %d keys answered %d values", len(keys), len(vals))
	}
	out := make([]uint64, len(vals))
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s: no balance (%v)", keys[i], v)
		}
		b, err := strconv.ParseUint(str, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", keys[i], err)
		}
		out[i] = b
	}
	return out, nil
}

// Transfer is optimistic: WATCH both keys and read them, then write both
// in MULTI/EXEC, which fails if a watched key changed; then run again.
func (c *redisConn) Transfer(ctx context.Context, _ bankLayout, t *transfer) error {
	keys := []string{c.s.key(accountKey(t.from)), c.s.key(accountKey(t.to))}
	return retry(ctx, &c.s.aborts, func() (bool, error) {
		var get *redis.SliceCmd
		_, err := c.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "WATCH", keys[0], keys[1])
			get = p.MGet(ctx, keys...)
			return nil
		})
		var bal []uint64
		if err == nil {
			bal, err = parseBalances(keys, get.Val())
		}
		if err != nil {
			// The connection is reused: leave nothing watched on it.
			return false, errors.Join(err, c.c.Do(ctx, "UNWATCH").Err())
		}
		from, to := t.apply(bal[0], bal[1])
		_, err = c.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.MSet(ctx, keys[0], from, keys[1], to)
			return nil
		})
		if errors.Is(err, redis.TxFailedErr) {
			return false, nil
		}
		return err == nil, err
	})
}
