package torture

import (
	"github.com/tyrstore/tyr/internal/testseed"

	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/history"
)

// registerStore is what the register workload needs of a store: a read of
// a whole value and an atomic replacement of it.
type registerStore interface {
	// Read returns the key's content, or nil and no error if it does not
	// exist.
	Read(ctx context.Context, key string) ([]byte, error)
	// Write replaces the key's content atomically, creating the key.
	Write(ctx context.Context, key string, content []byte) error
	// Definite reports whether a failed write certainly did not take effect.
	Definite(err error) bool
}

// encodeValue makes a blob's content for a value: the value, a newline, and
// a filler that repeats the value, so a torn or mixed-up blob decodes as
// something no write wrote.
func encodeValue(value string, filler int) []byte {
	b := make([]byte, 0, len(value)+1+filler)
	b = append(b, value...)
	b = append(b, '\n')
	for len(b) < len(value)+1+filler {
		b = append(b, value[(len(b)-len(value)-1)%len(value)])
	}
	return b
}

// decodeValue inverts encodeValue; content that encodeValue could not have
// made decodes to a "corrupt:" value, which the checker reports as a read of
// a value never written.
func decodeValue(content []byte) string {
	i := bytes.IndexByte(content, '\n')
	if i > 0 && bytes.Equal(content, encodeValue(string(content[:i]), len(content)-i-1)) {
		return string(content[:i])
	}
	bad := 0
	if i > 0 {
		want := encodeValue(string(content[:i]), len(content)-i-1)
		for bad < len(content) && content[bad] == want[bad] {
			bad++
		}
	}
	return fmt.Sprintf("corrupt:%d:%q:differs at %d: %q", len(content), content[:min(len(content), 32)],
		bad, content[bad:min(len(content), bad+24)])
}

// workload runs one client's register ops against a store and records them.
type workload struct {
	rec       *history.Recorder
	store     registerStore
	keys      []string
	clients   int           // processes advance by this after an info
	deadline  time.Duration // per op
	fillerMax int
	// Counters for the report.
	ops, infos, fails atomic.Int64
}

// run issues ops as client id until ctx is done or n ops ran (n = 0: no
// limit). newStore, when set, replaces the store after an op of unknown
// outcome, so a client never waits out a connection's reconnect backoff.
func (w *workload) run(ctx context.Context, id int, r *rand.Rand, n int, store registerStore, newStore func() registerStore) {
	process := id
	for i := 0; ctx.Err() == nil && (n == 0 || i < n); i++ {
		key := w.keys[r.IntN(len(w.keys))]
		opCtx, cancel := context.WithTimeout(context.Background(), w.deadline)
		unknown := false
		if r.IntN(2) == 0 {
			value := fmt.Sprintf("%d-%d", id, i)
			filler := 0
			if w.fillerMax > 0 {
				filler = r.IntN(w.fillerMax)
			}
			op := w.rec.Invoke(process, history.FWrite, history.Register{Key: key, Value: &value})
			err := store.Write(opCtx, key, encodeValue(value, filler))
			switch {
			case err == nil:
				w.rec.Ok(op, history.Register{Key: key, Value: &value})
			case store.Definite(err):
				w.rec.Fail(op, history.Register{Key: key, Value: &value}, err)
				w.fails.Add(1)
			default:
				w.rec.Info(op, history.Register{Key: key, Value: &value}, err)
				w.infos.Add(1)
				unknown = true
			}
		} else {
			op := w.rec.Invoke(process, history.FRead, history.Register{Key: key})
			content, err := store.Read(opCtx, key)
			if err != nil {
				// A read changes nothing, so a read that errs failed.
				w.rec.Fail(op, history.Register{Key: key}, err)
				w.fails.Add(1)
				unknown = !store.Definite(err)
			} else {
				var got *string
				if content != nil {
					got = history.Str(decodeValue(content))
				}
				w.rec.Ok(op, history.Register{Key: key, Value: got})
			}
		}
		cancel()
		w.ops.Add(1)
		if unknown {
			// The op may still take effect: Elle requires a new process.
			process += w.clients
			if newStore != nil {
				store = newStore()
			}
			time.Sleep(time.Duration(20+r.IntN(80)) * time.Millisecond)
		}
	}
}

// seedFromEnv returns TYR_TORTURE_SEED, or a fresh seed, and prints it.
func seedFromEnv(t *testing.T) uint64 { return testseed.FromEnv(t, "TYR_TORTURE_SEED") }
