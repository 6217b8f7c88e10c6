// Package testseed gives randomized tests their seed: the one in an
// environment variable when set, so a failure can be replayed, or a fresh
// one, logged either way.
package testseed

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// FromEnv returns the seed in environment variable name (TYR_SEED by
// convention), or a fresh one, and logs how to reproduce the run with it.
func FromEnv(t testing.TB, name string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(name); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (reproduce with %s=%d)", seed, name, seed)
	return seed
}
