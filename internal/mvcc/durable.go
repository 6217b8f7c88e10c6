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
// A commit made with CommitLater (a chain member's: see chain.Output's
// MustSync) does not wait for its own sync. It joins the store's open
// group, which Store.Sync closes, syncs with one WAL sync, and ends: its
// blobs map to the group's channel until then, so reads of them wait for
// that sync, and only for it.
//
// A blob's entry is the channel of the newest commit on it that is not
// yet known durable; it closes no earlier than any older one's commit is
// durable, since a WAL sync covers every batch written before it.
type syncing struct {
	mu    sync.Mutex
	byKey map[string]chan struct{} // guarded by mu
	// later is the open group's channel, nil when no commit joined it
	// since the last Sync; laterKeys are the blobs of its commits.
	later     chan struct{}
	laterKeys []string
	// gate is held shared by a later commit from joining the group until
	// its batch is in the WAL, and exclusively by Sync as it takes the
	// group: so every commit of a group Sync took is in the WAL before
	// the sync.
	gate sync.RWMutex
	// syncMu serializes Syncs, so groups end in the order they were
	// taken.
	syncMu sync.Mutex
}

// beginLater adds a commit of keys to the open group and returns the
// function to call once its batch is written.
func (t *syncing) beginLater(keys []string) (written func()) {
	t.gate.RLock()
	t.mu.Lock()
	if t.byKey == nil {
		t.byKey = map[string]chan struct{}{}
	}
	if t.later == nil {
		t.later = make(chan struct{})
	}
	for _, k := range keys {
		t.byKey[k] = t.later
	}
	t.laterKeys = append(t.laterKeys, keys...)
	t.mu.Unlock()
	return t.gate.RUnlock
}

// takeLater closes the open group to new commits and returns it once every
// commit in it is written; done is nil when the group is empty.
func (t *syncing) takeLater() (done chan struct{}, keys []string) {
	t.gate.Lock()
	t.mu.Lock()
	done, keys = t.later, t.laterKeys
	t.later, t.laterKeys = nil, nil
	t.mu.Unlock()
	t.gate.Unlock()
	return done, keys
}

// end marks a group (or one durable commit) of keys synced.
func (t *syncing) end(done chan struct{}, keys []string) {
	t.mu.Lock()
	for _, k := range keys {
		if t.byKey[k] == done {
			delete(t.byKey, k)
		}
	}
	t.mu.Unlock()
	close(done)
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
	return func() { t.end(done, keys) }
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
