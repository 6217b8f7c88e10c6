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
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/checker"
	"github.com/tyrstore/tyr/internal/history"
	"github.com/tyrstore/tyr/internal/testserver"
)

// decodeList parses a blob holding "v1,v2,...," into its values.
func decodeList(b []byte) ([]int, error) {
	list := []int{}
	for _, field := range bytes.Split(b, []byte{','}) {
		if len(field) == 0 {
			continue
		}
		v, err := strconv.Atoi(string(field))
		if err != nil {
			return nil, fmt.Errorf("list element %q: %w", field, err)
		}
		list = append(list, v)
	}
	return list, nil
}

// runListAppendTxn runs one transaction of micro-ops and fills in its reads.
func runListAppendTxn(ctx context.Context, c *client.Client, ks string, ops []history.MicroOp) error {
	tx := c.Begin(ks)
	for i, op := range ops {
		if op.F == history.FAppend {
			tx.Append(op.Key, []byte(strconv.Itoa(op.Value)+","))
			continue
		}
		size, err := tx.Size(ctx, op.Key)
		if errors.Is(err, client.ErrNotFound) {
			ops[i].Read = []int{}
			continue
		}
		if err != nil {
			tx.Rollback()
			return err
		}
		data, err := tx.Read(ctx, op.Key, 0, size)
		if err != nil {
			tx.Rollback()
			return err
		}
		if ops[i].Read, err = decodeList(data); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit(ctx)
}

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
	var wg sync.WaitGroup
	for p := 0; p < listAppendProcesses; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(p)))
			process := p
			for i := 0; i < listAppendTxnsEach; i++ {
				ops := make([]history.MicroOp, 1+rng.IntN(4))
				for j := range ops {
					key := "k" + strconv.Itoa(rng.IntN(listAppendKeys))
					if rng.IntN(2) == 0 {
						ops[j] = history.Append(key, p*1_000_000+i*10+j)
					} else {
						ops[j] = history.Read(key, nil)
					}
				}
				op := rec.Invoke(process, history.FTxn, ops)
				opCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := runListAppendTxn(opCtx, c, ks, ops)
				cancel()
				switch {
				case err == nil:
					rec.Ok(op, ops)
				case errors.Is(err, client.ErrConflict):
					rec.Fail(op, ops, err)
				default:
					// Unknown outcome: the op may still take effect, so
					// this process number is never used again.
					rec.Info(op, ops, err)
					process += listAppendProcesses
				}
			}
		}(p)
	}
	wg.Wait()
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	events, err := history.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	completed, err := history.Pair(events)
	if err != nil {
		t.Fatal(err)
	}
	return checker.CheckListAppend(completed), path
}
