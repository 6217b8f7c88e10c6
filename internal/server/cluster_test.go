package server

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/storage"
)

// startMember runs one member with its own engine on loopback.
func startMember(t *testing.T, id string, join ...string) *Cluster {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := storage.Open(storage.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	node, err := membership.Start(membership.Config{ID: ring.NodeID(id), RPCAddr: id + ":1", Join: join, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCluster(node, engine, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		_ = node.Shutdown()
		_ = engine.Close()
	})
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hasLocal(c *Cluster, name string) bool {
	ks, err := c.engine.Acquire(name)
	if err != nil {
		return false
	}
	ks.Release()
	return true
}

func TestClusterKeyspaces(t *testing.T) {
	a := startMember(t, "a")
	// A standalone member keeps the single-node rule for replication.
	if _, err := a.CreateKeyspace("solo", keyspace.Config{Replication: 3}); err != nil {
		t.Fatalf("replication 3 on one member: %v", err)
	}
	b := startMember(t, "b", a.Node().GossipAddr())
	if !hasLocal(b, "solo") {
		t.Fatal("a joining member does not hold the catalog's keyspace when NewCluster returns")
	}
	waitFor(t, "both members alive on a", func() bool { return a.Alive("a") && a.Alive("b") })
	if addr, ok := a.RPCAddr("b"); !ok || addr != "b:1" || a.Self() != "a" {
		t.Fatalf("RPCAddr(b) = %q, %v; Self = %q", addr, ok, a.Self())
	}

	if _, err := b.CreateKeyspace("wide", keyspace.Config{Replication: 3}); !errors.Is(err, errs.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "replication 3 exceeds the 2 live members") {
		t.Fatalf("replication 3 on two members: %v", err)
	}
	if _, err := b.CreateKeyspace("solo", keyspace.Config{}); !errors.Is(err, errs.ErrExists) {
		t.Fatalf("re-create: %v, want ErrExists", err)
	}
	if _, err := b.CreateKeyspace("Bad", keyspace.Config{}); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("bad name: %v, want ErrInvalidArgument", err)
	}
	if _, err := b.CreateKeyspace("pair", keyspace.Config{Replication: 2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pair on a", func() bool { return hasLocal(a, "pair") })
	if err := a.DropKeyspace("pair"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pair dropped on b", func() bool { return !hasLocal(b, "pair") })
	if err := a.DropKeyspace("pair"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("second drop: %v, want ErrNotFound", err)
	}
	if hasLocal(a, "wide") || hasLocal(b, "wide") {
		t.Fatal("a refused keyspace exists")
	}

	st, err := a.status()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, m := range st.Members {
		sum += m.RingShare
	}
	if len(st.Members) != 2 || sum < 0.999999 || sum > 1.000001 || len(st.Keyspaces) != 1 || st.Keyspaces[0].Name != "solo" {
		t.Fatalf("status: %v", st)
	}
}
