package server

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/txn"
)

// A run's views serve the requests that had arrived when they were taken
// (the budget), and no request after: the first one past the budget reads
// the store anew. Closing the views lets the keyspace go.
func TestReadViewsBudget(t *testing.T) {
	engine, err := storage.Open(storage.Options{Dir: t.TempDir(), CacheBytes: 8 << 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	ks, err := engine.Create("views", keyspace.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	write := func(v string) {
		t.Helper()
		p, err := ks.Store.Prepare([]txn.Op{{Key: "k", Kind: txn.OpWrite, Data: []byte(v), Create: true}})
		if err == nil {
			err = p.Commit()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	views := readViews{engine: engine, budget: -1}
	defer views.close() // before the engine closes, if the test fails
	read := func(buffered int, want string) {
		t.Helper()
		got, _, err := storeRead(withReadViews(context.Background(), &views, buffered), ks, "k", 0, 10)
		if err != nil || string(got) != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	write("v1")
	read(30, "v1") // takes the views: 30 bytes of requests had arrived
	write("v2")
	views.spend(20)
	read(50, "v1") // arrived before the views were taken
	views.spend(10)
	read(50, "v1")
	views.spend(1) // past the budget: the views go
	if len(views.held) > 0 {
		t.Fatalf("%d views held past the budget", len(views.held))
	}
	read(10, "v2") // a new run: new views, of the newer state
	if len(views.held) != 1 {
		t.Fatalf("%d views held in a new run, want 1", len(views.held))
	}
	write("v3")
	views.close() // the answers left: the held views go
	read(0, "v3") // a lone request: no view
	if len(views.held) != 0 {
		t.Fatalf("a lone request took %d views", len(views.held))
	}
	dropped := make(chan error, 1)
	go func() { dropped <- engine.Drop("views") }()
	select {
	case err := <-dropped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the keyspace is still held after the views closed")
	}
}
