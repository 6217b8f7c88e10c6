package bench

import (
	"math"
	"math/rand/v2"
	"sort"
)

// powerLaw picks ranks in [0, n) with probability proportional to
// 1/(rank+1)^s: rank 0 is the most popular, rank 1 is 2^s times less, and so
// on. The seeds query MonALISA's aggregates this way to raise read
// concurrency on the popular ones. Unlike math/rand's Zipf it accepts any
// exponent s >= 0, including the classic s = 1.
type powerLaw struct {
	cdf []float64 // cdf[k]: the weight of ranks 0..k, cdf[n-1] = 1
}

func newPowerLaw(n int, s float64) *powerLaw {
	cdf := make([]float64, n)
	total := 0.0
	for k := range n {
		total += math.Pow(float64(k+1), -s)
		cdf[k] = total
	}
	for k := range cdf {
		cdf[k] /= total
	}
	cdf[n-1] = 1 // no rounding gap above the last rank
	return &powerLaw{cdf: cdf}
}

// pick returns a rank. It is safe for concurrent use with distinct rngs.
func (p *powerLaw) pick(rng *rand.Rand) int {
	u := rng.Float64()
	return sort.Search(len(p.cdf), func(k int) bool { return p.cdf[k] > u })
}
