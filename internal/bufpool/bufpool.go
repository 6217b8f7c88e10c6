// Package bufpool lends the byte buffers of blob reads, so that a server
// answering many reads does not allocate, zero and collect a buffer for
// each: a read draws its result with Get, and whoever writes the result
// out and holds the only reference to it (the data path, once the answer
// left) gives it back with Put. A result no one gives back is collected as
// any other slice.
//
// Buffers come in classes of four sizes per power of two, so a buffer is
// at most a quarter larger than asked for; lengths of at most
// PooledBytesMin, and above PooledBytesMax, are plain allocations.
package bufpool

import (
	"math/bits"
	"sync"
)

// The lengths that are pooled: (PooledBytesMin, PooledBytesMax]. Smaller
// buffers cost little to allocate, and a class of them would waste more
// than it saves on reads that are never given back.
const (
	minShift       = 14
	maxShift       = 23
	PooledBytesMin = 1 << minShift // 16 KiB
	PooledBytesMax = 1 << maxShift // 8 MiB
)

var pools [(maxShift - minShift) * 4]sync.Pool

// class returns the pool of length n and its buffers' size; -1 for a
// length that is not pooled.
func class(n int) (int, int) {
	if n <= PooledBytesMin || n > PooledBytesMax {
		return -1, n
	}
	k := bits.Len(uint(n-1)) - 1 // 2^k < n <= 2^(k+1)
	step := 1 << (k - 2)
	sub := (n - 1 - 1<<k) / step
	return (k-minShift)*4 + sub, 1<<k + (sub+1)*step
}

// Get returns a buffer of length n. Its bytes are not zeroed: the caller
// writes every one before it reads any.
func Get(n int) []byte {
	c, size := class(n)
	if c < 0 {
		return make([]byte, n)
	}
	if p, ok := pools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, size)
}

// Put gives b back for a later Get. No one may use b afterwards: the
// caller holds the only reference to it. A slice whose capacity is no
// class's size, so not one from Get, is left to the collector.
func Put(b []byte) {
	c, size := class(cap(b))
	if c < 0 || size != cap(b) {
		return
	}
	b = b[:size]
	pools[c].Put(&b)
}
