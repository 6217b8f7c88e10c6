package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
)

// The isolation workload asks whether writers slow readers down. Of
// --read-keys keys, the first half is preloaded with values and read, by a
// power law, by the readers; the other half is created empty and written,
// at random, by the writers, so that readers and writers share the server
// but no blob. For each client count N it measures:
//
//   - every client reading (the read-only run of N clients);
//   - for each reader share (95, 75, 50, 25 and 5 % of N by default): the
//     readers alone, then the readers and the writers together.
//
// Each mix's per-reader throughput (its readers' operations per second
// over the readers) is reported relative to the readers alone, measured
// just before it (IsolationRatio), and relative to the read-only run of N
// clients (AllReadRatio). 1.0 means the writers cost the readers nothing.

// IsolationShares are the default mixes: the percentage of the clients
// that read, the others writing.
var IsolationShares = []int{95, 75, 50, 25, 5}

// IsolationWorkload names the isolation workload's results.
const IsolationWorkload = "isolation"

func (c *Config) validateIsolation() []error {
	var problems []error
	if len(c.ReaderShares) == 0 {
		problems = append(problems, fmt.Errorf("--reader-shares: need at least one, e.g. %v", IsolationShares))
	}
	for _, s := range c.ReaderShares {
		if s < 1 || s > 99 {
			problems = append(problems, fmt.Errorf("--reader-shares %d: must be in [1, 99] (percent of the clients)", s))
		}
	}
	for _, n := range c.Clients {
		if n < 2 {
			problems = append(problems, fmt.Errorf("--clients %d: isolation needs at least 2, a reader and a writer", n))
		}
	}
	if c.ReadKeys < 2 {
		problems = append(problems, fmt.Errorf("--read-keys %d: isolation needs at least 2, half read, half written",
			c.ReadKeys))
	}
	return problems
}

// isolationSplit divides n clients into readers, share percent of them
// rounded to the nearest, and writers, keeping at least one of each.
func isolationSplit(n, share int) (readers, writers int) {
	readers = int(math.Round(float64(n) * float64(share) / 100))
	readers = min(max(readers, 1), n-1)
	return readers, n - readers
}

// isolationKeys returns the keys the readers read, preloaded, and those
// the writers write: the first and the second half of n keys.
func isolationKeys(n int) (reads, writes []string) {
	for i := range n / 2 {
		reads = append(reads, readKey(i))
	}
	for i := range n - n/2 {
		writes = append(writes, isolationWriteKey(i))
	}
	return reads, writes
}

func isolationWriteKey(i int) string { return fmt.Sprintf("w%d", i) }

// perReader is the readers' operations per second, each.
func perReader(r Result) float64 {
	if r.Readers == 0 {
		return 0
	}
	return r.ReaderOpsPerS / float64(r.Readers)
}

// setIsolation records mix's per-reader throughput against that of the
// same readers alone (readOnly) and of every client reading (allRead).
// A ratio whose baseline read nothing is left at 0, unmeasured.
func (r *Result) setIsolation(readOnly, allRead Result) {
	r.PerReaderOpsPerS = round(perReader(*r), 1)
	r.ReadOnlyPerReaderOpsPerS = round(perReader(readOnly), 1)
	r.AllReadPerReaderOpsPerS = round(perReader(allRead), 1)
	r.IsolationRatio, r.AllReadRatio = 0, 0
	if b := perReader(readOnly); b > 0 {
		r.IsolationRatio = round(perReader(*r)/b, 3)
	}
	if b := perReader(allRead); b > 0 {
		r.AllReadRatio = round(perReader(*r)/b, 3)
	}
}

func runIsolation(ctx context.Context, cfg *Config, systems []system, emit func(Result) error) error {
	reads, writes := isolationKeys(cfg.ReadKeys)
	value := make([]byte, cfg.ValueSize)
	fillRandom(rand.New(rand.NewPCG(cfg.Seed, 0)), value)
	for _, s := range systems {
		cfg.progress("%s: preloading %d keys of %d bytes, creating %d to write", s.Name(), len(reads),
			cfg.ValueSize, len(writes))
		if err := s.(readSystem).Preload(ctx, reads, value); err != nil {
			return fmt.Errorf("%s: preloading: %w", s.Name(), err)
		}
		if err := s.(writeSystem).Create(ctx, writes); err != nil {
			return fmt.Errorf("%s: creating keys: %w", s.Name(), err)
		}
	}
	ic := *cfg
	ic.Workload = IsolationWorkload
	read := readOp(&ic, len(reads))
	write := func(ctx context.Context, c conn, _ int, rng *rand.Rand, value []byte) (int, error) {
		return len(value), c.(putConn).Put(ctx, writes[rng.IntN(len(writes))], value)
	}
	for _, n := range cfg.Clients {
		for _, s := range systems {
			allRead, err := measureMix(ctx, &ic, s, RoleAllRead, n, 0, read, write)
			if err != nil {
				return err
			}
			if err := emit(allRead); err != nil {
				return err
			}
			for _, share := range cfg.ReaderShares {
				readers, writers := isolationSplit(n, share)
				alone, err := measureMix(ctx, &ic, s, RoleReadersAlone, readers, 0, read, write)
				if err != nil {
					return err
				}
				if err := emit(alone); err != nil {
					return err
				}
				mix, err := measureMix(ctx, &ic, s, RoleMix, readers, writers, read, write)
				if err != nil {
					return err
				}
				mix.setIsolation(alone, allRead)
				if err := emit(mix); err != nil {
					return err
				}
			}
		}
	}
	return ctx.Err()
}

// measureMix runs readers clients reading and writers writing for
// cfg.Duration, and returns the whole as one result of role with the
// readers' and writers' successful operations apart.
func measureMix(ctx context.Context, cfg *Config, s system, role string, readers, writers int, read, write opFunc) (Result, error) {
	cfg.progress("%s: isolation, %d readers and %d writers for %s", s.Name(), readers, writers, cfg.Duration)
	var readOps, writeOps atomic.Uint64
	op := func(ctx context.Context, c conn, client int, rng *rand.Rand, value []byte) (int, error) {
		if client < readers {
			m, err := read(ctx, c, client, rng, value)
			if err == nil {
				readOps.Add(1)
			}
			return m, err
		}
		m, err := write(ctx, c, client, rng, value)
		if err == nil {
			writeOps.Add(1)
		}
		return m, err
	}
	r, err := timed(ctx, cfg, s, readers+writers, op)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", s.Name(), err)
	}
	r.Role, r.Readers, r.Writers = role, readers, writers
	if r.Seconds > 0 {
		r.ReaderOpsPerS = round(float64(readOps.Load())/r.Seconds, 1)
		r.WriterOpsPerS = round(float64(writeOps.Load())/r.Seconds, 1)
	}
	r.describe(s, cfg.Workload)
	return r, nil
}

// The roles of the isolation workload's measurements (Result.Role).
const (
	RoleAllRead      = "all-read"      // every client reads
	RoleReadersAlone = "readers-alone" // a mix's readers, without its writers
	RoleMix          = "mix"           // readers and writers together
)

// isolationRows returns the isolation results of system, in order: the
// read-only runs of every client and the mixes, without the readers-alone
// runs, which each mix's ratio already holds.
func isolationRows(results []Result, system string) []Result {
	return slices.DeleteFunc(slices.Clone(results), func(r Result) bool {
		return r.Workload != IsolationWorkload || r.System != system || r.Role == RoleReadersAlone
	})
}
