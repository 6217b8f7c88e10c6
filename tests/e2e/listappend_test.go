package e2e

// Transactions are serializable, shown by a checker over a recorded history:
// concurrent clients run list-append transactions (Elle's workload) through
// client transactions against a real server, every invocation and outcome is
// recorded, and checker.CheckListAppend builds the ww/wr/rw dependency graph
// and looks for cycles (G0, G1c, G-single, G2) and G1a/G1b reads. The
// history file's path is logged.
//
// Reproduce: TYR_SEED=<seed> go test ./tests/e2e -run TestListAppendSerializable -v

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/checker"
	"github.com/tyrstore/tyr/internal/history"
	"github.com/tyrstore/tyr/internal/listappend"
	"github.com/tyrstore/tyr/internal/testserver"
)

func TestListAppendSerializable(t *testing.T) {
	seed := seedFromEnv(t)
	result, path := runListAppend(t, testserver.Start(t), seed)
	t.Logf("seed %d; history %s: %s", seed, path, result)
	if !result.Valid() {
		keep := filepath.Join(os.TempDir(), fmt.Sprintf("tyr-listappend-%d.jsonl", seed))
		if b, err := os.ReadFile(path); err == nil {
			_ = os.WriteFile(keep, b, 0o644)
		}
		t.Fatalf("seed %d: not serializable: %s (history kept at %s); first anomaly: %+v", seed, result, keep, result.Anomalies[0])
	}
	if result.OK < listAppendProcesses*listAppendTxnsEach/4 || result.Fail == 0 {
		t.Fatalf("seed %d: a weak history proves little: %s", seed, result)
	}
}

// TestCheckerCatchesSkippedValidation runs the same workload against a
// server built with tyr_broken_skip_read_checks, whose commits skip the
// read validation; the checker must report anomalies, which shows the
// serializable verdict above is not vacuous.
func TestCheckerCatchesSkippedValidation(t *testing.T) {
	seed := seedFromEnv(t)
	result, path := runListAppend(t, testserver.StartTagged(t, "tyr_broken_skip_read_checks"), seed)
	t.Logf("seed %d; history %s: %s", seed, path, result)
	if result.Valid() {
		t.Fatalf("seed %d: the checker found nothing wrong with a server that skips read validation: %s", seed, result)
	}
}

const listAppendProcesses, listAppendTxnsEach, listAppendKeys = 8, 120, 5

// runListAppend runs the list-append workload against srv, records it and
// checks it.
func runListAppend(t *testing.T, srv *testserver.Server, seed uint64) (checker.ListAppendResult, string) {
	t.Helper()
	c := srv.Client()
	ctx := context.Background()
	const ks = "listappend"
	if _, err := c.CreateKeyspace(ctx, ks, client.KeyspaceConfig{ChunkSize: 4096, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "listappend.jsonl")
	rec, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	listappend.Run(ctx, listappend.Config{Keyspace: ks, Processes: listAppendProcesses, TxnsEach: listAppendTxnsEach,
		Keys: listAppendKeys, Seed: seed, Deadline: 10 * time.Second}, rec, func(int) *client.Client { return c })
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	completed, err := history.LoadPairs(path)
	if err != nil {
		t.Fatal(err)
	}
	return checker.CheckListAppend(completed), path
}
