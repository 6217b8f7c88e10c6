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

// counterSystem runs the counter workload: CreateCounter stores the counter
// at zero, and its conns are counterConns.
type counterSystem interface {
	system
	CreateCounter(ctx context.Context) error
}

type counterConn interface {
	// Add adds delta to the counter.
	Add(ctx context.Context, delta uint64) error
}

// runCounter has every client add 1 to one shared counter. tyr runs it with
// an atomic add (one round trip, applied on the server) and as a
// transactional read-modify-write (read, write back, commit; retried on
// conflict), which is what an application without atomic ops must do; each
// peer runs its own best equivalent (see its file). After the phases the
// counter must equal the number of increments acknowledged, checked on tyr.
func runCounter(ctx context.Context, cfg *Config, systems []system, emit func(Result) error) error {
	for _, s := range systems {
		if err := s.(counterSystem).CreateCounter(ctx); err != nil {
			return fmt.Errorf("%s: creating the counter: %w", s.Name(), err)
		}
	}
	op := func(ctx context.Context, c conn, _ int, _ *rand.Rand, _ []byte) (int, error) {
		return 8, c.(counterConn).Add(ctx, 1)
	}
	t := tyrOf(systems)
	var acked uint64
	counting := func(r Result) error {
		if isTyr(systems, r.System) {
			acked += r.Ops
		}
		return emit(r)
	}
	if err := forEachPhase(ctx, cfg, systems, counting, op); err != nil {
		return err
	}
	got, err := t.counter(ctx)
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

// tyrOf returns the tyr system among systems: the one measured with atomic
// ops, or the one the read-modify-write system shares.
func tyrOf(systems []system) *tyrSystem {
	for _, s := range systems {
		switch t := s.(type) {
		case *tyrSystem:
			return t
		case *tyrRMWSystem:
			return t.tyrSystem
		}
	}
	panic("bench: no tyr system among the systems measured")
}

// isTyr reports whether name is one of the tyr systems among systems.
func isTyr(systems []system, name string) bool {
	for _, s := range systems {
		switch s.(type) {
		case *tyrSystem, *tyrRMWSystem:
			if s.Name() == name {
				return true
			}
		}
	}
	return false
}

// CreateCounter stores a zero little-endian uint64.
func (s *tyrSystem) CreateCounter(ctx context.Context) error {
	return s.Preload(ctx, []string{counterKey}, make([]byte, 8))
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
func (c *tyrConn) Add(ctx context.Context, delta uint64) error {
	_, err := c.c.Atomic(ctx, c.ks, counterKey, 0, 8, client.FuncAdd, delta)
	return err
}

// tyrRMWSystem is tyr measured with read-modify-write transactions instead
// of atomic ops. It shares the tyr system's keyspace and connections' setup.
type tyrRMWSystem struct {
	*tyrSystem
	aborts atomic.Uint64
}

func (s *tyrRMWSystem) Name() string { return s.tyrSystem.Name() + "-rmw" }

func (s *tyrRMWSystem) Note(workload string) string {
	if workload == "monalisa" {
		return s.Name() + " monalisa: RunTx reading the event's 4 aggregate slots, writing them back and " +
			"appending the event, retried on conflict"
	}
	return s.Name() + " counter: RunTx reading the counter and writing it back, retried on conflict"
}

// retries: every operation of tyr-rmw is a transaction retried on
// conflict.
func (s *tyrRMWSystem) retries(string) bool { return true }
func (s *tyrRMWSystem) takeAborts() uint64  { return s.aborts.Swap(0) }

// Open and Close do nothing: the tyr system owns the keyspace.
func (s *tyrRMWSystem) Open(context.Context) error  { return nil }
func (s *tyrRMWSystem) Close(context.Context) error { return nil }

// CreateCounter stores the counter at zero. When tyr with atomic ops runs
// too, both write the zero before the first phase: they count in one blob.
func (s *tyrRMWSystem) CreateCounter(ctx context.Context) error {
	return s.tyrSystem.CreateCounter(ctx)
}

func (s *tyrRMWSystem) Conns(ctx context.Context, n int) ([]conn, func() error, error) {
	conns, closeAll, err := s.tyrSystem.Conns(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	wrapped := make([]conn, len(conns))
	for i, c := range conns {
		tc := c.(*tyrConn)
		tc.aborts = &s.aborts
		wrapped[i] = &tyrRMWConn{tyrConn: tc}
	}
	return wrapped, closeAll, nil
}

type tyrRMWConn struct {
	*tyrConn
}

// Add reads the counter, adds delta and writes it back in a transaction,
// retried on conflict with RunTx's backoff.
func (c *tyrRMWConn) Add(ctx context.Context, delta uint64) error {
	return runTx(ctx, c.c, c.ks, c.aborts, func(tx *client.Tx) error {
		b, err := tx.Read(ctx, counterKey, 0, 8)
		if err != nil {
			return err
		}
		if len(b) != 8 {
			return fmt.Errorf("counter of %d bytes", len(b))
		}
		tx.Write(counterKey, 0, binary.LittleEndian.AppendUint64(nil, binary.LittleEndian.Uint64(b)+delta))
		return nil
	})
}

// CreateCounter stores "0": Redis counts in decimal strings.
func (s *redisSystem) CreateCounter(ctx context.Context) error {
	return s.Preload(ctx, []string{counterKey}, []byte("0"))
}

// Add is INCRBY on a counter stored as a decimal string, Redis's own form.
func (c *redisConn) Add(ctx context.Context, delta uint64) error {
	return c.c.IncrBy(ctx, c.s.key(counterKey), int64(delta)).Err()
}
