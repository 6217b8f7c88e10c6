package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
)

// ObjectSizes are the object workload's default sizes.
var ObjectSizes = []int64{4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}

// ObjectBytesMax bounds an object of the workload.
const ObjectBytesMax = 256 << 20

// ObjectWorkloads names the results of the object workload for objects of
// size bytes: put-4KiB and get-4KiB, say.
func ObjectWorkloads(size int64) (put, get string) {
	return "put-" + sizeLabel(size), "get-" + sizeLabel(size)
}

func objectKey(client int) string { return fmt.Sprintf("o%d", client) }

// runObject measures, for each size, each client putting whole objects of
// its own, then each client getting them back, at each client count on
// each system in turn. A get checks the object's size and its first bytes,
// which its client's last put wrote.
func runObject(ctx context.Context, cfg *Config, systems []system, emit func(Result) error) error {
	keys := make([]string, slices.Max(cfg.Clients))
	for i := range keys {
		keys[i] = objectKey(i)
	}
	for _, s := range systems {
		if err := s.(objectSystem).Create(ctx, keys); err != nil {
			return fmt.Errorf("%s: creating objects: %w", s.Name(), err)
		}
	}
	for _, size := range cfg.ObjectSizes {
		put, get := ObjectWorkloads(size)
		oc := *cfg
		oc.ValueSize = int(size)
		for _, n := range cfg.Clients {
			for _, s := range systems {
				// timed gives each client the same value in both phases:
				// its random bytes depend on the client only.
				for _, phase := range []struct {
					name string
					op   opFunc
				}{{put, putObject}, {get, getObject}} {
					oc.Workload = phase.name
					cfg.progress("%s: %s with %d clients for %s", s.Name(), phase.name, n, cfg.Duration)
					r, err := timed(ctx, &oc, s, n, phase.op)
					if err != nil {
						return fmt.Errorf("%s: %s: %w", s.Name(), phase.name, err)
					}
					r.describe(s, "object")
					if err := emit(r); err != nil {
						return err
					}
				}
			}
		}
	}
	return ctx.Err()
}

func putObject(ctx context.Context, c conn, client int, _ *rand.Rand, value []byte) (int, error) {
	return len(value), c.(objectConn).PutObject(ctx, objectKey(client), value)
}

func getObject(ctx context.Context, c conn, client int, _ *rand.Rand, value []byte) (int, error) {
	data, err := c.(objectConn).GetObject(ctx, objectKey(client), len(value))
	if err != nil {
		return 0, err
	}
	// Both ends, so that a wrong object, a short one and a mix of parts
	// of two puts are caught without comparing every byte of a large one.
	k := min(4<<10, len(value))
	if len(data) != len(value) || !bytes.Equal(data[:k], value[:k]) || !bytes.Equal(data[len(data)-k:], value[len(value)-k:]) {
		return 0, fmt.Errorf("object %s: %d bytes read, not the %d its client put", objectKey(client), len(data), len(value))
	}
	return len(data), nil
}
