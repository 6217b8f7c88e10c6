package ring

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkReplicas measures one placement lookup (hash the chunk, binary
// search the tokens, walk to rf distinct nodes) over ring sizes and
// replication factors, both allocating (Replicas) and reusing a slice
// (AppendReplicas). Run with:
//
//	go test ./internal/ring -run '^$' -bench BenchmarkReplicas -benchmem
func BenchmarkReplicas(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	sample := randomPlacements(rng, 1024)
	for _, nodes := range []int{1, 16, 256} {
		r := mustNew(b, Config{}, 1, numberedNodes("node-", nodes, 1))
		for _, rf := range []int{1, 3} {
			if rf > nodes {
				continue
			}
			b.Run(fmt.Sprintf("nodes=%d/rf=%d/alloc", nodes, rf), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					p := sample[i%len(sample)]
					if _, err := r.Replicas(p.Seed, p.Key, p.Chunk, rf); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run(fmt.Sprintf("nodes=%d/rf=%d/append", nodes, rf), func(b *testing.B) {
				b.ReportAllocs()
				dst := make([]NodeID, 0, rf)
				i := 0
				for b.Loop() {
					p := sample[i%len(sample)]
					var err error
					if dst, err = r.AppendReplicas(dst[:0], p.Seed, p.Key, p.Chunk, rf); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkNew measures building a ring: hashing and sorting every token.
func BenchmarkNew(b *testing.B) {
	for _, nodes := range []int{16, 256} {
		members := numberedNodes("node-", nodes, 1)
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(Config{}, 1, members); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
