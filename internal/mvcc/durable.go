package mvcc

import (
	"strings"
	"sync"
)

// Pebble makes a committed batch visible to readers before its WAL sync
// completes, and the WAL bytes may still sit in Pebble's buffer then, so a
// kill -9 can lose a commit that a reader already saw. A read that returned
// such a value and a later read that returns the older one again is not
// linearizable. The syncing table closes that window: a durable commit
// registers its blobs before its batch becomes visible and unregisters them
// once the sync returned, and every read, after taking its view, waits for
// the commits still syncing on the blobs it read. Readers never wait for a
// lock or for a commit that is still preparing; they wait for at most one
// fsync per blob, and only when the blob has a commit in that window.
//
// Commits on one blob are serialized by its lock, which a commit holds
// until it is durable, so a blob has at most one commit syncing.
type syncing struct {
	mu    sync.Mutex
	byKey map[string]chan struct{} // guarded by mu
}

// begin registers a commit of keys and returns the function that ends it.
func (t *syncing) begin(keys []string) (end func()) {
	done := make(chan struct{})
	t.mu.Lock()
	if t.byKey == nil {
		t.byKey = map[string]chan struct{}{}
	}
	for _, k := range keys {
		t.byKey[k] = done
	}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		for _, k := range keys {
			if t.byKey[k] == done {
				delete(t.byKey, k)
			}
		}
		t.mu.Unlock()
		close(done)
	}
}

// await returns once no commit of key that began before the call is still
// syncing.
func (t *syncing) await(key string) {
	t.mu.Lock()
	done := t.byKey[key]
	t.mu.Unlock()
	if done != nil {
		<-done
	}
}

// awaitPrefix is await for every key with prefix that sorts after
// startAfter: the keys a listing covers.
func (t *syncing) awaitPrefix(prefix, startAfter string) {
	t.mu.Lock()
	var waits []chan struct{}
	for k, done := range t.byKey {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			waits = append(waits, done)
		}
	}
	t.mu.Unlock()
	for _, done := range waits {
		<-done
	}
}
