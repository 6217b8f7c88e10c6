// Package listappend is Elle's list-append workload against tyr: clients
// run transactions of appends to and reads of small lists kept as blobs
// ("v1,v2,..."), every invocation and outcome is recorded in a history,
// and checker.CheckListAppend looks for serializability anomalies in it.
// The end-to-end and torture tests share it.
package listappend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/history"
)

// Config shapes a run.
type Config struct {
	Keyspace  string
	Processes int
	// TxnsEach is how many transactions each process runs; 0: until the
	// context ends.
	TxnsEach int
	Keys     int
	Seed     uint64
	// Deadline bounds each transaction.
	Deadline time.Duration
}

// Run runs the workload, process p through client(p), recording into rec,
// and returns once every process is done. After a transaction of unknown
// outcome, process p goes on through client(p+1), then client(p+2), ...
// (the node behind its client may be down).
func Run(ctx context.Context, cfg Config, rec *history.Recorder, client func(p int) *client.Client) {
	var wg sync.WaitGroup
	for p := range cfg.Processes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx, cfg, rec, client, p)
		}()
	}
	wg.Wait()
}

func run(ctx context.Context, cfg Config, rec *history.Recorder, clientOf func(int) *client.Client, p int) {
	c := clientOf(p)
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(p)))
	process, unknown := p, 0
	for i := 0; ctx.Err() == nil && (cfg.TxnsEach == 0 || i < cfg.TxnsEach); i++ {
		ops := make([]history.MicroOp, 1+rng.IntN(4))
		for j := range ops {
			key := Key(rng.IntN(cfg.Keys))
			if rng.IntN(2) == 0 {
				ops[j] = history.Append(key, p*1_000_000+i*10+j)
			} else {
				ops[j] = history.Read(key, nil)
			}
		}
		op := rec.Invoke(process, history.FTxn, ops)
		opCtx, cancel := context.WithTimeout(context.Background(), cfg.Deadline)
		err := Txn(opCtx, c, cfg.Keyspace, ops)
		cancel()
		switch {
		case err == nil:
			rec.Ok(op, ops)
		case errors.Is(err, client.ErrConflict):
			rec.Fail(op, ops, err)
		default:
			// Unknown outcome: the op may still take effect, so this
			// process number is never used again.
			rec.Info(op, ops, err)
			process += cfg.Processes
			// The node may be down: go through the next one, after a pause.
			unknown++
			c = clientOf(p + unknown)
			time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond)
		}
	}
}

// Key returns the name of list i, 0 <= i < Config.Keys.
func Key(i int) string { return "k" + strconv.Itoa(i) }

// Txn runs one transaction of micro-ops through c and fills in its reads.
func Txn(ctx context.Context, c *client.Client, ks string, ops []history.MicroOp) error {
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
			// No append writes -1: the checker reports the read of a
			// value never written.
			ops[i].Read = []int{garbage}
		}
	}
	return tx.Commit(ctx)
}

// garbage stands in the history for a list that does not parse.
const garbage = -1

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
