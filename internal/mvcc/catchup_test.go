package mvcc

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/txn"
)

func statVersion(t *testing.T, s *Store, key string) uint64 {
	t.Helper()
	info, err := s.Stat(key)
	if errors.Is(err, errs.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return info.Version
}

// TestTryPrepareStep: a downstream member applies a commit only on the state
// the head had, and the head's Pending reports that state.
func TestTryPrepareStep(t *testing.T) {
	head := openStore(t, Options{MVCC: true, Now: newFakeClock().Now})
	behind := openStore(t, Options{MVCC: true, Now: newFakeClock().Now})
	for _, s := range []*Store{head, behind} {
		p, err := s.TryPrepareAt([]txn.Op{writeOp("a", "one")}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	p, err := head.TryPrepareAt([]txn.Op{writeOp("a", "two")}, 200)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	// behind missed version 200; the next commit's head had a at 200 and no b.
	ops := []txn.Op{{Key: "a", Kind: txn.OpAppend, Data: []byte("!")}, writeOp("b", "new")}
	hp, err := head.TryPrepareStep(ops, Step{Version: 300})
	if err != nil {
		t.Fatal(err)
	}
	bases := hp.Bases()
	if bases["a"].Version != 200 || bases["b"].Version != 0 || len(bases) != 2 {
		t.Fatalf("head's bases = %v, want a:200 b:0", bases)
	}
	hp.Abort()
	_, err = behind.TryPrepareStep(ops, Step{Version: 300, Bases: bases})
	var mismatch *BaseMismatchError
	if !errors.As(err, &mismatch) || mismatch.Key != "a" || mismatch.Have != 100 || mismatch.Want != 200 || !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("TryPrepareStep of a replica behind: %v; want a BaseMismatchError for a (100 here, 200 on the head)", err)
	}
	if n := lockedKeys(behind); n != 0 {
		t.Fatalf("a refused TryPrepareStep left %d keys locked", n)
	}
	if got := readString(t, behind, "a"); got != "one" {
		t.Fatalf("a refused TryPrepareStep changed a to %q", got)
	}
	// Up to date, the same commit applies.
	if _, err := behind.Install("a", 200, []byte("two")); err != nil {
		t.Fatal(err)
	}
	bp, err := behind.TryPrepareStep(ops, Step{Version: 300, Bases: bases})
	if err != nil {
		t.Fatalf("TryPrepareStep after catching up: %v", err)
	}
	if err := bp.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, behind, "a"); got != "two!" {
		t.Fatalf("a = %q after the commit, want %q", got, "two!")
	}
}

// TestInstall: a copy replaces an older blob whole, never moves a blob
// back, and creates a missing one at the copied version.
func TestInstall(t *testing.T) {
	s := openStore(t, Options{MVCC: true, Now: newFakeClock().Now})
	p, err := s.TryPrepareAt([]txn.Op{writeOp("a", "a much longer old value")}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), limits.PayloadBytesMax/16+100) // more than one op's payload
	cases := []struct {
		key     string
		version uint64
		data    []byte
		changed bool
		want    []byte
	}{
		{"a", 200, []byte("short"), true, []byte("short")},
		{"a", 150, []byte("older"), false, []byte("short")},
		{"a", 200, []byte("same"), false, []byte("short")},
		{"n", 50, big, true, big}, // below the store's newest version: copies keep theirs
		{"e", 60, nil, true, nil},
	}
	for _, c := range cases {
		changed, err := s.Install(c.key, c.version, c.data)
		if err != nil || changed != c.changed {
			t.Fatalf("Install(%s, %d) = %v, %v; want %v", c.key, c.version, changed, err, c.changed)
		}
		var got []byte
		var info BlobInfo
		for off := uint64(0); ; {
			part, i, err := s.Read(c.key, off, limits.PayloadBytesMax)
			if err != nil {
				t.Fatal(err)
			}
			got, info, off = append(got, part...), i, off+uint64(len(part))
			if len(part) == 0 || off >= i.Size {
				break
			}
		}
		if !bytes.Equal(got, c.want) || info.Size != uint64(len(c.want)) {
			t.Fatalf("after Install(%s, %d): %d bytes (size %d), want %d", c.key, c.version, len(got), info.Size, len(c.want))
		}
	}
	if v := statVersion(t, s, "n"); v != 50 {
		t.Fatalf("n is at version %d, want the copied 50", v)
	}
	if _, err := s.Install("z", 0, nil); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("Install at version 0: %v, want ErrInvalidArgument", err)
	}
	// A new blob after the copies still gets a version above all of them.
	p, err = s.TryPrepareAt([]txn.Op{writeOp("new", "x")}, 199)
	var stale *StaleVersionError
	if !errors.As(err, &stale) || stale.Floor != 200 {
		t.Fatalf("creating a blob at 199 after a copy at 200: %v, %v; want a StaleVersionError with floor 200", p, err)
	}
}

// TestDeleteAt: only the version catch-up saw is deleted.
func TestDeleteAt(t *testing.T) {
	s := openStore(t, Options{MVCC: true, Now: newFakeClock().Now})
	if _, err := s.Install("a", 100, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if deleted, err := s.DeleteAt("a", 99); err != nil || deleted {
		t.Fatalf("DeleteAt(a, 99) with a at 100 = %v, %v; want false", deleted, err)
	}
	if deleted, err := s.DeleteAt("missing", 0); err != nil || deleted {
		t.Fatalf("DeleteAt(missing) = %v, %v; want false", deleted, err)
	}
	if deleted, err := s.DeleteAt("a", 100); err != nil || !deleted {
		t.Fatalf("DeleteAt(a, 100) = %v, %v; want true", deleted, err)
	}
	if v := statVersion(t, s, "a"); v != 0 {
		t.Fatalf("a still at version %d after DeleteAt", v)
	}
}
