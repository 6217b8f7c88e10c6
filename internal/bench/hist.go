package bench

import (
	"math"
	"math/bits"
	"time"
)

// Latencies are kept in a log-linear histogram rather than as a list of
// samples so that a long run with many clients uses a fixed amount of memory
// per client. Values below histLinear nanoseconds get a bucket each; above,
// every power of two is split into histSub buckets, so a bucket is never
// wider than 1/histSub of its lower bound and a percentile is off by less
// than 1%.
const (
	histSubBits = 7
	histSub     = 1 << histSubBits // buckets per power of two
	histLinear  = 2 * histSub      // values below this are exact
	histBuckets = histLinear + (64-histSubBits-1)*histSub
)

// Histogram records durations. The zero value is empty and ready to use; it
// is not safe for concurrent use, so each client keeps its own and they are
// merged at the end.
type Histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	min, max uint64
	sum      float64
}

func bucketOf(v uint64) int {
	if v < histLinear {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1
	return histLinear + (shift-1)*histSub + int(v>>uint(shift)) - histSub
}

// bucketRange returns the smallest and largest value that land in bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < histLinear {
		return uint64(i), uint64(i)
	}
	shift := uint((i-histLinear)/histSub + 1)
	lo = uint64((i-histLinear)%histSub+histSub) << shift
	return lo, lo + (1 << shift) - 1
}

// Record adds one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds all of o's durations to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of recorded durations.
func (h *Histogram) Count() uint64 { return h.n }

// Mean is the average duration, or 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100): the
// smallest recorded duration that at least p% of all durations do not
// exceed, to within the bucket width. It returns 0 when empty.
func (h *Histogram) Percentile(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if p >= 100 {
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(p / 100 * float64(h.n)))
	// The extremes are known exactly, so the ranks that name them need no
	// bucket.
	switch {
	case rank <= 1:
		return time.Duration(h.min)
	case rank >= h.n:
		return time.Duration(h.max)
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen < rank {
			continue
		}
		lo, hi := bucketRange(i)
		// The middle of the bucket halves the worst-case error; clamping to
		// the extremes keeps the answer within what was recorded.
		v := lo + (hi-lo)/2
		return time.Duration(min(max(v, h.min), h.max))
	}
	return time.Duration(h.max)
}
