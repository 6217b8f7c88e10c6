// Package storage manages a node's data directory: the catalog of keyspaces
// and one embedded Pebble database per keyspace, so that dropping a keyspace
// is closing a database and removing its directory.
//
// Layout under the data directory:
//
//	catalog/              Pebble: 'k' name -> keyspace record (JSON)
//	keyspaces/NAME.ID/    Pebble: the keyspace's blobs (see package mvcc)
//
// A directory under keyspaces/ that the catalog does not name is the
// remains of an interrupted drop and is removed at open.
package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/mvcc"
)

// catalogMemTableBytes is the catalog database's memtable size.
const catalogMemTableBytes = 1 << 20

// CompactionsMax is how many compactions each keyspace's database may run
// at once when its compaction debt grows (one otherwise).
const CompactionsMax = 2

// Options configure an Engine.
type Options struct {
	// Dir is the data directory; it is created if missing.
	Dir string
	// CacheBytes is the block cache shared by all keyspaces. Default 128 MiB
	// (tyr server --block-cache).
	CacheBytes int64
	// MemTableBytes is each keyspace database's memtable size. Default 16 MiB.
	MemTableBytes uint64
	// Retention is how long a superseded version stays readable in MVCC
	// keyspaces while a running transaction uses it: the read timeout.
	// Default 5 minutes.
	Retention time.Duration
	// Linger is how long a superseded version no transaction uses stays
	// readable. Default mvcc.LingerDefault.
	Linger time.Duration
	// GCInterval is how often superseded versions are collected, and the
	// space of removed data reclaimed. Default 1s.
	GCInterval time.Duration
	// ReclaimRate bounds the bytes per second, on average, that the
	// compactions reclaiming removed data rewrite. Default
	// ReclaimRateDefault.
	ReclaimRate int64
	// MinFreeBytes is the free-space floor: while the file system holding
	// Dir has less available, writes are refused with errs.ErrNoSpace
	// (deletes and truncates are not). 0: no floor.
	MinFreeBytes uint64
	Logger       *slog.Logger
}

// Keyspace is an open keyspace. Its Store may be used until Release.
type Keyspace struct {
	Name    string
	Config  keyspace.Config
	Created time.Time
	ID      string
	Store   *mvcc.Store

	db *pebble.DB
	// users counts holders between Acquire and Release; drop waits for 0.
	users sync.WaitGroup
}

type record struct {
	Config  keyspace.Config `json:"config"`
	Created int64           `json:"created_unix_nano"`
	ID      string          `json:"id"`
}

// Engine is a node's storage. It is safe for concurrent use.
type Engine struct {
	opts    Options
	catalog *pebble.DB
	cache   *pebble.Cache
	newDB   func(dir string, memTable uint64) (*pebble.DB, error)
	stop    chan struct{}
	done    sync.WaitGroup
	space   *space

	mu struct {
		sync.Mutex
		keyspaces map[string]*Keyspace
		closed    bool
	}
}

// Open opens (or creates) the data directory and every keyspace in it.
func Open(opts Options) (*Engine, error) {
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 128 << 20
	}
	if opts.MemTableBytes == 0 {
		opts.MemTableBytes = 16 << 20
	}
	if opts.Retention == 0 {
		opts.Retention = 5 * time.Minute
	}
	if opts.GCInterval == 0 {
		opts.GCInterval = time.Second
	}
	if opts.ReclaimRate <= 0 {
		opts.ReclaimRate = ReclaimRateDefault
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, "keyspaces"), 0o755); err != nil {
		return nil, err
	}
	cache := pebble.NewCache(opts.CacheBytes)
	e := &Engine{opts: opts, cache: cache, stop: make(chan struct{}), space: &space{dir: opts.Dir, minFree: opts.MinFreeBytes}}
	e.newDB = func(dir string, memTable uint64) (*pebble.DB, error) {
		o := &pebble.Options{Cache: cache, MemTableSize: memTable, Logger: quietLogger{opts.Logger},
			FormatMajorVersion: mvcc.FormatMajorVersion, Cleaner: noRecycle{}}
		// Blob records are read by point lookups; a Bloom filter lets a
		// lookup skip the files that cannot hold the record.
		for i := range o.Levels {
			o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		}
		// A second compaction when debt builds up: under steady overwrites
		// the collector's range deletions free space only as compaction
		// gets to them, and one compaction at a time fell behind (the
		// make gc-soak peak halved with two).
		o.CompactionConcurrencyRange = func() (int, int) { return 1, CompactionsMax }
		o.Experimental.ValueSeparationPolicy = mvcc.ValueSeparation
		return pebble.Open(dir, o)
	}
	// The catalog holds a record per keyspace: a small memtable keeps its
	// write-ahead log, which Pebble preallocates at 1.1 memtables, small.
	catalog, err := e.newDB(filepath.Join(opts.Dir, "catalog"), catalogMemTableBytes)
	if err != nil {
		cache.Unref()
		return nil, fmt.Errorf("storage: open catalog: %w", err)
	}
	e.catalog = catalog
	e.mu.keyspaces = map[string]*Keyspace{}
	if err := e.loadKeyspaces(); err != nil {
		_ = e.Close()
		return nil, err
	}
	e.done.Add(2)
	go e.collectLoop()
	go e.reclaimLoop()
	return e, nil
}

// BlockCache describes the block cache all keyspaces share: its capacity
// and the bytes it holds, and its hits and misses so far.
type BlockCache struct {
	CapacityBytes, UsedBytes int64
	Hits, Misses             int64
}

// BlockCache returns the shared block cache's figures.
func (e *Engine) BlockCache() BlockCache {
	m := e.cache.Metrics()
	return BlockCache{CapacityBytes: e.cache.MaxSize(), UsedBytes: m.Size, Hits: m.Hits, Misses: m.Misses}
}

func (e *Engine) loadKeyspaces() error {
	it, err := e.catalog.NewIter(&pebble.IterOptions{LowerBound: []byte("k"), UpperBound: []byte("l")})
	if err != nil {
		return err
	}
	defer it.Close()
	known := map[string]bool{}
	for ok := it.First(); ok; ok = it.Next() {
		var r record
		if err := json.Unmarshal(it.Value(), &r); err != nil {
			return fmt.Errorf("storage: catalog record %q: %w: %w", it.Key(), errs.ErrCorruption, err)
		}
		name := string(it.Key()[1:])
		ks, err := e.openKeyspace(name, r)
		if err != nil {
			return err
		}
		e.mu.keyspaces[name] = ks
		known[ks.dirName()] = true
	}
	if err := it.Error(); err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Join(e.opts.Dir, "keyspaces"))
	if err != nil {
		return err
	}
	for _, entry := range entries {
		if !known[entry.Name()] {
			e.opts.Logger.Info("removing remains of a dropped keyspace", "dir", entry.Name())
			if err := os.RemoveAll(filepath.Join(e.opts.Dir, "keyspaces", entry.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func (ks *Keyspace) dirName() string { return ks.Name + "." + ks.ID }

func (e *Engine) openKeyspace(name string, r record) (*Keyspace, error) {
	ks := &Keyspace{Name: name, Config: r.Config, Created: time.Unix(0, r.Created), ID: r.ID}
	db, err := e.newDB(filepath.Join(e.opts.Dir, "keyspaces", ks.dirName()), e.opts.MemTableBytes)
	if err != nil {
		return nil, fmt.Errorf("storage: open keyspace %q: %w", name, err)
	}
	ks.db = db
	ks.Store, err = mvcc.Open(db, mvcc.Options{MVCC: r.Config.MVCC, Sync: r.Config.Sync, Retention: e.opts.Retention, Linger: e.opts.Linger,
		ChunkBytes: r.Config.ChunkBytes, Room: e.space.room})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("storage: open keyspace %q: %w", name, err)
	}
	return ks, nil
}

// Create creates a keyspace. The config is validated after defaults are
// filled; an invalid name or config changes nothing.
func (e *Engine) Create(name string, cfg keyspace.Config) (*Keyspace, error) {
	if err := keyspace.ValidateName(name); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return nil, fmt.Errorf("storage: %w: closed", errs.ErrUnavailable)
	}
	if _, ok := e.mu.keyspaces[name]; ok {
		return nil, fmt.Errorf("keyspace %q: %w", name, errs.ErrExists)
	}
	if len(e.mu.keyspaces) >= limits.KeyspacesMax {
		return nil, fmt.Errorf("%w: already %d keyspaces, the limit", errs.ErrTooLarge, limits.KeyspacesMax)
	}
	now := time.Now()
	r := record{Config: cfg, Created: now.UnixNano(), ID: strconv.FormatInt(now.UnixNano(), 36)}
	ks, err := e.openKeyspace(name, r)
	if err != nil {
		return nil, err
	}
	value, err := json.Marshal(r)
	if err == nil {
		err = e.catalog.Set(catalogKey(name), value, pebble.Sync)
	}
	if err != nil {
		_ = ks.db.Close()
		_ = os.RemoveAll(filepath.Join(e.opts.Dir, "keyspaces", ks.dirName()))
		return nil, fmt.Errorf("storage: %w: record keyspace %q: %w", errs.ErrUnavailable, name, err)
	}
	e.mu.keyspaces[name] = ks
	return ks, nil
}

func catalogKey(name string) []byte { return append([]byte("k"), name...) }

// Drop removes a keyspace and all its data. It waits for operations in
// flight on the keyspace to finish.
func (e *Engine) Drop(name string) error {
	e.mu.Lock()
	ks, ok := e.mu.keyspaces[name]
	if !ok {
		e.mu.Unlock()
		return fmt.Errorf("keyspace %q: %w", name, errs.ErrNotFound)
	}
	if err := e.catalog.Delete(catalogKey(name), pebble.Sync); err != nil {
		e.mu.Unlock()
		return fmt.Errorf("storage: %w: drop keyspace %q: %w", errs.ErrUnavailable, name, err)
	}
	delete(e.mu.keyspaces, name)
	e.mu.Unlock()
	ks.users.Wait()
	err := ks.db.Close()
	return errors.Join(err, os.RemoveAll(filepath.Join(e.opts.Dir, "keyspaces", ks.dirName())))
}

// Acquire returns the open keyspace name; the caller must Release it.
func (e *Engine) Acquire(name string) (*Keyspace, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return nil, fmt.Errorf("storage: %w: closed", errs.ErrUnavailable)
	}
	ks, ok := e.mu.keyspaces[name]
	if !ok {
		return nil, fmt.Errorf("keyspace %q: %w", name, errs.ErrNotFound)
	}
	ks.users.Add(1)
	return ks, nil
}

// Release ends a use begun by Acquire.
func (ks *Keyspace) Release() { ks.users.Done() }

// List returns the keyspaces ordered by name.
func (e *Engine) List() []*Keyspace {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*Keyspace, 0, len(e.mu.keyspaces))
	for _, ks := range e.mu.keyspaces {
		out = append(out, ks)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Each calls f with every open keyspace in name order, each held (as by
// Acquire) for the call; a keyspace dropped meanwhile is skipped.
func (e *Engine) Each(f func(ks *Keyspace)) {
	for _, listed := range e.List() {
		ks, err := e.Acquire(listed.Name)
		if err != nil {
			continue
		}
		f(ks)
		ks.Release()
	}
}

func (e *Engine) collectLoop() {
	defer e.done.Done()
	ticker := time.NewTicker(e.opts.GCInterval)
	defer ticker.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-ticker.C:
		}
		e.Each(func(ks *Keyspace) {
			if !ks.Config.MVCC {
				return
			}
			n, err := ks.Store.CollectGarbage()
			if err != nil {
				e.opts.Logger.Warn("version collection failed", "keyspace", ks.Name, "err", err)
			} else if n > 0 {
				e.opts.Logger.Debug("collected the superseded versions of pages", "keyspace", ks.Name, "pages", n)
			}
		})
	}
}

// Close closes every keyspace and the catalog. Operations in flight are
// waited for; new ones fail with errs.ErrUnavailable.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return nil
	}
	e.mu.closed = true
	keyspaces := e.mu.keyspaces
	e.mu.keyspaces = nil
	e.mu.Unlock()
	close(e.stop)
	e.done.Wait()
	var err error
	for _, ks := range keyspaces {
		ks.users.Wait()
		err = errors.Join(err, ks.db.Close())
	}
	if e.catalog != nil {
		err = errors.Join(err, e.catalog.Close())
	}
	e.cache.Unref()
	return err
}

// quietLogger sends Pebble's informational chatter to debug level.
type quietLogger struct{ l *slog.Logger }

func (q quietLogger) Infof(format string, args ...any)  { q.l.Debug(fmt.Sprintf(format, args...)) }
func (q quietLogger) Errorf(format string, args ...any) { q.l.Error(fmt.Sprintf(format, args...)) }
func (q quietLogger) Fatalf(format string, args ...any) {
	q.l.Error(fmt.Sprintf(format, args...))
	os.Exit(1)
}
