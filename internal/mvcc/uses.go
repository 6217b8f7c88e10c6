package mvcc

import (
	"sync"
	"time"
)

// Versions in use.
//
// A superseded page version is collected once no running transaction may
// still read it. A transaction's first read of a blob, on a version manager,
// counts a use of the version it read (Store.Pin with use, or Store.Use);
// the transaction's commit carries a read check of that version, and each
// version manager the commit passes releases the use when it prepares the
// commit, whatever the outcome. A use that is never released (the client
// went away) lapses after Options.Retention, the read timeout.
//
// A commit that supersedes page versions queues them for the collector,
// due after Options.Linger. When a record falls due, the collector asks
// whether a version of the blob older than the superseding one is in use:
// if so, it puts the record off by another Linger (or until that use
// lapses, if sooner, and never past Retention after the commit); if not, it deletes the older page versions,
// and with them the blob's history records older than the superseding
// version, so a later read at such a version fails with errs.ErrConflict
// rather than finding a page missing.
//
// One number answers the collector's question exactly: the oldest version
// in use (with the time its last use lapses). A version manager keeps its
// uses; it hands that summary to the members after it in every commit's
// Base, so a holder of the blob's chunks (which serves no transaction's
// first read) learns it with each commit that can make garbage of the
// blob. A use counted after that commit passed the version manager is of
// the version the commit wrote (Pin waits for the blob's lock), which that
// commit superseded nothing of.
//
// Failure modes are on the safe side: uses live in memory, so a restarted
// node, or a holder that learned of a use late, may collect a version a
// transaction still reads; the transaction's read at that version then fails
// with errs.ErrConflict and it runs again. Uses are counted, not told
// apart, so a release that finds its own use gone may end another
// transaction's use of the same version, with the same effect on it: a
// repeated commit message releases a use twice, and so does the commit of
// a transaction whose use lapsed or whose version manager restarted since
// it read. No read ever returns bytes of a version it did not ask for.

// InUse summarizes a blob's versions in use: the oldest, and when the last
// use lapses at the latest (unix nanoseconds). The zero InUse: none.
type InUse struct {
	Oldest uint64
	Until  int64
}

// merge returns the summary of both.
func (u InUse) merge(o InUse) InUse {
	switch {
	case o.Oldest == 0:
		return u
	case u.Oldest == 0:
		return o
	}
	return InUse{Oldest: min(u.Oldest, o.Oldest), Until: max(u.Until, o.Until)}
}

// uses counts the versions in use on one store (see above).
type uses struct {
	mu sync.Mutex
	// local: key -> version -> count and lapse time, on version managers.
	local map[string]map[uint64]*use
	// remote: the version managers' summaries, on holders.
	remote map[string]InUse
}

type use struct {
	n     int
	until time.Time
}

// add counts a use of key at version until until.
func (t *uses) add(key string, version uint64, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.local == nil {
		t.local = map[string]map[uint64]*use{}
	}
	vs := t.local[key]
	if vs == nil {
		vs = map[uint64]*use{}
		t.local[key] = vs
	}
	u := vs[version]
	if u == nil {
		u = &use{}
		vs[version] = u
	}
	u.n++
	u.until = until
}

// release ends one use of key at version, if any is counted.
func (t *uses) release(key string, version uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	vs := t.local[key]
	if u := vs[version]; u != nil {
		if u.n--; u.n <= 0 {
			delete(vs, version)
		}
		if len(vs) == 0 {
			delete(t.local, key)
		}
	}
}

// note keeps a version manager's summary for key, replacing the last.
func (t *uses) note(key string, u InUse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u.Oldest == 0 {
		delete(t.remote, key)
		return
	}
	if t.remote == nil {
		t.remote = map[string]InUse{}
	}
	t.remote[key] = u
}

// of returns key's summary at now: the live local uses and the version
// managers' summary, dropping what lapsed.
func (t *uses) of(key string, now time.Time) InUse {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out InUse
	if r, ok := t.remote[key]; ok {
		if r.Until > now.UnixNano() {
			out = r
		} else {
			delete(t.remote, key)
		}
	}
	vs := t.local[key]
	for v, u := range vs {
		if !u.until.After(now) {
			delete(vs, v)
			continue
		}
		out = out.merge(InUse{Oldest: v, Until: u.until.UnixNano()})
	}
	if vs != nil && len(vs) == 0 {
		delete(t.local, key)
	}
	return out
}

// Use counts a running transaction's use of blob key at version (see
// above), until it is released or Options.Retention passes.
func (s *Store) Use(key string, version uint64) {
	if s.opts.MVCC && version != 0 {
		s.uses.add(key, version, s.opts.Now().Add(s.opts.Retention))
	}
}

// InUseOf returns the summary of blob key's versions in use now.
func (s *Store) InUseOf(key string) InUse { return s.uses.of(key, s.opts.Now()) }
