// Package fsmeta is the deterministic core of TýrFS's metadata service in
// each server: the permission rules a fetch applies, and the resolver that
// decides which directories' permissions a node keeps a copy of. It does
// no I/O and reads no clock: the server (internal/server/fsmeta.go) reads
// headers, sends invalidations and passes the time in.
//
// # Popularity-based replication of permissions
//
// Opening /a/b/f needs search permission on "/", "/a/" and "/a/b/", whose
// headers (internal/fslayout) may sit on three other nodes. A node keeps a
// copy of a directory's permissions when it is popular there: among the
// TopKItems directories this node was asked about most in the current or
// previous window (Window long), with at least PopularMin requests, by a
// Space-Saving count. So the root and the directories of a busy data set
// are held by every node that serves files under them, and a cold
// directory costs one read of its header.
//
// Invariants (asserted by the tests; the server keeps them):
//
//  1. A copy is used only within Lease of the moment its fetch began, by
//     the holder's clock: a holder that misses an invalidation (down,
//     partitioned) stops using its copy within Lease.
//  2. A copy is installed only if no invalidation of its directory began
//     on this node after its fetch began (generations): a fetch that read
//     the old header before a change cannot install it after the change's
//     invalidation.
//  3. A permission change returns only once every member either dropped
//     its copies or Lease has passed since the change committed
//     (FsInvalidate waits out the members it cannot reach). With 1 and 2,
//     no fetch that starts after the change returns uses the old header.
//
// There is no subscription list to lose when a node restarts or the
// coordinator of a directory moves: an invalidation goes to every member,
// which is cheap since permission changes are rare. The invalidation
// follows the change's commit, from the changing client: if that client
// dies between the two, copies of the old permissions are used for at
// most Lease after the commit.
package fsmeta

import (
	"strings"
	"sync"
	"time"

	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/limits"
)

// Tunables of the resolver; each is documented in the README's TýrFS limits.
const (
	// Lease bounds how long a copy of a directory's permissions is used
	// after its fetch began (invariant 1), and so how long a permission
	// change waits for a member it cannot reach.
	Lease = limits.FSPermissionLease
	// Window is the length of a popularity window; a directory stays
	// popular for up to two windows after its requests stop.
	Window = 10 * time.Second
	// TopKItems is the number of directories a node's Space-Saving
	// counter monitors per window.
	TopKItems = 1024
	// PopularMin is how many requests in a window make a directory
	// popular (a guaranteed Space-Saving count).
	PopularMin = 3
	// CopiesMax bounds the copies a node keeps; beyond it the copies of
	// directories no longer popular go first, then the oldest.
	CopiesMax = 4 * TopKItems
)

// Access bits, as in the permission triplets.
const (
	MayExec  = 1
	MayWrite = 2
	MayRead  = 4
)

// Cred is who a request acts for. UID 0 is root.
type Cred struct {
	UID  uint32
	GIDs []uint32
}

// Perm is the part of a header a permission check reads.
type Perm struct {
	Kind     fslayout.Kind
	Mode     uint32 // 07777
	UID, GID uint32
}

// PermOf returns the permission fields of a.
func PermOf(a fslayout.Attr) Perm {
	return Perm{Kind: a.Kind, Mode: a.Mode, UID: a.UID, GID: a.GID}
}

// Allowed reports whether c may access p for want (a set of May* bits),
// by POSIX's rules: the owner's triplet if c owns it, else the group's if
// one of c's groups is its group, else the others'. Root may read and
// write anything, and execute (search) what anyone may, and directories.
func Allowed(p Perm, c Cred, want uint32) bool {
	if c.UID == 0 {
		if want&MayExec == 0 || p.Kind == fslayout.KindDir {
			return true
		}
		return p.Mode&0o111 != 0
	}
	var bits uint32
	switch {
	case c.UID == p.UID:
		bits = p.Mode >> 6
	case inGroup(c, p.GID):
		bits = p.Mode >> 3
	default:
		bits = p.Mode
	}
	return bits&want&7 == want
}

func inGroup(c Cred, gid uint32) bool {
	for _, g := range c.GIDs {
		if g == gid {
			return true
		}
	}
	return false
}

// Resolver keeps a node's popularity counts and copies of directories'
// permissions, over every keyspace. Safe for concurrent use.
type Resolver struct {
	mu          sync.Mutex
	cur, prev   *TopK
	windowStart time.Time
	copies      map[string]copyEntry // scope key -> copy
	// gen counts invalidations begun. A fetch may install its copy only
	// if none began since it started: invalidations are rare, so one
	// counter for all directories costs a few refetches, and needs no
	// per-directory bookkeeping to prune.
	gen uint64
}

type copyEntry struct {
	perm    Perm
	expires time.Time
}

// NewResolver returns a resolver whose first window starts at now.
func NewResolver(now time.Time) *Resolver {
	return &Resolver{cur: NewTopK(TopKItems), prev: NewTopK(TopKItems), windowStart: now,
		copies: map[string]copyEntry{}}
}

// scope is a directory's key within keyspace ks; no keyspace name holds
// a NUL.
func scope(ks, dirKey string) string { return ks + "\x00" + dirKey }

// rotate starts a new window if the current one is over.
func (r *Resolver) rotate(now time.Time) {
	switch {
	case now.Sub(r.windowStart) >= 2*Window:
		r.prev, r.cur = NewTopK(TopKItems), NewTopK(TopKItems)
		r.windowStart = now
	case now.Sub(r.windowStart) >= Window:
		r.prev, r.cur = r.cur, NewTopK(TopKItems)
		r.windowStart = r.windowStart.Add(Window)
	}
}

func (r *Resolver) popular(s string) bool {
	return r.cur.Guaranteed(s) >= PopularMin || r.prev.Guaranteed(s) >= PopularMin
}

// Ticket is what Lookup hands out for a fetch of a header it had no copy
// of; Install takes it back.
type Ticket struct {
	gen   uint64
	start time.Time
}

// Lookup counts a request for the permissions of directory dirKey of
// keyspace ks at now, and returns the copy this node holds if it is
// within its lease. Without one, the caller reads the header and passes
// it to Install with the ticket.
func (r *Resolver) Lookup(ks, dirKey string, now time.Time) (Perm, Ticket, bool) {
	s := scope(ks, dirKey)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(now)
	r.cur.Add(s)
	if c, ok := r.copies[s]; ok {
		if now.Before(c.expires) {
			return c.perm, Ticket{}, true
		}
		delete(r.copies, s)
	}
	return Perm{}, Ticket{gen: r.gen, start: now}, false
}

// Install keeps p, the header read under ticket t, as the copy of dirKey
// if the directory is popular and no invalidation began since t was
// issued (invariant 2). The copy's lease runs from t's start (invariant
// 1). It reports whether it kept the copy.
func (r *Resolver) Install(ks, dirKey string, p Perm, t Ticket) bool {
	s := scope(ks, dirKey)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != t.gen || !r.popular(s) {
		return false
	}
	if _, ok := r.copies[s]; !ok && len(r.copies) >= CopiesMax {
		r.evict()
	}
	r.copies[s] = copyEntry{perm: p, expires: t.start.Add(Lease)}
	return true
}

// evict drops one copy: of a directory no longer popular if there is one,
// else the one whose lease ends first.
func (r *Resolver) evict() {
	var victim string
	var first time.Time
	for s, c := range r.copies {
		if !r.popular(s) {
			delete(r.copies, s)
			return
		}
		if victim == "" || c.expires.Before(first) {
			victim, first = s, c.expires
		}
	}
	delete(r.copies, victim)
}

// Invalidate drops the copies of keyspace ks's directories whose keys
// start with prefix, and makes every fetch begun before it unable to
// install its copy (invariant 2). It returns how many copies it dropped.
func (r *Resolver) Invalidate(ks, prefix string) int {
	s := scope(ks, prefix)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	dropped := 0
	for k := range r.copies {
		if strings.HasPrefix(k, s) {
			delete(r.copies, k)
			dropped++
		}
	}
	return dropped
}

// Copies returns how many copies the resolver holds.
func (r *Resolver) Copies() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.copies)
}
