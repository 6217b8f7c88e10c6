// Tests of what a node reports about its own load (usage.go). They prove
// that the operation rate counts whole seconds of a bounded window and no
// time before the server started, that only data-path calls are counted,
// and that NodeUsage reports the configured or measured capacity and the
// bytes the keyspaces occupy. They use no network and are deterministic
// except for TestNodeUsage's byte counts, which it only bounds below; run
// one with go test ./internal/server -run 'TestOpsRate|TestNodeUsage' -v.
package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/storage"
)

// at returns the time sec seconds and ms milliseconds after the epoch.
func at(sec int64, ms int64) time.Time { return time.Unix(sec, ms*int64(time.Millisecond)) }

func TestOpsRate_window(t *testing.T) {
	r := newOpsRate(at(1000, 500))
	if rate, span := r.rate(at(1000, 900)); rate != 0 || span != 0 {
		t.Fatalf("before a whole second: %v over %v, want 0 over 0", rate, span)
	}
	for range 3 {
		r.add(at(1000, 600))
	}
	r.add(at(1001, 200))
	r.add(at(1001, 300))
	// Second 1000 counts from the start (half a second); second 1001 is
	// in progress and does not count yet.
	if rate, span := r.rate(at(1001, 900)); rate != 6 || span != 500*time.Millisecond {
		t.Fatalf("at 1001.9: %v over %v, want 6 over 0.5s", rate, span)
	}
	if rate, span := r.rate(at(1002, 0)); math.Abs(rate-5/1.5) > 1e-9 || span != 1500*time.Millisecond {
		t.Fatalf("at 1002.0: %v over %v, want 3.33 over 1.5s", rate, span)
	}
	// Once the window has passed them, the operations no longer count.
	if rate, span := r.rate(at(1062, 0)); rate != 0 || span != OpsRateWindow {
		t.Fatalf("at 1062.0: %v over %v, want 0 over %v", rate, span, OpsRateWindow)
	}
	// A steady 10 operations per second, with the second in progress busy
	// too: exactly 10 over the full window.
	for sec := int64(1100); sec < 1300; sec++ {
		for range 10 {
			r.add(at(sec, 100))
		}
	}
	r.add(at(1300, 0))
	if rate, span := r.rate(at(1300, 999)); rate != 10 || span != OpsRateWindow {
		t.Fatalf("steady: %v over %v, want 10 over %v", rate, span, OpsRateWindow)
	}
}

func TestOpsRate_clockStepsBack(t *testing.T) {
	r := newOpsRate(at(0, 0))
	r.add(at(100, 0))
	r.add(at(100-opsRateBuckets-1, 0)) // the same bucket, an older second: dropped
	if rate, _ := r.rate(at(101, 0)); rate != 1.0/opsRateBuckets {
		t.Fatalf("rate %v, want one operation over the window", rate)
	}
}

// newUsageService returns a Service over an engine in a temporary
// directory, with a keyspace "usage", and the engine.
func newUsageService(t *testing.T) (*Service, *storage.Engine) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := storage.Open(storage.Options{Dir: t.TempDir(), CacheBytes: 8 << 20, MemTableBytes: 1 << 20, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.Close() })
	if _, err := engine.Create("usage", keyspace.Config{ChunkBytes: 4096, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	return NewService(engine, log), engine
}

func TestNodeUsage(t *testing.T) {
	svc, engine := newUsageService(t)
	ctx := context.Background()
	empty, err := svc.NodeUsage(ctx, &tyrpb.NodeUsageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if empty.GetCapacityConfigured() || empty.GetCapacityBytes() == 0 {
		t.Errorf("measured capacity: %d bytes, configured %v; want a positive measure", empty.GetCapacityBytes(), empty.GetCapacityConfigured())
	}
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	_, err = svc.Commit(ctx, &tyrpb.CommitRequest{Keyspace: []byte("usage"), Ops: []*tyrpb.Op{{Key: []byte("blob"),
		Kind: &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Data: data, Create: true}}}}})
	if err != nil {
		t.Fatal(err)
	}
	svc.WithCapacity(64 << 20)
	got, err := svc.NodeUsage(ctx, &tyrpb.NodeUsageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetCapacityBytes() != 64<<20 || !got.GetCapacityConfigured() {
		t.Errorf("capacity %d, configured %v; want %d, true", got.GetCapacityBytes(), got.GetCapacityConfigured(), 64<<20)
	}
	if got.GetStoredBytes() < uint64(len(data)) || got.GetStoredBytes() <= empty.GetStoredBytes() {
		t.Errorf("stored %d bytes after writing %d (%d before)", got.GetStoredBytes(), len(data), empty.GetStoredBytes())
	}
	if got.GetNodeId() != "" || got.GetOpsPerSecond() != 0 {
		t.Errorf("without cluster or interceptor: node %q, %v ops/s; want none", got.GetNodeId(), got.GetOpsPerSecond())
	}

	if err := engine.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.NodeUsage(ctx, &tyrpb.NodeUsageRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("closed storage: %v, want Unavailable", err)
	}
}

func TestCountOps_dataPathOnly(t *testing.T) {
	svc, _ := newUsageService(t)
	count := svc.countOps()
	handler := func(context.Context, any) (any, error) { return nil, errors.New("refused") }
	for _, method := range []string{tyrpb.Tyr_Read_FullMethodName, tyrpb.Tyr_Commit_FullMethodName,
		tyrpb.Tyr_Stat_FullMethodName, tyrpb.Tyr_List_FullMethodName, tyrpb.Tyr_NodeUsage_FullMethodName,
		tyrpb.Tyr_ClusterStatus_FullMethodName, tyrpb.Tyr_CreateKeyspace_FullMethodName, "/tyr.peer.v1.Peer/Deliver"} {
		if _, err := count(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, handler); err == nil {
			t.Fatal("the handler's error was lost")
		}
	}
	// Four data-path calls in the current second, counted once it is over.
	now := time.Now()
	later := now.Add(time.Second)
	rate, span := svc.ops.rate(later)
	if want := 4 / span.Seconds(); span <= 0 || math.Abs(rate-want) > 1e-9 {
		t.Errorf("rate %v over %v, want 4 operations (%v/s)", rate, span, want)
	}
}
