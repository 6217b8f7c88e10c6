// Tests of the pure catalog and the wire formats: the catalog merge is a
// join over a total order (commutative, associative, idempotent, and blind
// to the order and repetition of entries), shown by property tests over
// random catalogs drawn from small sets of names, versions and configs so
// that ties are frequent; creation and drop rules and limits; the hybrid
// clock; and round trips and rejection of malformed input for catalog
// entries and push/pull states. Randomized tests print their seed;
// reproduce a failure with
//
//	go test ./internal/membership/ -run TestCatalog_Merge_properties -seed=N
package membership

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/ring"
)

var seedFlag = flag.Int64("seed", 0, "seed for the randomized tests; 0 picks one from the clock")

// testSeed returns the seed for a randomized test and logs it.
func testSeed(t *testing.T) int64 {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
	return seed
}

// randomEntry draws an entry from small domains, so that names collide and
// versions tie often.
func randomEntry(rng *rand.Rand) CatalogEntry {
	e := CatalogEntry{
		Name:    fmt.Sprintf("ks-%d", rng.IntN(5)),
		Version: Timestamp{WallNanos: int64(1 + rng.IntN(4)), Logical: uint32(rng.IntN(2))},
		Dropped: rng.IntN(3) == 0,
		Origin:  ring.NodeID(fmt.Sprintf("n%d", rng.IntN(3))),
	}
	if !e.Dropped {
		e.Config = []byte(fmt.Sprintf("cfg-%d", rng.IntN(3)))
	}
	return e
}

func randomCatalog(t *testing.T, rng *rand.Rand) *Catalog {
	t.Helper()
	var c Catalog
	for range rng.IntN(12) {
		if _, err := c.Merge(randomEntry(rng)); err != nil {
			t.Fatal(err)
		}
	}
	return &c
}

// merged returns a copy of a with every entry of b merged in.
func merged(t *testing.T, a, b *Catalog) *Catalog {
	t.Helper()
	out := a.Clone()
	if _, err := out.MergeAll(b.Entries()); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameCatalog(a, b *Catalog) bool { return reflect.DeepEqual(a.Entries(), b.Entries()) }

func TestCatalog_Merge_properties(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	for round := range 2000 {
		a, b, c := randomCatalog(t, rng), randomCatalog(t, rng), randomCatalog(t, rng)
		if !sameCatalog(merged(t, a, b), merged(t, b, a)) {
			t.Fatalf("seed %d round %d: merge not commutative:\na=%v\nb=%v", seed, round, a.Entries(), b.Entries())
		}
		if !sameCatalog(merged(t, merged(t, a, b), c), merged(t, a, merged(t, b, c))) {
			t.Fatalf("seed %d round %d: merge not associative:\na=%v\nb=%v\nc=%v", seed, round, a.Entries(), b.Entries(), c.Entries())
		}
		if !sameCatalog(merged(t, a, a), a) {
			t.Fatalf("seed %d round %d: merge not idempotent: %v", seed, round, a.Entries())
		}
		if changed, _ := a.Clone().MergeAll(a.Entries()); changed {
			t.Fatalf("seed %d round %d: merging a catalog into itself reported a change", seed, round)
		}
	}
}

// TestCatalog_Merge_orderInsensitive merges one multiset of entries, one
// at a time, in random orders and with repeats, into fresh catalogs.
func TestCatalog_Merge_orderInsensitive(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	for round := range 300 {
		entries := make([]CatalogEntry, 1+rng.IntN(20))
		for i := range entries {
			entries[i] = randomEntry(rng)
		}
		var reference Catalog
		for _, e := range entries {
			if _, err := reference.Merge(e); err != nil {
				t.Fatal(err)
			}
		}
		for range 5 {
			shuffled := append(entries[:len(entries):len(entries)], entries[rng.IntN(len(entries))])
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			var c Catalog
			for _, e := range shuffled {
				if _, err := c.Merge(e); err != nil {
					t.Fatal(err)
				}
			}
			if !sameCatalog(&c, &reference) {
				t.Fatalf("seed %d round %d: order of merges changed the catalog", seed, round)
			}
		}
	}
}

func TestCatalog_Merge_tieRules(t *testing.T) {
	v := Timestamp{WallNanos: 10}
	live := CatalogEntry{Name: "logs", Config: []byte("x"), Version: v, Origin: "a"}
	dropped := CatalogEntry{Name: "logs", Version: v, Dropped: true, Origin: "a"}
	var c Catalog
	mustMerge(t, &c, live)
	if !mustMerge(t, &c, dropped) {
		t.Fatal("a tombstone did not win a tie with a live entry")
	}
	if mustMerge(t, &c, live) {
		t.Fatal("a live entry beat a tombstone of the same version")
	}
	newer := CatalogEntry{Name: "logs", Config: []byte("y"), Version: Timestamp{WallNanos: 10, Logical: 1}, Origin: "a"}
	if !mustMerge(t, &c, newer) {
		t.Fatal("a newer creation did not beat an older tombstone")
	}
}

func mustMerge(t *testing.T, c *Catalog, e CatalogEntry) bool {
	t.Helper()
	changed, err := c.Merge(e)
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

func TestCatalog_CreateDrop(t *testing.T) {
	var c Catalog
	var clock Clock
	create := func(name string) (CatalogEntry, error) {
		e, err := c.Create(name, []byte("cfg"), clock.Now(1), "n1")
		if err == nil {
			mustMerge(t, &c, e)
		}
		return e, err
	}
	drop := func(name string) (CatalogEntry, error) {
		e, err := c.Drop(name, clock.Now(1), "n1")
		if err == nil {
			mustMerge(t, &c, e)
		}
		return e, err
	}
	if _, err := create("logs"); err != nil {
		t.Fatal(err)
	}
	if _, err := create("logs"); !errors.Is(err, errs.ErrExists) {
		t.Fatalf("second create = %v, want ErrExists", err)
	}
	if _, err := create("Bad_Name"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("create with a bad name = %v, want ErrInvalid", err)
	}
	if _, err := c.Create("big", make([]byte, CatalogConfigBytesMax+1), clock.Now(1), "n1"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("create with a large config = %v, want ErrInvalid", err)
	}
	if _, err := drop("nope"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("drop of a missing keyspace = %v, want ErrNotFound", err)
	}
	tomb, err := drop("logs")
	if err != nil || !tomb.Dropped || tomb.Config != nil {
		t.Fatalf("drop = %+v, %v", tomb, err)
	}
	if _, err := drop("logs"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("second drop = %v, want ErrNotFound", err)
	}
	again, err := create("logs")
	if err != nil || again.Version.Compare(tomb.Version) <= 0 {
		t.Fatalf("re-create after drop = %+v, %v", again, err)
	}
	if c.Len() != 1 || c.LiveCount() != 1 || len(c.Live()) != 1 {
		t.Fatalf("catalog: %d entries, %d live", c.Len(), c.LiveCount())
	}
	// A write must order after what it replaces.
	if _, err := c.Drop("logs", Timestamp{WallNanos: 1}, "n1"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("drop with an old version = %v, want ErrInvalid", err)
	}
}

func TestCatalog_limits(t *testing.T) {
	var c Catalog
	version := Timestamp{WallNanos: 1}
	name := func(i int) string { return fmt.Sprintf("ks-%05d", i) }
	for i := range limits.KeyspacesMax {
		mustMerge(t, &c, CatalogEntry{Name: name(i), Version: version, Origin: "n"})
	}
	if _, err := c.Create("one-more", nil, Timestamp{WallNanos: 2}, "n"); !errors.Is(err, ErrCatalogFull) {
		t.Fatalf("create beyond limits.KeyspacesMax live keyspaces = %v, want ErrCatalogFull", err)
	}
	for i := limits.KeyspacesMax; i < CatalogEntriesMax; i++ {
		mustMerge(t, &c, CatalogEntry{Name: name(i), Version: version, Dropped: true, Origin: "n"})
	}
	mustMerge(t, &c, CatalogEntry{Name: name(0), Version: Timestamp{WallNanos: 2}, Dropped: true, Origin: "n"})
	if _, err := c.Create("one-more", nil, Timestamp{WallNanos: 3}, "n"); !errors.Is(err, ErrCatalogFull) {
		t.Fatalf("create with CatalogEntriesMax entries = %v, want ErrCatalogFull", err)
	}
	if _, err := c.Create(name(0), nil, Timestamp{WallNanos: 3}, "n"); err != nil {
		t.Fatalf("re-creating a dropped name in a full catalog = %v; it adds no entry", err)
	}
	for i := CatalogEntriesMax; i < CatalogEntriesHardMax; i++ {
		mustMerge(t, &c, CatalogEntry{Name: name(i), Version: version, Dropped: true, Origin: "n"})
	}
	if changed, err := c.Merge(CatalogEntry{Name: "one-more", Version: version, Origin: "n"}); !errors.Is(err, ErrCatalogFull) || changed {
		t.Fatalf("merge beyond CatalogEntriesHardMax = %v, %v; want ErrCatalogFull", changed, err)
	}
}

func TestClock(t *testing.T) {
	var c Clock
	a := c.Now(100)
	b := c.Now(100)
	d := c.Now(50) // the wall clock stepped back
	if a != (Timestamp{100, 0}) || b != (Timestamp{100, 1}) || d != (Timestamp{100, 2}) {
		t.Fatalf("Now = %v, %v, %v", a, b, d)
	}
	c.Observe(Timestamp{500, 7})
	if got := c.Now(200); got != (Timestamp{500, 8}) {
		t.Fatalf("Now after observing a later timestamp = %v, want 500.8", got)
	}
	c.Observe(Timestamp{1, 0})
	if got := c.Now(600); got != (Timestamp{600, 0}) {
		t.Fatalf("Now after the wall clock passed = %v, want 600.0", got)
	}
	c.Observe(Timestamp{700, math.MaxUint32})
	if got := c.Now(0); got != (Timestamp{701, 0}) {
		t.Fatalf("Now at the logical limit = %v, want 701.0", got)
	}
}

func sampleState() ([]Member, []CatalogEntry) {
	leaving := meta("b", 2)
	leaving.Leaving, leaving.Incarnation, leaving.Weight = true, 3, 7
	members := []Member{
		{Meta: meta("a", 1), State: StateAlive, GossipAddr: "127.0.0.1:1"},
		{Meta: leaving, State: StateLeft},
		{Meta: meta("c", 3), State: StateDead, GossipAddr: "[::1]:3"},
	}
	entries := []CatalogEntry{
		{Name: "logs", Config: []byte{1, 2, 3}, Version: Timestamp{-5, 2}, Origin: "a"},
		{Name: "old", Version: Timestamp{9, 0}, Dropped: true, Origin: "b"},
		{Name: strings.Repeat("k", limits.KeyspaceNameBytesMax), Config: bytes.Repeat([]byte{0xff}, CatalogConfigBytesMax),
			Version: Timestamp{math.MaxInt64, math.MaxUint32}, Origin: ring.NodeID(strings.Repeat("o", ring.NodeIDBytesMax))},
	}
	return members, entries
}

func TestState_roundTrip(t *testing.T) {
	members, entries := sampleState()
	b := encodeState(members, entries)
	gotMembers, gotEntries, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotMembers, members) || !reflect.DeepEqual(gotEntries, entries) {
		t.Fatalf("round trip:\n got %+v\n     %+v\nwant %+v\n     %+v", gotMembers, gotEntries, members, entries)
	}
	if got, err := decodeCatalogEntry(encodeCatalogMessage(entries[2])[1:]); err != nil || !reflect.DeepEqual(got, entries[2]) {
		t.Fatalf("catalog message round trip = %+v, %v", got, err)
	}
	if n := len(encodeCatalogMessage(entries[2])); n > BroadcastBytesMax+1 {
		t.Fatalf("largest catalog message is %d bytes, over the broadcast limit", n)
	}
	if _, _, err := decodeState(encodeState(nil, nil)); err != nil {
		t.Fatalf("empty state: %v", err)
	}
}

// TestState_rejectsMalformed checks that every truncation and a set of
// corruptions of a valid state are refused with ErrMalformed or ErrInvalid,
// never a panic and never a partial result.
func TestState_rejectsMalformed(t *testing.T) {
	members, entries := sampleState()
	good := encodeState(members, entries)
	for i := range len(good) - 1 {
		if m, c, err := decodeState(good[:i]); !errors.Is(err, errs.ErrInvalidArgument) || m != nil || c != nil {
			t.Fatalf("truncated to %d bytes: %v", i, err)
		}
	}
	forged := []byte{stateFormatV1, 0xff, 0xff, 0xff, 0x7f} // a huge member count
	if _, _, err := decodeState(forged); !errors.Is(err, ErrMalformed) {
		t.Fatalf("forged count: %v", err)
	}
	badState := encodeState([]Member{{Meta: meta("a", 1), State: 9}}, nil)
	if _, _, err := decodeState(badState); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad member state: %v", err)
	}
	badEntry := encodeState(nil, []CatalogEntry{{Name: "NO", Version: Timestamp{1, 0}, Origin: "a"}})
	if _, _, err := decodeState(badEntry); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid catalog entry: %v", err)
	}
	if _, _, err := decodeState(make([]byte, stateBytesMax+1)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("oversized state: %v", err)
	}
}

// FuzzDecodeState feeds arbitrary bytes to the push/pull decoder, which
// must never panic and must return only valid members and entries. Run it
// with go test ./internal/membership/ -fuzz FuzzDecodeState.
func FuzzDecodeState(f *testing.F) {
	members, entries := sampleState()
	f.Add(encodeState(members, entries))
	f.Add(encodeState(nil, nil))
	f.Add([]byte{1, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, cs, err := decodeState(b)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.Meta.Validate() != nil || m.State < StateAlive || m.State >= stateEnd {
				t.Fatalf("decoded an invalid member %+v", m)
			}
		}
		for _, c := range cs {
			if c.Validate() != nil {
				t.Fatalf("decoded an invalid entry %+v", c)
			}
		}
	})
}
