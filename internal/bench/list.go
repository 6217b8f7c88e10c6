package bench

// The list workload: each system stores two flat prefixes of empty
// objects, a small one of ListSmallKeys keys and a large one of
// cfg.ListKeys keys, then each client lists pages of ListPageKeys keys
// starting after a random key of one prefix. A page's cost should not grow
// with its prefix: the results list-1000 and list-1000000 (say) side by
// side show whether it does.

import (
	"context"
	"fmt"
	"math/rand/v2"

	"golang.org/x/sync/errgroup"
)

const (
	// ListPageKeys is the keys of one listed page: S3's largest page.
	ListPageKeys = 1000
	// ListSmallKeys is the keys of the small prefix.
	ListSmallKeys = 1000
	// ListKeysMax bounds --list-keys.
	ListKeysMax = 10_000_000
	// fillWorkers is how many batches a fill stores at once.
	fillWorkers = 4
)

// ListWorkload names the results of listing a prefix of keys keys.
func ListWorkload(keys int) string { return fmt.Sprintf("list-%d", keys) }

// listKey is key i of a prefix: fixed-width, so key order is index order.
func listKey(prefix string, i int) string { return fmt.Sprintf("%s%08d", prefix, i) }

// listSystem runs the list workload: Fill stores n empty objects under
// prefix, listKey(prefix, 0) to listKey(prefix, n-1), and its conns are
// listConns.
type listSystem interface {
	system
	Fill(ctx context.Context, prefix string, n int) error
}

// listConn lists the keys under prefix after after, at most max of them,
// in key order.
type listConn interface {
	ListPage(ctx context.Context, prefix, after string, max int) ([]string, error)
}

func runList(ctx context.Context, cfg *Config, systems []system, emit func(Result) error) error {
	sets := []struct {
		prefix string
		keys   int
	}{{"small/", ListSmallKeys}, {"large/", cfg.ListKeys}}
	for _, s := range systems {
		for _, set := range sets {
			cfg.progress("%s: storing %d objects under %s", s.Name(), set.keys, set.prefix)
			if err := s.(listSystem).Fill(ctx, set.prefix, set.keys); err != nil {
				return fmt.Errorf("%s: storing objects: %w", s.Name(), err)
			}
		}
	}
	for _, n := range cfg.Clients {
		for _, set := range sets {
			lc := *cfg
			lc.Workload, lc.ValueSize = ListWorkload(set.keys), 0
			for _, s := range systems {
				cfg.progress("%s: %s with %d clients for %s", s.Name(), lc.Workload, n, cfg.Duration)
				r, err := timed(ctx, &lc, s, n, listPage(set.prefix, set.keys))
				if err != nil {
					return fmt.Errorf("%s: %s: %w", s.Name(), lc.Workload, err)
				}
				r.describe(s, "list")
				if err := emit(r); err != nil {
					return err
				}
			}
		}
	}
	return ctx.Err()
}

// listPage lists one page starting at a random key of the prefix, so that
// every page is full, and checks its first and last keys.
func listPage(prefix string, keys int) opFunc {
	return func(ctx context.Context, c conn, _ int, rng *rand.Rand, _ []byte) (int, error) {
		first := rng.IntN(keys - ListPageKeys + 1)
		after := ""
		if first > 0 {
			after = listKey(prefix, first-1)
		}
		got, err := c.(listConn).ListPage(ctx, prefix, after, ListPageKeys)
		if err != nil {
			return 0, err
		}
		last := first + ListPageKeys - 1
		if len(got) != ListPageKeys || got[0] != listKey(prefix, first) || got[len(got)-1] != listKey(prefix, last) {
			return 0, fmt.Errorf("listing %s after %q: %d keys, not the %d from %s to %s",
				prefix, after, len(got), ListPageKeys, listKey(prefix, first), listKey(prefix, last))
		}
		return 0, nil
	}
}

// fillBatches stores the n keys of prefix through store, in batches of
// per keys, workers batches at once.
func fillBatches(ctx context.Context, prefix string, n, per, workers int, store func(ctx context.Context, keys []string) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for lo := 0; lo < n; lo += per {
		keys := make([]string, 0, min(per, n-lo))
		for i := lo; i < min(lo+per, n); i++ {
			keys = append(keys, listKey(prefix, i))
		}
		g.Go(func() error { return store(gctx, keys) })
	}
	return g.Wait()
}
