package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/limits"
)

// tyrSystem runs workloads against a tyr server, in a keyspace of its own
// that it drops at the end so that repeated runs leave nothing behind.
type tyrSystem struct {
	endpoint string
	name     string
	rf       int
	direct   bool
	admin    *client.Client
	keyspace string
	created  bool
	// routes, with --direct, maps each blob to the node serving it.
	routes *routes

	metrics []string      // the nodes' metrics endpoints
	before  clusterCounts // their counters when the measurement began
	info    SystemInfo

	// aborts counts the conflicting attempts of the bank's transactions.
	aborts atomic.Uint64
}

func newTyrSystem(cfg *Config) (*tyrSystem, error) {
	admin, err := client.Dial(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	return &tyrSystem{endpoint: cfg.Endpoint, name: cfg.System, rf: cfg.Replication, direct: cfg.Direct,
		admin: admin, keyspace: fmt.Sprintf("bench-%08x", rand.Uint32()), metrics: cfg.MetricsAddrs}, nil
}

func (s *tyrSystem) Name() string { return s.name }

func (s *tyrSystem) Note(workload string) string {
	if s.routes != nil {
		return fmt.Sprintf("%s: replication %d; each read and write sent to the blob's first live replica in node-ID order",
			s.name, s.rf)
	}
	switch workload {
	case "counter":
		return s.name + " counter: an atomic add applied on the server, one round trip"
	case "monalisa":
		return s.name + " monalisa: one commit of the event's append and two atomic adds (sum, count) per " +
			"aggregate; a read is one ReadPart of 800 bytes"
	case "bank":
		return s.name + " bank: RunTx reading both balances and writing both back, retried on conflict; " +
			"balances are 8-byte integers side by side in blobs, so transfers conflict per blob"
	}
	return ""
}

// retries: tyr's bank transfers are transactions retried on conflict; its
// counter and monalisa operations are atomic ops that never conflict.
func (s *tyrSystem) retries(workload string) bool { return workload == "bank" }
func (s *tyrSystem) takeAborts() uint64           { return s.aborts.Swap(0) }

func (s *tyrSystem) Info() SystemInfo { return s.info }

func keyspaceSettings(c client.KeyspaceConfig) string {
	onOff := map[bool]string{true: "on", false: "off"}
	return fmt.Sprintf("keyspace sync %s, MVCC %s, %s chunks, replication %d",
		onOff[c.Sync], onOff[c.MVCC], FormatSize(int64(c.ChunkSize)), c.Replication)
}

// Open creates the keyspace with the default configuration (64 MiB chunks,
// sync on, MVCC on) and the run's replication factor, which is what an
// application gets unless it asks for less durability.
func (s *tyrSystem) Open(ctx context.Context) error {
	cfg := client.DefaultKeyspaceConfig()
	cfg.Replication = uint32(s.rf)
	if _, err := s.admin.CreateKeyspace(ctx, s.keyspace, cfg); err != nil {
		return fmt.Errorf("create keyspace %s: %w", s.keyspace, err)
	}
	s.created = true
	// The settings are read back rather than assumed, so the output says
	// what the server actually applied.
	ki, err := s.admin.Keyspace(ctx, s.keyspace)
	if err != nil {
		return fmt.Errorf("keyspace %s: %w", s.keyspace, err)
	}
	s.info.Settings = keyspaceSettings(ki.Config)
	if s.direct {
		st, err := s.admin.ClusterStatus(ctx)
		if err != nil {
			return fmt.Errorf("cluster status: %w", err)
		}
		if s.routes, err = newRoutes(st, s.keyspace, s.rf); err != nil {
			return err
		}
		for _, addr := range s.routes.addrs {
			if err := waitKeyspace(ctx, addr, s.keyspace); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitKeyspace waits until the node at addr has keyspace ks: the other
// nodes learn of a new keyspace by gossip, and refuse commits to it until
// then.
func waitKeyspace(ctx context.Context, addr, ks string) error {
	c, err := client.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		_, err := c.Keyspace(ctx, ks)
		if !errors.Is(err, client.ErrNotFound) {
			if err != nil {
				return fmt.Errorf("keyspace %s on %s: %w", ks, addr, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("keyspace %s not on %s: %w", ks, addr, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
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
		return s.createAll(ctx, keys[lo:hi])
	})
}

// createAll makes empty blobs under keys in one commit.
func (s *tyrSystem) createAll(ctx context.Context, keys []string) error {
	ops := make([]client.Op, 0, len(keys))
	for _, k := range keys {
		ops = append(ops, client.CreateOp(k))
	}
	_, err := s.admin.Commit(ctx, s.keyspace, ops...)
	return err
}

// Fill makes n empty blobs under prefix, a few full commits at once.
func (s *tyrSystem) Fill(ctx context.Context, prefix string, n int) error {
	return fillBatches(ctx, prefix, n, limits.OpsPerCommitMax, fillWorkers, s.createAll)
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
// HTTP/2 connection and its flow control; with --direct, one per client
// and node.
func (s *tyrSystem) Conns(_ context.Context, n int) ([]conn, func() error, error) {
	var all []*client.Client
	closeAll := func() error {
		var err error
		for _, c := range all {
			err = errors.Join(err, c.Close())
		}
		return err
	}
	dial := func(addr string) (*client.Client, error) {
		c, err := client.Dial(addr)
		if err == nil {
			all = append(all, c)
		}
		return c, err
	}
	conns := make([]conn, 0, n)
	for range n {
		c, err := dial(s.endpoint)
		if err != nil {
			return nil, nil, errors.Join(err, closeAll())
		}
		tc := &tyrConn{c: c, ks: s.keyspace, aborts: &s.aborts}
		if s.routes != nil {
			tc.routes = s.routes
			for _, addr := range s.routes.addrs {
				nc, err := dial(addr)
				if err != nil {
					return nil, nil, errors.Join(err, closeAll())
				}
				tc.nodes = append(tc.nodes, nc)
			}
		}
		conns = append(conns, tc)
	}
	return conns, closeAll, nil
}

type tyrConn struct {
	c  *client.Client
	ks string
	// aborts counts the conflicting attempts of its transactions.
	aborts *atomic.Uint64
	// With --direct: a connection to each node of routes.addrs.
	routes *routes
	nodes  []*client.Client
}

// to returns the connection for key: the node serving it with --direct,
// the endpoint otherwise.
func (c *tyrConn) to(key string) *client.Client {
	if c.routes == nil {
		return c.c
	}
	return c.nodes[c.routes.target(key)]
}

// Ping asks for the keyspace on every connection, which opens them without
// touching any blob.
func (c *tyrConn) Ping(ctx context.Context) error {
	for _, cl := range append([]*client.Client{c.c}, c.nodes...) {
		if _, err := cl.Keyspace(ctx, c.ks); err != nil {
			return err
		}
	}
	return nil
}

func (c *tyrConn) Put(ctx context.Context, key string, value []byte) error {
	_, err := c.to(key).Write(ctx, c.ks, key, 0, value)
	return err
}

func (c *tyrConn) Get(ctx context.Context, key string, n int) ([]byte, error) {
	data, _, err := c.to(key).ReadPart(ctx, c.ks, key, 0, uint64(n))
	return data, err
}

func (s *tyrSystem) objects() {}

// PutObject writes the object in one commit when it fits one
// (CommitBytesMax), so that it replaces the last one atomically; a larger
// one is written in parts, a few in flight, each part atomic.
func (c *tyrConn) ListPage(ctx context.Context, prefix, after string, max int) ([]string, error) {
	blobs, _, err := c.c.List(ctx, c.ks, prefix, after, max)
	keys := make([]string, len(blobs))
	for i, b := range blobs {
		keys[i] = b.Key
	}
	return keys, err
}

func (c *tyrConn) PutObject(ctx context.Context, key string, value []byte) error {
	cl := c.to(key)
	if len(value) > limits.CommitBytesMax {
		_, err := cl.Blob(ctx, c.ks, key).WriteAt(value, 0)
		return err
	}
	ops := make([]client.Op, 0, (len(value)+client.PayloadBytesMax-1)/client.PayloadBytesMax)
	for off := 0; off < len(value); off += client.PayloadBytesMax {
		ops = append(ops, client.WriteOp(key, uint64(off), value[off:min(len(value), off+client.PayloadBytesMax)], false))
	}
	_, err := cl.Commit(ctx, c.ks, ops...)
	return err
}

// GetObject reads the whole object at one version (Client.Read).
func (c *tyrConn) GetObject(ctx context.Context, key string, n int) ([]byte, error) {
	return c.to(key).Read(ctx, c.ks, key, 0, uint64(n))
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
