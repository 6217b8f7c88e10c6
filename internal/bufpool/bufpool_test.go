package bufpool

import "testing"

func TestClasses(t *testing.T) {
	prev := 0
	for n := PooledBytesMin + 1; n <= PooledBytesMax; n += 997 {
		c, size := class(n)
		if c < 0 || c >= len(pools) {
			t.Fatalf("class(%d) = %d, outside [0, %d)", n, c, len(pools))
		}
		if size < n || size > n+n/4 {
			t.Fatalf("class(%d) has buffers of %d bytes: want [n, 1.25n]", n, size)
		}
		if c2, size2 := class(size); c2 != c || size2 != size {
			t.Fatalf("class(%d) = %d (%d bytes), but its size's class is %d (%d bytes)", n, c, size, c2, size2)
		}
		if c < prev {
			t.Fatalf("class(%d) = %d, below the class %d of a shorter length", n, c, prev)
		}
		prev = c
	}
	for _, n := range []int{0, 1, PooledBytesMin, PooledBytesMax + 1} {
		if c, size := class(n); c != -1 || size != n {
			t.Errorf("class(%d) = %d, %d: want an unpooled length", n, c, size)
		}
	}
}

func TestGetPut(t *testing.T) {
	for _, n := range []int{10, PooledBytesMin, 32<<10 + 64, 4 << 20, PooledBytesMax + 1} {
		b := Get(n)
		if len(b) != n {
			t.Fatalf("Get(%d) has length %d", n, len(b))
		}
		_, size := class(n)
		if cap(b) != size {
			t.Fatalf("Get(%d) has capacity %d, want %d", n, cap(b), size)
		}
		Put(b)
	}
	// A slice of a size no class has is not kept: a later Get never
	// returns it.
	odd := make([]byte, 40<<10+1)
	odd[0] = 1
	Put(odd)
	for range 100 {
		if b := Get(40<<10 + 1); &b[:1][0] == &odd[0] {
			t.Fatal("Get returned a slice Put was given with a capacity of no class")
		}
	}
}
