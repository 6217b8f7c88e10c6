package membership

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/ring"
)

// Limits on the catalog. Every node holds the whole catalog and sends it in
// every push/pull, tombstones included, so it is bounded.
const (
	// CatalogConfigBytesMax is the largest keyspace configuration a catalog
	// entry carries, in its encoded form (the catalog does not interpret
	// it).
	CatalogConfigBytesMax = 256
	// CatalogEntriesMax is the most entries, live keyspaces and tombstones
	// together, a node lets a new keyspace be created into. Live keyspaces
	// are further bounded by limits.KeyspacesMax.
	CatalogEntriesMax = 8192
	// CatalogEntriesHardMax is the most entries a catalog holds. Creations
	// on different nodes can race past CatalogEntriesMax before they hear
	// of each other; the margin lets merges absorb such a race. Beyond it,
	// merges refuse new names and catalogs may diverge, which is logged.
	CatalogEntriesHardMax = 2 * CatalogEntriesMax
)

// catalogEntryFormatV1 is the first catalog entry format. Append-only: see
// codec.go.
const catalogEntryFormatV1 = 1

// catalogEntryBytesMaxV1 is the largest catalog entry of format 1: format
// byte; name, config and origin with their length prefixes; wall time and
// logical counter as varints; flags.
const catalogEntryBytesMaxV1 = 1 + (1 + limits.KeyspaceNameBytesMax) + (2 + CatalogConfigBytesMax) +
	10 + 5 + 1 + (2 + ring.NodeIDBytesMax)

// Compile-time relations: live keyspaces fit in the catalog, and the hard
// limit leaves room above the soft one.
const (
	_ uint = CatalogEntriesMax - limits.KeyspacesMax
	_ uint = CatalogEntriesHardMax - CatalogEntriesMax
	_ uint = 127 - limits.KeyspaceNameBytesMax // one-byte length prefix for names
)

// ErrCatalogFull is returned when a catalog cannot take another entry. It
// wraps errs.ErrTooLarge.
var ErrCatalogFull = fmt.Errorf("membership: catalog full (%w)", errs.ErrTooLarge)

// Timestamp is a hybrid logical clock reading: wall-clock nanoseconds, and a
// counter that orders events within one nanosecond or while the wall clock
// lags a timestamp already seen. Timestamps from a Clock that observes every
// timestamp it receives respect causality: an event that follows another
// (a drop after the create it saw) gets a larger timestamp, whatever the
// clocks of the two nodes say.
type Timestamp struct {
	WallNanos int64
	Logical   uint32
}

// Compare orders timestamps by WallNanos, then Logical.
func (t Timestamp) Compare(u Timestamp) int {
	if c := cmp.Compare(t.WallNanos, u.WallNanos); c != 0 {
		return c
	}
	return cmp.Compare(t.Logical, u.Logical)
}

// IsZero reports whether t is the zero Timestamp, which no Clock returns.
func (t Timestamp) IsZero() bool { return t == Timestamp{} }

// String formats t as wall.logical.
func (t Timestamp) String() string { return fmt.Sprintf("%d.%d", t.WallNanos, t.Logical) }

// Clock is a hybrid logical clock. It reads no clock itself: the caller
// passes the physical time, so the same inputs give the same timestamps.
// The zero Clock is ready to use. Not safe for concurrent use.
type Clock struct {
	// last is the largest timestamp returned or observed.
	last Timestamp
}

// Now returns a timestamp larger than every one returned or observed
// before: physicalNanos if that is later than all of them, and otherwise
// the last one with its counter advanced.
func (c *Clock) Now(physicalNanos int64) Timestamp {
	switch {
	case physicalNanos > c.last.WallNanos:
		c.last = Timestamp{WallNanos: physicalNanos}
	case c.last.Logical == math.MaxUint32:
		c.last = Timestamp{WallNanos: c.last.WallNanos + 1}
	default:
		c.last.Logical++
	}
	return c.last
}

// Observe records a timestamp received from another node, so that later
// calls to Now return larger ones.
func (c *Clock) Observe(t Timestamp) {
	if t.Compare(c.last) > 0 {
		c.last = t
	}
}

// CatalogEntry is the catalog's record of one keyspace name: its
// configuration and creation time, or a tombstone saying it was dropped.
type CatalogEntry struct {
	// Name is the keyspace name (keyspace.ValidateName).
	Name string
	// Config is the keyspace configuration in its encoded form, at most
	// CatalogConfigBytesMax bytes; empty in tombstones.
	Config []byte
	// Version is when the entry was written (a create or a drop), from the
	// writing node's Clock. Never zero.
	Version Timestamp
	// Dropped marks a tombstone: the keyspace was dropped at Version.
	Dropped bool
	// Origin is the node that wrote the entry; it breaks ties and helps
	// operators trace a keyspace.
	Origin ring.NodeID
}

// Validate reports the first problem with e, or nil.
func (e CatalogEntry) Validate() error {
	if err := keyspace.ValidateName(e.Name); err != nil {
		return fmt.Errorf("membership: catalog entry: %w", err)
	}
	if len(e.Config) > CatalogConfigBytesMax {
		return fmt.Errorf("membership: %w: catalog entry %q: config is %d bytes, more than the limit of %d",
			ErrInvalid, e.Name, len(e.Config), CatalogConfigBytesMax)
	}
	if e.Version.IsZero() {
		return fmt.Errorf("membership: %w: catalog entry %q: zero version", ErrInvalid, e.Name)
	}
	if err := validateID(e.Origin); err != nil {
		return fmt.Errorf("membership: %w: catalog entry %q: origin: %w", ErrInvalid, e.Name, err)
	}
	return nil
}

// compareEntries totally orders two entries for one name: by Version, then
// a tombstone above a live entry, then by Origin, then by Config bytes.
// Entries that compare equal are identical, which is what makes the merge a
// join (max) over a total order: commutative, associative and idempotent.
func compareEntries(a, b CatalogEntry) int {
	if c := a.Version.Compare(b.Version); c != 0 {
		return c
	}
	if a.Dropped != b.Dropped {
		if a.Dropped {
			return 1
		}
		return -1
	}
	if c := strings.Compare(string(a.Origin), string(b.Origin)); c != 0 {
		return c
	}
	return bytes.Compare(a.Config, b.Config)
}

// encodeTo appends e in format 1 (append-only; see codec.go):
//
//	byte     format (1)
//	string   Name
//	bytes    Config
//	varint   Version.WallNanos
//	uvarint  Version.Logical
//	byte     flags              (bit 0: Dropped)
//	string   Origin
func (e CatalogEntry) encodeTo(enc *encoder) {
	enc.byte(catalogEntryFormatV1)
	enc.string(e.Name)
	enc.bytes(e.Config)
	enc.varint(e.Version.WallNanos)
	enc.uvarint(uint64(e.Version.Logical))
	var flags byte
	if e.Dropped {
		flags |= 1
	}
	enc.byte(flags)
	enc.string(string(e.Origin))
}

// decodeCatalogEntry decodes and validates one entry from b, ignoring fields
// of later formats.
func decodeCatalogEntry(b []byte) (CatalogEntry, error) {
	d := decoder{buf: b, what: "catalog entry"}
	var e CatalogEntry
	d.formatByte()
	e.Name = d.string("name", limits.KeyspaceNameBytesMax)
	e.Config = d.bytes("config", CatalogConfigBytesMax)
	e.Version.WallNanos = d.varint()
	logical := d.uvarint()
	if logical > math.MaxUint32 {
		d.fail("logical time %d out of range", logical)
	}
	e.Version.Logical = uint32(logical)
	e.Dropped = d.byte()&1 != 0
	e.Origin = ring.NodeID(d.string("origin", ring.NodeIDBytesMax))
	if d.err != nil {
		return CatalogEntry{}, d.err
	}
	if err := e.Validate(); err != nil {
		return CatalogEntry{}, err
	}
	return e, nil
}

// Catalog is the cluster-wide registry of keyspaces, replicated by gossip:
// a map from keyspace name to the entry with the largest (Version, Dropped,
// Origin, Config), so that any two catalogs that have merged the same
// entries, in any order and any number of times, are equal. Creation and
// drop on any node reach every node through broadcasts, and nodes that miss
// one (or join later) catch up in the next push/pull exchange.
//
// Concurrent writes to one name are settled by the later Version: two nodes
// that create one name at the same time both succeed locally, and the
// cluster keeps one of the two configurations. Create-if-absent across the
// cluster needs agreement, which gossip does not give.
//
// # Tombstones
//
// A drop is a tombstone, kept forever: forgetting it would let a node that
// has not heard of the drop bring the keyspace back in its next push/pull.
// Purging tombstones safely needs every member, including ones that are down
// now, to have seen the drop, which gossip cannot tell. The cost is memory
// and bandwidth: a tombstone is about 20 bytes plus the name and origin
// (about 60 to 80 bytes for typical names), held by every node and sent in
// every push/pull (each node exchanges its whole state with one random peer
// per PushPullInterval). Tombstones count towards CatalogEntriesMax, so a
// cluster that drops and creates keyspaces without end eventually refuses
// new ones, with ErrCatalogFull; at the limit, a push/pull carries up to
// about 10 MiB of catalog.
//
// # Example
//
//	node a creates "logs" at (100, 0)          {logs: (100,0) live}
//	node b, not yet told, creates "logs" at (100, 0), its own config
//	                                           {logs: (100,0) live, origin b}
//	merge: same Version, neither dropped; origin "b" > "a": b's entry wins everywhere
//	node a drops "logs" at (105, 0)            {logs: (105,0) dropped}
//	node c had "logs" (100,0) and merges       {logs: (105,0) dropped}
//	node c creates "logs" again at (107, 0)    {logs: (107,0) live}
//
// The zero Catalog is empty and ready to use. A Catalog is not safe for
// concurrent use, and assigning one to another shares its contents: use
// Clone.
type Catalog struct {
	// entries maps each name to its entry; entries[n].Name == n and every
	// entry is valid. Configs are never modified in place, so clones may
	// share them.
	entries map[string]CatalogEntry
}

// Clone returns a copy of c.
func (c *Catalog) Clone() *Catalog {
	out := &Catalog{entries: make(map[string]CatalogEntry, len(c.entries))}
	for name, e := range c.entries {
		out.entries[name] = e
	}
	return out
}

// Len returns the number of entries, tombstones included.
func (c *Catalog) Len() int { return len(c.entries) }

// Get returns the entry for name, tombstone or not, and whether there is
// one. The caller must not modify the entry's Config.
func (c *Catalog) Get(name string) (CatalogEntry, bool) {
	e, ok := c.entries[name]
	return e, ok
}

// Entries returns every entry, tombstones included, sorted by name. The
// caller must not modify the entries' Configs.
func (c *Catalog) Entries() []CatalogEntry {
	out := make([]CatalogEntry, 0, len(c.entries))
	for _, e := range c.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b CatalogEntry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Live returns the entries that are not tombstones, sorted by name.
func (c *Catalog) Live() []CatalogEntry {
	all := c.Entries()
	return slices.DeleteFunc(all, func(e CatalogEntry) bool { return e.Dropped })
}

// LiveCount returns the number of live keyspaces.
func (c *Catalog) LiveCount() int {
	n := 0
	for _, e := range c.entries {
		if !e.Dropped {
			n++
		}
	}
	return n
}

// Merge merges one entry and reports whether c changed: it did if e is the
// first entry for its name or orders above the one c holds. It returns an
// error, and changes nothing, if e is invalid or would be a new name in a
// catalog of CatalogEntriesHardMax entries (ErrCatalogFull). c keeps e's
// Config; the caller must not modify it afterwards.
func (c *Catalog) Merge(e CatalogEntry) (bool, error) {
	if err := e.Validate(); err != nil {
		return false, err
	}
	current, ok := c.entries[e.Name]
	if !ok {
		if len(c.entries) >= CatalogEntriesHardMax {
			return false, fmt.Errorf("%w: %d entries; cannot add %q", ErrCatalogFull, len(c.entries), e.Name)
		}
		if c.entries == nil {
			c.entries = make(map[string]CatalogEntry)
		}
		c.entries[e.Name] = e
		return true, nil
	}
	if compareEntries(e, current) <= 0 {
		return false, nil
	}
	c.entries[e.Name] = e
	return true, nil
}

// MergeAll merges every entry of entries, in name order, and reports
// whether c changed. Invalid entries, and new names beyond the hard limit,
// are skipped; the returned error joins what was skipped, and the rest is
// merged.
func (c *Catalog) MergeAll(entries []CatalogEntry) (bool, error) {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b CatalogEntry) int { return strings.Compare(a.Name, b.Name) })
	var changed bool
	var problems []error
	for _, e := range sorted {
		ok, err := c.Merge(e)
		changed = changed || ok
		if err != nil {
			problems = append(problems, err)
		}
	}
	if len(problems) > 0 {
		return changed, errs.JoinBounded(problems)
	}
	return changed, nil
}

// MaxVersion returns the largest Version in c, or the zero Timestamp if c is
// empty; a node observes it so that its next write orders after everything
// it has seen.
func (c *Catalog) MaxVersion() Timestamp {
	var max Timestamp
	for _, e := range c.entries {
		if e.Version.Compare(max) > 0 {
			max = e.Version
		}
	}
	return max
}

// Create returns the entry that creates keyspace name with config at
// version, by origin, after checking it against c: it returns an error
// wrapping errs.ErrExists if name is live in c, ErrInvalid if the entry is
// invalid, and ErrCatalogFull if c is at a limit. It does not change c; the
// caller merges the entry and broadcasts it.
func (c *Catalog) Create(name string, config []byte, version Timestamp, origin ring.NodeID) (CatalogEntry, error) {
	e := CatalogEntry{Name: name, Config: slices.Clone(config), Version: version, Origin: origin}
	if err := e.Validate(); err != nil {
		return CatalogEntry{}, err
	}
	current, ok := c.entries[name]
	if ok && !current.Dropped {
		return CatalogEntry{}, fmt.Errorf("membership: keyspace %q %w (created at %s by %q)",
			name, errs.ErrExists, current.Version, current.Origin)
	}
	if !ok && len(c.entries) >= CatalogEntriesMax {
		return CatalogEntry{}, fmt.Errorf("%w: %d entries, tombstones included, reach the limit of %d; cannot create %q",
			ErrCatalogFull, len(c.entries), CatalogEntriesMax, name)
	}
	if live := c.LiveCount(); live >= limits.KeyspacesMax {
		return CatalogEntry{}, fmt.Errorf("%w: %d live keyspaces reach the limit of %d; cannot create %q",
			ErrCatalogFull, live, limits.KeyspacesMax, name)
	}
	if ok && version.Compare(current.Version) <= 0 {
		return CatalogEntry{}, fmt.Errorf("membership: %w: version %s of %q is not after the drop at %s",
			ErrInvalid, version, name, current.Version)
	}
	return e, nil
}

// Drop returns the tombstone that drops keyspace name at version, by
// origin, after checking it against c: it returns an error wrapping
// errs.ErrNotFound if name is not live in c. It does not change c.
func (c *Catalog) Drop(name string, version Timestamp, origin ring.NodeID) (CatalogEntry, error) {
	current, ok := c.entries[name]
	if !ok || current.Dropped {
		return CatalogEntry{}, fmt.Errorf("membership: keyspace %q %w", name, errs.ErrNotFound)
	}
	if version.Compare(current.Version) <= 0 {
		return CatalogEntry{}, fmt.Errorf("membership: %w: version %s of %q is not after its creation at %s",
			ErrInvalid, version, name, current.Version)
	}
	e := CatalogEntry{Name: name, Version: version, Dropped: true, Origin: origin}
	if err := e.Validate(); err != nil {
		return CatalogEntry{}, err
	}
	return e, nil
}
