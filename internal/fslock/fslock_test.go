package fslock

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// span is the offsets the model tracks: locks start and end below span-2
// or run to OffsetMax, which covers the last offsets too.
const span = 20

// model is what each (holder, owner, kind) holds at each offset: 0 none,
// 1 read, 2 write.
type model map[[3]uint64]*[span]byte

func key(l Lock) [3]uint64 {
	k := [3]uint64{l.Holder, l.Owner, 0}
	if l.Flock {
		k[2] = 1
	}
	return k
}

func (m model) held(k [3]uint64) *[span]byte {
	if m[k] == nil {
		m[k] = &[span]byte{}
	}
	return m[k]
}

func cover(l Lock) (int, int) {
	if l.End == OffsetMax {
		return int(l.Start), span - 1
	}
	return int(l.Start), int(l.End)
}

// conflicts is the model's answer to Conflict.
func (m model) conflicts(l Lock) bool {
	lo, hi := cover(l)
	if l.Flock {
		lo, hi = 0, span-1
	}
	for k, h := range m {
		if k == key(l) || (k[2] == 1) != l.Flock {
			continue
		}
		for i := lo; i <= hi; i++ {
			if h[i] == 2 || h[i] == 1 && l.Write {
				return true
			}
		}
	}
	return false
}

func (m model) apply(l Lock, unlock bool) {
	h := m.held(key(l))
	if l.Flock {
		*h = [span]byte{}
	}
	lo, hi := cover(l)
	if l.Flock {
		lo, hi = 0, span-1
	}
	v := byte(1)
	if l.Write {
		v = 2
	}
	if unlock {
		v = 0
	}
	for i := lo; i <= hi; i++ {
		h[i] = v
	}
}

// check compares t's live locks with m, offset by offset.
func (m model) check(t *testing.T, tab Table, now int64) {
	t.Helper()
	if err := tab.Verify(now); err != nil {
		t.Fatal(err)
	}
	got := model{}
	for _, l := range tab {
		if l.Expires <= now {
			continue
		}
		h := got.held(key(l))
		lo, hi := cover(l)
		for i := lo; i <= hi; i++ {
			if h[i] != 0 {
				t.Fatalf("offset %d locked twice by %v: %+v", i, key(l), tab)
			}
			h[i] = 1
			if l.Write {
				h[i] = 2
			}
		}
	}
	for k, h := range m {
		g := got[k]
		if g == nil {
			g = &[span]byte{}
		}
		if *g != *h {
			t.Fatalf("owner %v holds %v, the model %v\n%+v", k, *g, *h, tab)
		}
	}
	for k := range got {
		if m[k] == nil {
			t.Fatalf("owner %v holds locks the model does not", k)
		}
	}
}

// TestTableModel applies random locks and unlocks of a few owners of two
// holders and checks the table against a per-offset model, its
// invariants, and Conflict's answers against the model's.
func TestTableModel(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		m := model{}
		var tab Table
		const now = 100
		conflicts := 0
		for range 200 {
			l := Lock{Holder: 1 + r.Uint64N(2), Owner: 1 + r.Uint64N(2), Flock: r.IntN(4) == 0,
				Write: r.IntN(2) == 0, Expires: now + 10}
			l.Start = r.Uint64N(span - 2)
			l.End = l.Start + r.Uint64N(span-2-l.Start)
			if r.IntN(4) == 0 {
				l.End = OffsetMax
			}
			unlock := r.IntN(3) == 0
			_, conflict := tab.Conflict(l, now)
			if want := m.conflicts(l); !unlock && conflict != want {
				t.Fatalf("seed %d: Conflict(%+v) = %v, the model %v\n%+v", seed, l, conflict, want, tab)
			}
			if conflict && !unlock {
				conflicts++
				continue
			}
			next, err := tab.Apply(l, unlock, now)
			if err != nil {
				t.Fatal(err)
			}
			tab = next
			m.apply(l, unlock)
			m.check(t, tab, now)
			back, err := Decode(tab.Encode())
			if err != nil || len(back) != len(tab) {
				t.Fatalf("seed %d: decode: %v, %d locks of %d", seed, err, len(back), len(tab))
			}
			for i := range back {
				if back[i] != tab[i] {
					t.Fatalf("seed %d: decoded %+v, encoded %+v", seed, back[i], tab[i])
				}
			}
		}
		if conflicts == 0 {
			t.Fatalf("seed %d: no conflict in 200 operations", seed)
		}
	}
}

func TestLease(t *testing.T) {
	a := Lock{Holder: 1, Owner: 1, Write: true, Start: 0, End: OffsetMax, Expires: 10}
	b := Lock{Holder: 2, Owner: 1, Write: true, Start: 5, End: 5, Expires: 30}
	tab, err := Table(nil).Apply(a, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tab.Conflict(b, 9); !ok {
		t.Fatal("a live write lock does not conflict")
	}
	if _, ok := tab.Conflict(b, 10); ok {
		t.Fatal("a lock whose lease ended conflicts")
	}
	renewed, n := tab.Renew(1, 20, 9)
	if n != 1 || renewed[0].Expires != 20 {
		t.Fatalf("renewed %+v, %d locks", renewed, n)
	}
	if _, ok := renewed.Conflict(b, 15); !ok {
		t.Fatal("a renewed lock does not conflict")
	}
	if _, n := tab.Renew(1, 20, 10); n != 0 {
		t.Fatal("a lock renewed after its lease ended")
	}
	tab, err = tab.Apply(b, false, 10)
	if err != nil || len(tab) != 1 || tab[0].Holder != 2 {
		t.Fatalf("the ended lease is not dropped: %+v, %v", tab, err)
	}
	if !tab.Held(b, 29) || tab.Held(b, 30) || tab.Held(a, 11) {
		t.Fatal("Held is wrong")
	}
	if d := renewed.Drop(2, 9); len(d) != 1 || d[0].Holder != 1 {
		t.Fatalf("Drop of another holder: %+v", d)
	}
	if d := renewed.Drop(1, 9); len(d) != 0 {
		t.Fatalf("Drop of the holder: %+v", d)
	}
	if d := renewed.Drop(2, 20); len(d) != 0 {
		t.Fatalf("Drop kept a lock whose lease ended: %+v", d)
	}
}

func TestLimitsAndCorruption(t *testing.T) {
	var tab Table
	var err error
	for i := range uint64(EntriesMax) {
		if tab, err = tab.Apply(Lock{Holder: 1, Owner: i, Start: 1, End: 1, Expires: 1}, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tab.Apply(Lock{Holder: 2, Owner: 1, Start: 1, End: 1, Expires: 1}, false, 0); !errors.Is(err, ErrTooMany) {
		t.Fatalf("lock %d: %v", EntriesMax+1, err)
	}
	for _, b := range [][]byte{{2}, {1, 0}, append(Table{{End: 1}}.Encode()[:entryBytes], 4)} {
		if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Decode(%x) = %v", b, err)
		}
	}
	bad := Table{{Start: 2, End: 1}}.Encode()
	if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a reversed range decodes: %v", err)
	}
	if Check(Lock{Start: 3, End: 2}) == nil || Check(Lock{End: OffsetMax + 1}) == nil || Check(Lock{End: OffsetMax}) != nil {
		t.Fatal("Check is wrong")
	}
}

// TestMoved checks the paths a table remembers it moved from: they
// survive encoding newest first, at most MovesMax, a table without them
// keeps the first format, and cut or padded ones are refused.
func TestMoved(t *testing.T) {
	tab := Table{{Holder: 7, Owner: 1, End: 9, Expires: 5}}
	if string(tab.EncodeMoved(nil)) != string(tab.Encode()) || tab.Encode()[0] != format {
		t.Fatal("a table that never moved is not in the first format")
	}
	var moved []string
	for _, p := range []string{"/a", "/b", "/a", "/c", "/d", "/e"} {
		moved = Moved(moved, p)
	}
	if want := []string{"/e", "/d", "/c", "/a"}; !slices.Equal(moved, want) {
		t.Fatalf("Moved kept %q, want %q", moved, want)
	}
	b := tab.EncodeMoved(moved)
	back, got, err := DecodeMoved(b)
	if err != nil || !slices.Equal(back, tab) || !slices.Equal(got, moved) {
		t.Fatalf("DecodeMoved = %+v %q %v, want %+v %q", back, got, err, tab, moved)
	}
	if plain, err := Decode(b); err != nil || !slices.Equal(plain, tab) {
		t.Fatalf("Decode of a moved table = %+v, %v", plain, err)
	}
	if Table(nil).EncodeMoved(moved) != nil {
		t.Fatal("an empty table with moves has bytes")
	}
	if !tab.Holds(7, 4) || tab.Holds(7, 5) || tab.Holds(8, 0) {
		t.Fatal("Holds is wrong")
	}
	for _, bad := range [][]byte{b[:len(b)-1], append(slices.Clone(b), 0), b[:5+entryBytes], b[:4]} {
		if _, _, err := DecodeMoved(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("DecodeMoved(%x) = %v", bad, err)
		}
	}
}
