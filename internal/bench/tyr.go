package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/limits"
)

// tyrSystem runs workloads against a tyr server, in a keyspace of its own
// that it drops at the end so that repeated runs leave nothing behind.
type tyrSystem struct {
	endpoint string
	admin    *client.Client
	keyspace string
	created  bool
}

func newTyrSystem(endpoint string) (*tyrSystem, error) {
	admin, err := client.Dial(endpoint)
	if err != nil {
		return nil, err
	}
	return &tyrSystem{endpoint: endpoint, admin: admin, keyspace: fmt.Sprintf("bench-%08x", rand.Uint32())}, nil
}

func (s *tyrSystem) Name() string { return "tyr" }

func (s *tyrSystem) Note(string) string { return "" }

// Open creates the keyspace with the default configuration (64 MiB chunks,
// sync on, MVCC on), which is what an application gets unless it asks for
// less durability.
func (s *tyrSystem) Open(ctx context.Context) error {
	if _, err := s.admin.CreateKeyspace(ctx, s.keyspace, client.DefaultKeyspaceConfig()); err != nil {
		return fmt.Errorf("create keyspace %s: %w", s.keyspace, err)
	}
	s.created = true
	return nil
}

func (s *tyrSystem) Close(ctx context.Context) error {
	var err error
	if s.created {
		if derr := s.admin.DropKeyspace(ctx, s.keyspace); derr != nil {
			err = fmt.Errorf("drop keyspace %s: %w", s.keyspace, derr)
		}
	}
	return errors.Join(err, s.admin.Close())
}

// Create makes empty blobs in commits of as many ops as one commit may
// carry, because one synced commit per key would make setup slower than the
// measurement.
func (s *tyrSystem) Create(ctx context.Context, keys []string) error {
	return batches(len(keys), limits.OpsPerCommitMax, func(lo, hi int) error {
		ops := make([]client.Op, 0, hi-lo)
		for _, k := range keys[lo:hi] {
			ops = append(ops, client.CreateOp(k))
		}
		_, err := s.admin.Commit(ctx, s.keyspace, ops...)
		return err
	})
}

// Preload writes value under every key, batched as Create is.
func (s *tyrSystem) Preload(ctx context.Context, keys []string, value []byte) error {
	per := max(1, min(limits.OpsPerCommitMax, limits.CommitBytesMax/max(len(value), 1)))
	return batches(len(keys), per, func(lo, hi int) error {
		ops := make([]client.Op, 0, hi-lo)
		for _, k := range keys[lo:hi] {
			ops = append(ops, client.WriteOp(k, 0, value, true))
		}
		_, err := s.admin.Commit(ctx, s.keyspace, ops...)
		return err
	})
}

// Conns opens one connection per client, so that clients do not share one
// HTTP/2 connection and its flow control.
func (s *tyrSystem) Conns(_ context.Context, n int) ([]conn, func() error, error) {
	conns := make([]conn, 0, n)
	closeAll := func() error {
		var err error
		for _, c := range conns {
			err = errors.Join(err, c.(*tyrConn).c.Close())
		}
		return err
	}
	for range n {
		c, err := client.Dial(s.endpoint)
		if err != nil {
			return nil, nil, errors.Join(err, closeAll())
		}
		conns = append(conns, &tyrConn{c: c, ks: s.keyspace})
	}
	return conns, closeAll, nil
}

type tyrConn struct {
	c  *client.Client
	ks string
}

// Ping asks for the keyspace, which opens the connection without touching
// any blob.
func (c *tyrConn) Ping(ctx context.Context) error {
	_, err := c.c.Keyspace(ctx, c.ks)
	return err
}

func (c *tyrConn) Put(ctx context.Context, key string, value []byte) error {
	_, err := c.c.Write(ctx, c.ks, key, 0, value)
	return err
}

func (c *tyrConn) Get(ctx context.Context, key string, n int) ([]byte, error) {
	data, _, err := c.c.ReadPart(ctx, c.ks, key, 0, uint64(n))
	return data, err
}

// tyr streams a large value into a single blob, one part per request at its
// offset, exactly as an application would store a large file.
const tyrStreamKey = "stream"

// PartBytes is the most one request may carry, so each part is one commit.
func (s *tyrSystem) PartBytes() int { return client.PayloadBytesMax }

func (s *tyrSystem) StreamOpen(ctx context.Context, _, _ int) (streamConn, error) {
	if err := s.admin.Create(ctx, s.keyspace, tyrStreamKey); err != nil {
		return nil, err
	}
	c, err := client.Dial(s.endpoint)
	if err != nil {
		return nil, err
	}
	return &tyrStream{c: c, ks: s.keyspace, part: s.PartBytes()}, nil
}

// tyrStream shares one connection among the parts in flight, as the client
// multiplexes requests on one connection by design.
type tyrStream struct {
	c    *client.Client
	ks   string
	part int
}

func (t *tyrStream) PutPart(ctx context.Context, i int, data []byte) error {
	_, err := t.c.Write(ctx, t.ks, tyrStreamKey, uint64(i)*uint64(t.part), data)
	return err
}

func (t *tyrStream) GetPart(ctx context.Context, i int, n int) ([]byte, error) {
	data, _, err := t.c.ReadPart(ctx, t.ks, tyrStreamKey, uint64(i)*uint64(t.part), uint64(n))
	return data, err
}

func (t *tyrStream) Close() error { return t.c.Close() }
