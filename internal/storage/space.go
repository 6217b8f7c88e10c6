package storage

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tyrstore/tyr/internal/errs"
)

// Disk space: the floor below which writes are refused, and the reclaim
// of removed data (see the top of internal/mvcc/reclaim.go).

// ReclaimRateDefault is Options.ReclaimRate when zero: the bytes per second
// that reclaim compactions may rewrite, on average.
const ReclaimRateDefault = 64 << 20

// roomCheckEvery is how long a measurement of the free space is reused:
// a write at most this much older than a measurement may pass the floor.
const roomCheckEvery = 100 * time.Millisecond

// space is the engine's view of its file system's free space.
type space struct {
	dir     string
	minFree uint64
	mu      sync.Mutex
	checked time.Time // guarded by mu
	err     error     // guarded by mu
}

// room returns nil while the file system holding the data directory has at
// least minFree bytes available to the server, or an error of class
// errs.ErrNoSpace. A file system that cannot be measured counts as having
// room: the writes then meet its own error, if any.
func (sp *space) room() error {
	if sp.minFree == 0 {
		return nil
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if now := time.Now(); now.Sub(sp.checked) >= roomCheckEvery {
		sp.checked = now
		sp.err = nil
		free, err := fileSystemFree(sp.dir)
		if err == nil && free < sp.minFree {
			sp.err = fmt.Errorf("%w: the file system holding %s has %d bytes free, below the floor of %d (--min-free)",
				errs.ErrNoSpace, sp.dir, free, sp.minFree)
		}
	}
	return sp.err
}

// FreeBytes returns the bytes available to the server on the file system
// holding the data directory.
func (e *Engine) FreeBytes() (uint64, error) {
	n, err := fileSystemFree(e.opts.Dir)
	if err != nil {
		return 0, fmt.Errorf("storage: %w: free space of the file system holding %s: %w", errs.ErrUnavailable, e.opts.Dir, err)
	}
	return n, nil
}

// noRecycle is the Cleaner of every database: it deletes obsolete files,
// as Pebble's default does, and also keeps Pebble from recycling
// write-ahead logs. A recycled log keeps its size on disk (up to three
// per keyspace, each up to a memtable), so that with recycling the space
// of removed data came back only partly. Pebble recycles no log for a
// cleaner that needs the files' contents; the ArchiveCleaner embedded one
// level down carries only that mark, and the DeleteCleaner's Clean wins.
type noRecycle struct {
	pebble.DeleteCleaner
	needsContents
}

type needsContents struct{ pebble.ArchiveCleaner }

// reclaimLoop reclaims the space of removed data in every keyspace, each
// GCInterval, pacing its compactions to about Options.ReclaimRate bytes
// rewritten per second.
func (e *Engine) reclaimLoop() {
	defer e.done.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-e.stop
		cancel()
	}()
	pace := func(rewritten uint64) {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(float64(rewritten) / float64(e.opts.ReclaimRate) * float64(time.Second))):
		}
	}
	ticker := time.NewTicker(e.opts.GCInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		e.Each(func(ks *Keyspace) {
			st, err := ks.Store.Reclaim(ctx, pace)
			if err != nil && ctx.Err() == nil {
				e.opts.Logger.Warn("reclaiming the space of removed data failed", "keyspace", ks.Name, "err", err)
			} else if st.Spans > 0 {
				e.opts.Logger.Debug("reclaimed the space of removed data", "keyspace", ks.Name, "spans", st.Spans, "bytes", st.Freed)
			}
		})
	}
}
