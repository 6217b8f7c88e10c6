package torture

// TestCheckerCatchesStaleReads proves the torture test's checking has
// teeth: the same register workload runs against an in-process store that
// now and then answers a read with the value its key held before the last
// write, and the checker must call the history nonlinearizable. A store that
// never lies must pass the same check, so the failure is the bug's doing.
//
// Reproduce with TYR_TORTURE_SEED=<seed> go test -run TestCheckerCatches -v ./tests/torture.

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/checker"
	"github.com/tyrstore/tyr/internal/history"
)

// fakeStore is an in-memory register store that, with probability stale,
// returns a key's previous content instead of its current one, as a replica
// that missed the last write would.
type fakeStore struct {
	mu    sync.Mutex
	r     *rand.Rand
	stale float64
	cur   map[string][]byte
	prev  map[string][]byte
	lies  int
}

func (s *fakeStore) Read(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.prev[key]; ok && s.r.Float64() < s.stale {
		s.lies++
		return bytes.Clone(p), nil
	}
	return bytes.Clone(s.cur[key]), nil
}

func (s *fakeStore) Write(_ context.Context, key string, content []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cur[key]; ok {
		s.prev[key] = c
	}
	s.cur[key] = bytes.Clone(content)
	return nil
}

func (*fakeStore) Definite(error) bool { return true }

// runFake runs the register workload against a fake store and checks it.
func runFake(t *testing.T, seed uint64, stale float64) (checker.RegisterResult, int) {
	t.Helper()
	var buf bytes.Buffer
	rec := history.NewRecorder(&buf)
	store := &fakeStore{r: rand.New(rand.NewPCG(seed, 99)), stale: stale, cur: map[string][]byte{}, prev: map[string][]byte{}}
	w := &workload{rec: rec, store: store, keys: []string{"a", "b"}, clients: 4, deadline: time.Second, fillerMax: 64}
	var wg sync.WaitGroup
	for id := 0; id < 4; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(context.Background(), id, rand.New(rand.NewPCG(seed, uint64(id+1))), 500, store, nil)
		}()
	}
	wg.Wait()
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	events, err := history.Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := history.Pair(events)
	if err != nil {
		t.Fatal(err)
	}
	return checker.CheckRegister(ops, checker.RegisterOptions{Timeout: time.Minute}), store.lies
}

func TestCheckerCatchesStaleReads(t *testing.T) {
	seed := seedFromEnv(t)
	if res, _ := runFake(t, seed, 0); !res.Valid() {
		t.Fatalf("a correct store was reported: %v", res.Anomalies)
	}
	res, lies := runFake(t, seed, 0.05)
	t.Logf("%d stale reads served; verdict: %v", lies, res)
	kinds := map[string]int{}
	for _, a := range res.Anomalies {
		kinds[a.Kind]++
	}
	if kinds["nonlinearizable"] == 0 {
		t.Fatalf("seed %d: a store serving stale reads passed the linearizability check: %v", seed, res)
	}
	t.Logf("anomalies by kind: %v", kinds)
}
