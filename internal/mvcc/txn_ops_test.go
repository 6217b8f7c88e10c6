package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/txn"
)

func atomicOp(key string, off uint64, width int, fn txn.AtomicFunc, operand uint64) txn.Op {
	return txn.Op{Key: key, Kind: txn.OpAtomic, Offset: off, Width: width, Func: fn, Operand: operand}
}

func TestAtomicFuncs(t *testing.T) {
	neg := func(v int64) uint64 { return uint64(v) }
	cases := []struct {
		fn           txn.AtomicFunc
		width        int
		cur, operand uint64
		want         uint64
	}{
		{txn.FuncAdd, 1, 0xff, 1, 0},
		{txn.FuncAdd, 2, 0xfffe, 3, 1},
		{txn.FuncAdd, 4, 0xffffffff, 2, 1},
		{txn.FuncAdd, 8, ^uint64(0), 1, 0},
		{txn.FuncAdd, 1, 5, 0x1ff, 4}, // operand truncated to the width
		{txn.FuncSub, 1, 0, 1, 0xff},
		{txn.FuncSub, 2, 10, 3, 7},
		{txn.FuncSub, 4, 0, 1, 0xffffffff},
		{txn.FuncSub, 8, 0, 1, ^uint64(0)},
		{txn.FuncMul, 1, 16, 16, 0},
		{txn.FuncMul, 2, 300, 300, (300 * 300) & 0xffff},
		{txn.FuncMul, 4, 1 << 16, 1 << 16, 0},
		{txn.FuncMul, 8, 1 << 32, 1 << 33, 0},
		{txn.FuncAnd, 1, 0xf0, 0x3c, 0x30},
		{txn.FuncAnd, 8, ^uint64(0), 0x1234, 0x1234},
		{txn.FuncOr, 2, 0x0f00, 0x00f0, 0x0ff0},
		{txn.FuncOr, 4, 1, 2, 3},
		{txn.FuncXor, 4, 0xffff0000, 0xff00ff00, 0x00ffff00},
		{txn.FuncXor, 8, 5, 5, 0},
		{txn.FuncMinSigned, 1, 5, 0xff, 0xff}, // -1 < 5
		{txn.FuncMinSigned, 2, 0x8000, 1, 0x8000},
		{txn.FuncMinSigned, 4, 3, 7, 3},
		{txn.FuncMinSigned, 8, 3, neg(-3), neg(-3)},
		{txn.FuncMaxSigned, 1, 0x80, 0x7f, 0x7f}, // 127 > -128
		{txn.FuncMaxSigned, 2, 0xffff, 0, 0},
		{txn.FuncMaxSigned, 4, 0xfffffffe, 0xffffffff, 0xffffffff},
		{txn.FuncMaxSigned, 8, neg(-5), neg(-7), neg(-5)},
		{txn.FuncMinUnsigned, 1, 5, 0xff, 5},
		{txn.FuncMinUnsigned, 2, 0x8000, 1, 1},
		{txn.FuncMinUnsigned, 4, 0xffffffff, 0xfffffffe, 0xfffffffe},
		{txn.FuncMinUnsigned, 8, neg(-1), 2, 2},
		{txn.FuncMaxUnsigned, 1, 0x80, 0x7f, 0x80},
		{txn.FuncMaxUnsigned, 2, 1, 0xffff, 0xffff},
		{txn.FuncMaxUnsigned, 4, 9, 8, 9},
		{txn.FuncMaxUnsigned, 8, neg(-1), 2, neg(-1)},
		{txn.FuncSet, 1, 7, 0x1234, 0x34},
		{txn.FuncSet, 2, 7, 0x1234, 0x1234},
		{txn.FuncSet, 4, 7, 0, 0},
		{txn.FuncSet, 8, 7, neg(-1), neg(-1)},
	}
	s := openStore(t, Options{MVCC: true})
	for i, c := range cases {
		// The value sits across a page boundary, to show that it just works.
		off := uint64(PageBytes - c.width/2)
		key := "k"
		var init [8]byte
		binary.LittleEndian.PutUint64(init[:], c.cur)
		mustCommit(t, s, txn.Op{Key: key, Kind: txn.OpWrite, Offset: off - 1, Data: append([]byte{0xaa}, append(init[:c.width], 0xbb)...), Create: true})
		res := mustCommit(t, s, atomicOp(key, off, c.width, c.fn, c.operand))
		if res[0].Value != c.want {
			t.Errorf("case %d: %s/%d of %#x and %#x = %#x, want %#x", i, c.fn, c.width, c.cur, c.operand, res[0].Value, c.want)
		}
		got := mustRead(t, s, key, off-1, uint64(c.width)+2)
		var want [8]byte
		binary.LittleEndian.PutUint64(want[:], c.want)
		if !bytes.Equal(got, append([]byte{0xaa}, append(want[:c.width], 0xbb)...)) {
			t.Errorf("case %d: stored %x", i, got)
		}
		if f := txn.AtomicFunc(c.fn).Apply(c.width, c.cur, c.operand); f != c.want {
			t.Errorf("case %d: Apply = %#x", i, f)
		}
		mustCommit(t, s, txn.Op{Key: key, Kind: txn.OpDelete})
	}
}

func TestAtomicExtendsAndSequences(t *testing.T) {
	s := openStore(t, Options{MVCC: true})
	mustCommit(t, s, txn.Op{Key: "c", Kind: txn.OpCreate})
	// Past the end: the blob is extended with zeros first.
	res := mustCommit(t, s, atomicOp("c", 10, 8, txn.FuncAdd, 5), atomicOp("c", 10, 8, txn.FuncAdd, 5),
		atomicOp("c", 10, 2, txn.FuncMul, 3))
	if res[0].Value != 5 || res[1].Value != 10 || res[2].Value != 30 || res[2].Size != 18 {
		t.Fatalf("results %+v", res)
	}
	got := mustRead(t, s, "c", 0, 100)
	want := make([]byte, 18)
	want[10] = 30
	if !bytes.Equal(got, want) {
		t.Fatalf("blob %x, want %x", got, want)
	}
	if _, err := commit(s, atomicOp("missing", 0, 8, txn.FuncAdd, 1)); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("atomic on a missing blob: %v", err)
	}
}

func TestCompareAndSwap(t *testing.T) {
	s := openStore(t, Options{MVCC: true})
	mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("hello world"), Create: true},
		txn.Op{Key: "b", Kind: txn.OpCreate})
	before, _ := s.Stat("a")
	cas := func(off uint64, expected, data string) txn.Op {
		return txn.Op{Key: "a", Kind: txn.OpCompareAndSwap, Offset: off, Expected: []byte(expected), Data: []byte(data)}
	}
	// Failure: nothing of the commit happens, not even the ops before it.
	_, err := commit(s, txn.Op{Key: "b", Kind: txn.OpWrite, Data: []byte("x")}, cas(6, "WORLD", "there"))
	if !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("failed CAS: %v, want ErrConflict", err)
	}
	if got := mustRead(t, s, "a", 0, 100); string(got) != "hello world" {
		t.Fatalf("after failed CAS: %q", got)
	}
	if info, _ := s.Stat("b"); info.Size != 0 {
		t.Fatalf("op before a failed CAS applied: %+v", info)
	}
	if after, _ := s.Stat("a"); after.Version != before.Version {
		t.Fatal("failed CAS changed the version")
	}
	// Success, and a second CAS in the same commit sees the first.
	mustCommit(t, s, cas(6, "world", "there"), cas(0, "hello there", "HELLO THERE"))
	if got := mustRead(t, s, "a", 0, 100); string(got) != "HELLO THERE" {
		t.Fatalf("after CAS: %q", got)
	}
	// Past the end compares zeros and extends.
	mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpCompareAndSwap, Offset: 12, Expected: []byte{0, 0}, Data: []byte("!!")})
	if got := mustRead(t, s, "a", 0, 100); string(got) != "HELLO THERE\x00!!" {
		t.Fatalf("after extending CAS: %q", got)
	}
}

func TestReadChecks(t *testing.T) {
	s := openStore(t, Options{MVCC: true})
	res := mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("1"), Create: true})
	va := res[0].Version
	check := func(key string, v uint64) txn.Op { return txn.Op{Key: key, Kind: txn.OpReadCheck, Version: v} }
	// Passing checks, including absence and a commit of only checks.
	mustCommit(t, s, check("a", va), check("nope", 0))
	res = mustCommit(t, s, check("a", va), check("b", 0), txn.Op{Key: "b", Kind: txn.OpWrite, Data: []byte("2"), Create: true})
	if len(res) != 3 || res[2].Size != 1 {
		t.Fatalf("results %+v", res)
	}
	// Failing checks change nothing; the check is evaluated before the ops
	// even when listed after them.
	for _, ops := range [][]txn.Op{
		{txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("X")}, check("a", va+1)},
		{txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("X")}, check("b", 0)},
		{txn.Op{Key: "c", Kind: txn.OpWrite, Data: []byte("X"), Create: true}, check("c", 1)},
	} {
		if _, err := commit(s, ops...); !errors.Is(err, errs.ErrConflict) {
			t.Fatalf("failing check %v: %v", ops, err)
		}
	}
	if got := mustRead(t, s, "a", 0, 10); string(got) != "1" {
		t.Fatalf("a = %q after failed checks", got)
	}
	if _, err := s.Stat("c"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatal("c created by a failed commit")
	}
	// A write to a checked blob invalidates its old version.
	mustCommit(t, s, txn.Op{Key: "a", Kind: txn.OpWrite, Data: []byte("Z")})
	if _, err := commit(s, check("a", va)); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("stale check: %v", err)
	}
}

func TestReadAtVersion(t *testing.T) {
	clock := newFakeClock()
	s := openStore(t, Options{MVCC: true, Retention: time.Minute, Now: clock.Now})
	big := bytes.Repeat([]byte("a"), PageBytes+100)
	v1 := mustCommit(t, s, txn.Op{Key: "k", Kind: txn.OpWrite, Data: big, Create: true})[0].Version
	clock.Advance(time.Second)
	v2 := mustCommit(t, s, txn.Op{Key: "k", Kind: txn.OpAppend, Data: []byte("bbb")},
		txn.Op{Key: "k", Kind: txn.OpWrite, Offset: 0, Data: []byte("XY")})[0].Version
	clock.Advance(time.Second)
	v3 := mustCommit(t, s, txn.Op{Key: "k", Kind: txn.OpWrite, Offset: PageBytes, Data: []byte("Q")})[0].Version
	read := func(v uint64, off, n uint64) ([]byte, BlobInfo, error) { return s.ReadAt("k", off, n, v) }
	for _, c := range []struct {
		v    uint64
		size uint64
		head string
		at   string // byte at PageBytes
	}{{v1, uint64(len(big)), "aa", "a"}, {v2, uint64(len(big)) + 3, "XY", "a"}, {v3, uint64(len(big)) + 3, "XY", "Q"}} {
		data, info, err := read(c.v, 0, 1<<20)
		if err != nil {
			t.Fatalf("read at %d: %v", c.v, err)
		}
		if info.Version != c.v || info.Size != c.size || uint64(len(data)) != c.size ||
			string(data[:2]) != c.head || string(data[PageBytes:PageBytes+1]) != c.at {
			t.Fatalf("read at %d: info %+v, %d bytes, head %q", c.v, info, len(data), data[:2])
		}
	}
	if _, _, err := read(v1+1, 0, 1); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("read at a version the blob never had: %v", err)
	}
	// A shrinking truncate drops pages of older versions: reads of those
	// versions fail, reads of versions that fit still work.
	clock.Advance(time.Second)
	mustCommit(t, s, txn.Op{Key: "k", Kind: txn.OpTruncate, Size: 10})
	if _, _, err := read(v2, 0, 1); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("read of a version a truncate cut: %v", err)
	}
	// After retention: no longer retained.
	mustCommit(t, s, txn.Op{Key: "s", Kind: txn.OpWrite, Data: []byte("old"), Create: true})
	info, _ := s.Stat("s")
	mustCommit(t, s, txn.Op{Key: "s", Kind: txn.OpWrite, Data: []byte("new")})
	if data, _, err := s.ReadAt("s", 0, 10, info.Version); err != nil || string(data) != "old" {
		t.Fatalf("read of a retained version: %q, %v", data, err)
	}
	clock.Advance(2 * time.Minute)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReadAt("s", 0, 10, info.Version); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("read after retention: %v", err)
	}
	if countKeys(t, s, prefixHistory) != 0 || countKeys(t, s, prefixHistGC) != 0 {
		t.Fatal("history left after collection")
	}
	// Delete drops the history.
	cur, _ := s.Stat("s")
	mustCommit(t, s, txn.Op{Key: "s", Kind: txn.OpDelete})
	if _, _, err := s.ReadAt("s", 0, 10, cur.Version); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("read of a deleted blob at its version: %v", err)
	}
	// MVCC off keeps only the current version.
	off := openStore(t, Options{})
	v := mustCommit(t, off, txn.Op{Key: "k", Kind: txn.OpWrite, Data: []byte("1"), Create: true})[0].Version
	if data, _, err := off.ReadAt("k", 0, 10, v); err != nil || string(data) != "1" {
		t.Fatalf("MVCC off, current version: %q %v", data, err)
	}
	mustCommit(t, off, txn.Op{Key: "k", Kind: txn.OpWrite, Data: []byte("2")})
	if _, _, err := off.ReadAt("k", 0, 10, v); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("MVCC off, old version: %v", err)
	}
}
