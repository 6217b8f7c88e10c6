package storage

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tyrstore/tyr/internal/errs"
)

// DiskBytes returns the approximate bytes the keyspaces occupy on disk:
// the sum over keyspace databases of their files (tables, write-ahead logs,
// manifests; see pebble's Metrics.DiskSpaceUsage), where the live
// write-ahead logs count at least their logical size. Pebble counts the
// current log at the size its file had when opened, so without that
// correction the bytes written since the last memtable flush, up to a
// memtable per keyspace, would not count. The catalog is not counted. A
// keyspace dropped while DiskBytes runs may be counted or not. It fails,
// wrapping errs.ErrUnavailable, once the engine is closed.
func (e *Engine) DiskBytes() (uint64, error) {
	e.mu.Lock()
	closed := e.mu.closed
	e.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("storage: %w: closed", errs.ErrUnavailable)
	}
	var total uint64
	for _, listed := range e.List() {
		ks, err := e.Acquire(listed.Name)
		if errors.Is(err, errs.ErrNotFound) {
			continue // dropped meanwhile
		}
		if err != nil {
			return 0, err
		}
		total += diskBytes(ks.db.Metrics())
		ks.Release()
	}
	return total, nil
}

// DiskBytes returns the approximate bytes the keyspace occupies on disk
// (see Engine.DiskBytes).
func (ks *Keyspace) DiskBytes() uint64 { return diskBytes(ks.db.Metrics()) }

// MinFreeBytes is the free-space floor (Options.MinFreeBytes).
func (e *Engine) MinFreeBytes() uint64 { return e.opts.MinFreeBytes }

// diskBytes returns one database's disk usage, its live write-ahead logs
// counted at least at their logical size (see DiskBytes).
func diskBytes(m *pebble.Metrics) uint64 {
	n := m.DiskSpaceUsage()
	if m.WAL.Size > m.WAL.PhysicalSize {
		n += m.WAL.Size - m.WAL.PhysicalSize
	}
	return n
}

// fileSystemBytes returns the total size of the file system holding dir.
func fileSystemBytes(dir string) (uint64, error) {
	total, _, err := statfs(dir)
	return total, err
}

// fileSystemFree returns the bytes of the file system holding dir that an
// unprivileged writer may still use.
func fileSystemFree(dir string) (uint64, error) {
	_, free, err := statfs(dir)
	return free, err
}

// FileSystemBytes returns the total size of the file system that holds the
// data directory, as statfs reports it (free and used space together).
func (e *Engine) FileSystemBytes() (uint64, error) {
	n, err := fileSystemBytes(e.opts.Dir)
	if err != nil {
		return 0, fmt.Errorf("storage: %w: size of the file system holding %s: %w", errs.ErrUnavailable, e.opts.Dir, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("storage: %w: the file system holding %s reports a size of 0", errs.ErrUnavailable, e.opts.Dir)
	}
	return n, nil
}
