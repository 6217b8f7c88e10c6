package torture

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/checker"
	"github.com/tyrstore/tyr/internal/history"
	"github.com/tyrstore/tyr/internal/testserver"
)

// The counter workload: processes add 1 to one 8-byte counter with atomic
// ops, which the version managers order instead of refusing (see
// "Ordering" in internal/mvcc/order.go), while the nemesis runs. Each add
// returns the counter's new value, its place in the order the adds were
// applied in. Afterwards:
//
//   - the counter is at least the adds acknowledged and at most those plus
//     the adds whose outcome is unknown: none lost, none applied twice;
//   - the values the acknowledged adds returned are distinct and at most
//     the counter: no two adds were applied on the same value.
const (
	counterKey       = "counter"
	counterProcesses = 4
	// counterDeadline bounds one add, retries and outcome resolution
	// included (the Go client resolves a lost answer for up to 30 s).
	counterDeadline = 45 * time.Second
	// counterRetryPause spaces the tries of one add refused as unavailable.
	counterRetryPause = 200 * time.Millisecond
)

// counterAdd is one acknowledged add: the value it returned, and which
// process made it when, for the report of a failed check.
type counterAdd struct {
	value      uint64
	process    int
	start, end time.Duration
}

// counterResult is what the counter workload saw.
type counterResult struct {
	done     chan struct{} // closed when every process stopped
	mu       sync.Mutex
	returned []counterAdd // the acknowledged adds
	refused  int          // adds that certainly did not apply
	unknown  int          // adds whose outcome is unknown
	began    time.Time
	spans    []checker.Span // every add, in nanoseconds from began
}

// runCounter creates the counter and adds to it from counterProcesses
// processes, process p through clientOf(p), until ctx ends.
func runCounter(ctx context.Context, t *testing.T, clientOf func(p int) *client.Client) *counterResult {
	t.Helper()
	testserver.Eventually(t, 15*time.Second, "the counter created", func() (bool, string) {
		_, err := clientOf(0).WriteCreate(ctx, txnKeyspace, counterKey, 0, make([]byte, 8))
		return err == nil, fmt.Sprint(err)
	})
	began := time.Now()
	res := &counterResult{done: make(chan struct{}), began: began}
	var wg sync.WaitGroup
	for p := range counterProcesses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clientOf(p)
			for ctx.Err() == nil {
				start := time.Since(began)
				v, err := addOnce(c)
				end := time.Since(began)
				res.mu.Lock()
				span := checker.Span{Call: start.Nanoseconds(), Return: end.Nanoseconds(), Type: history.OK}
				switch {
				case err == nil:
					res.returned = append(res.returned, counterAdd{v, p, start, end})
				case blobStore{}.Definite(err):
					res.refused++
					span.Type, span.Error = history.Fail, err.Error()
				default:
					res.unknown++
					span.Type, span.Error = history.Info, err.Error()
				}
				res.spans = append(res.spans, span)
				res.mu.Unlock()
			}
		}()
	}
	go func() {
		wg.Wait()
		close(res.done)
	}()
	return res
}

// addOnce adds 1 to the counter through c, as a client that retries
// would: a try refused for certain as unavailable (its node cut off, or
// catching up) is tried again, counterRetryPause apart, until
// counterDeadline has passed since the first; so one add waits through a
// fault instead of ending in thousands of instant refusals that would
// swamp the progress counts. It returns the last try's outcome.
func addOnce(c *client.Client) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), counterDeadline)
	defer cancel()
	for {
		v, err := c.Atomic(ctx, txnKeyspace, counterKey, 0, 8, client.FuncAdd, 1)
		if err == nil || !client.Refused(err) || !errors.Is(err, client.ErrUnavailable) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(counterRetryPause):
		}
	}
}

// check reads the counter through c, once the cluster answers, and checks
// it against what the processes saw (see the top of this file).
func (r *counterResult) check(t *testing.T, c *client.Client) {
	t.Helper()
	<-r.done
	var value uint64
	testserver.Eventually(t, caughtUpMax, "a read of the counter", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		data, err := c.Read(ctx, txnKeyspace, counterKey, 0, 8)
		if err != nil || len(data) != 8 {
			return false, fmt.Sprintf("%d bytes, %v", len(data), err)
		}
		value = binary.LittleEndian.Uint64(data)
		return true, ""
	})
	acked := uint64(len(r.returned))
	t.Logf("counter: %d adds acknowledged, %d refused, %d unknown; counter at %d", acked, r.refused, r.unknown, value)
	if acked == 0 {
		t.Errorf("counter: no add acknowledged")
	}
	if value < acked || value > acked+uint64(r.unknown) {
		t.Errorf("counter at %d, want %d acknowledged adds plus at most %d unknown", value, acked, r.unknown)
	}
	returned := slices.SortedFunc(slices.Values(r.returned), func(a, b counterAdd) int { return cmp.Compare(a.value, b.value) })
	for i := 1; i < len(returned); i++ {
		if a, b := returned[i-1], returned[i]; a.value == b.value {
			t.Errorf("counter: two acknowledged adds both returned %d: process %d from %v to %v, process %d from %v to %v",
				a.value, a.process, a.start, a.end, b.process, b.start, b.end)
		}
	}
	if n := len(returned); n > 0 && (returned[0].value == 0 || returned[n-1].value > value) {
		t.Errorf("counter: acknowledged adds returned values from %d to %d, want within 1..%d", returned[0].value, returned[n-1].value, value)
	}
}
