package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/tyrstore/tyr/client"
)

// counterKey is the one 8-byte counter every client of the counter workload
// increments: the hot spot of the seeds' aggregation workloads.
const counterKey = "counter"

// runCounter has every client add 1 to one shared counter. tyr runs it twice:
// with an atomic add (one round trip, applied on the server) and as a
// transactional read-modify-write (read, write back, commit; retried on
// conflict), which is what an application without atomic ops must do. Redis
// runs INCRBY. After the phases the counter must equal the number of
// increments acknowledged, checked on tyr.
func runCounter(ctx context.Context, cfg *Config, systems []system, emit func(Result) error) error {
	for _, s := range systems {
		zero := make([]byte, 8) // tyr: a little-endian uint64
		if _, ok := s.(*redisSystem); ok {
			zero = []byte("0") // Redis counts in decimal strings
		}
		if err := s.Preload(ctx, []string{counterKey}, zero); err != nil {
			return fmt.Errorf("%s: creating the counter: %w", s.Name(), err)
		}
	}
	op := func(ctx context.Context, c conn, _ int, _ *rand.Rand, _ []byte) (int, error) {
		return 8, c.Add(ctx, counterKey, 1)
	}
	var acked uint64
	counting := func(r Result) error {
		if r.System == "tyr" || r.System == "tyr-rmw" {
			acked += r.Ops
		}
		return emit(r)
	}
	if err := forEachPhase(ctx, cfg, systems, counting, op); err != nil {
		return err
	}
	got, err := systems[0].(*tyrSystem).counter(ctx)
	if err != nil {
		return err
	}
	// An increment that failed on the client may still have been applied,
	// so the counter may exceed the acknowledged count, never fall short.
	if got < acked {
		return fmt.Errorf("tyr counter is %d after %d acknowledged increments: lost updates", got, acked)
	}
	cfg.progress("tyr counter %d after %d acknowledged increments", got, acked)
	return nil
}

func (s *tyrSystem) counter(ctx context.Context) (uint64, error) {
	b, err := s.admin.Read(ctx, s.keyspace, counterKey, 0, 8)
	if err != nil {
		return 0, err
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("counter of %d bytes", len(b))
	}
	return binary.LittleEndian.Uint64(b), nil
}

// Add is an atomic add applied on the server.
func (c *tyrConn) Add(ctx context.Context, key string, delta uint64) error {
	_, err := c.c.Atomic(ctx, c.ks, key, 0, 8, client.FuncAdd, delta)
	return err
}

// tyrRMWSystem is tyr measured with read-modify-write transactions instead
// of atomic ops. It shares the tyr system's keyspace and connections' setup.
type tyrRMWSystem struct {
	*tyrSystem
	attempts, commits atomic.Uint64
}

func (s *tyrRMWSystem) Name() string { return "tyr-rmw" }

// Note reports the abort rate of the phase just measured.
func (s *tyrRMWSystem) Note(string) string {
	attempts, commits := s.attempts.Swap(0), s.commits.Swap(0)
	if commits == 0 {
		return "transactional read-modify-write: nothing committed"
	}
	return fmt.Sprintf("transactional read-modify-write: %.2f aborts per commit", float64(attempts-commits)/float64(commits))
}

// Open and Close do nothing: the tyr system owns the keyspace.
func (s *tyrRMWSystem) Open(context.Context) error  { return nil }
func (s *tyrRMWSystem) Close(context.Context) error { return nil }

// Preload does nothing: the tyr system already created the counter.
func (s *tyrRMWSystem) Preload(context.Context, []string, []byte) error { return nil }

func (s *tyrRMWSystem) Conns(ctx context.Context, n int) ([]conn, func() error, error) {
	conns, closeAll, err := s.tyrSystem.Conns(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	wrapped := make([]conn, len(conns))
	for i, c := range conns {
		wrapped[i] = &tyrRMWConn{tyrConn: c.(*tyrConn), s: s}
	}
	return wrapped, closeAll, nil
}

type tyrRMWConn struct {
	*tyrConn
	s *tyrRMWSystem
}

// Add reads the counter, adds delta and writes it back in a transaction,
// retried on conflict with RunTx's backoff.
func (c *tyrRMWConn) Add(ctx context.Context, key string, delta uint64) error {
	err := c.c.RunTx(ctx, c.ks, func(tx *client.Tx) error {
		c.s.attempts.Add(1)
		b, err := tx.Read(ctx, key, 0, 8)
		if err != nil {
			return err
		}
		if len(b) != 8 {
			return fmt.Errorf("counter of %d bytes", len(b))
		}
		tx.Write(key, 0, binary.LittleEndian.AppendUint64(nil, binary.LittleEndian.Uint64(b)+delta))
		return nil
	}, &client.TxOptions{MaxRetries: 1000})
	if err == nil {
		c.s.commits.Add(1)
	}
	return err
}

// Add is INCRBY on a counter stored as a decimal string, Redis's own form.
func (c *redisConn) Add(ctx context.Context, key string, delta uint64) error {
	return c.c.IncrBy(ctx, c.s.key(key), int64(delta)).Err()
}
