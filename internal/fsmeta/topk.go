package fsmeta

// TopK counts the most frequent items of a stream in O(k) memory with the
// Space-Saving algorithm (Metwally, Agrawal and El Abbadi, 2005): it
// monitors at most k items, each with a count and an error; an item not
// monitored replaces the one of least count, inheriting that count as its
// error. For every monitored item, count-err <= true frequency <= count,
// and every item whose true frequency exceeds n/k (n items added) is
// monitored. Not safe for concurrent use.
type TopK struct {
	k     int
	n     uint64
	index map[string]int // item -> position in heap
	heap  []counter      // a min-heap on count
}

type counter struct {
	item       string
	count, err uint64
}

// NewTopK returns an empty TopK of k counters; k is at least 1.
func NewTopK(k int) *TopK {
	k = max(k, 1)
	return &TopK{k: k, index: make(map[string]int, k), heap: make([]counter, 0, k)}
}

// Add counts one occurrence of item.
func (t *TopK) Add(item string) {
	t.n++
	if i, ok := t.index[item]; ok {
		t.heap[i].count++
		t.down(i)
		return
	}
	if len(t.heap) < t.k {
		t.heap = append(t.heap, counter{item: item, count: 1})
		t.index[item] = len(t.heap) - 1
		t.up(len(t.heap) - 1)
		return
	}
	// Replace the least counted item: its count becomes item's error.
	least := t.heap[0]
	delete(t.index, least.item)
	t.heap[0] = counter{item: item, count: least.count + 1, err: least.count}
	t.index[item] = 0
	t.down(0)
}

// Count returns item's estimated count and its error bound: the true count
// is in [count-err, count]. An item not monitored has (0, 0); its true
// count is at most the least monitored count (Min).
func (t *TopK) Count(item string) (count, err uint64) {
	if i, ok := t.index[item]; ok {
		return t.heap[i].count, t.heap[i].err
	}
	return 0, 0
}

// Guaranteed returns the count item surely reached: count - err.
func (t *TopK) Guaranteed(item string) uint64 {
	c, e := t.Count(item)
	return c - e
}

// Min returns the least monitored count once all k counters are in use,
// else 0: an upper bound on the count of any item not monitored.
func (t *TopK) Min() uint64 {
	if len(t.heap) < t.k {
		return 0
	}
	return t.heap[0].count
}

// N returns how many items were added.
func (t *TopK) N() uint64 { return t.n }

func (t *TopK) less(i, j int) bool { return t.heap[i].count < t.heap[j].count }

func (t *TopK) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.index[t.heap[i].item] = i
	t.index[t.heap[j].item] = j
}

func (t *TopK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *TopK) down(i int) {
	for {
		l, m := 2*i+1, i
		if l < len(t.heap) && t.less(l, m) {
			m = l
		}
		if r := l + 1; r < len(t.heap) && t.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		t.swap(i, m)
		i = m
	}
}
