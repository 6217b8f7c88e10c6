package server

// Tests of the sweep of orphaned hidden blobs (fshidden.go) on a Service
// over a local engine: an orphan unchanged for the grace is deleted, a
// staple's data blob and blobs that only look hidden stay. The re-pointing
// commit that loses to a sweep is tested in tyrfs (TestRelocateSwept).

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/fslayout"
)

// putBlob creates blob key holding b.
func putBlob(t *testing.T, s *Service, key string, b []byte) {
	t.Helper()
	commitOps(t, s, &tyrpb.Op{Key: []byte(key), Kind: &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Data: b, Create: true}}})
}

// queued drains d's queue and returns its jobs.
func queued(d *dirCompactor) []dirJob {
	var out []dirJob
	for {
		select {
		case j := <-d.queue:
			out = append(out, j)
		default:
			return out
		}
	}
}

func TestHiddenSweep(t *testing.T) {
	s := newFSService(t)
	d := s.dirs
	d.sweep.defaults()
	movedOut := func(size int) []byte {
		h := fslayout.EncodeHeader(fslayout.Attr{Kind: fslayout.KindFile, Mode: 0o644})
		fslayout.SetFlags(h, fslayout.FlagMovedOut)
		return append(h, make([]byte, size)...)
	}
	orphan, owned, small, foreign := fslayout.HiddenKey(1), fslayout.HiddenKey(2), fslayout.HiddenKey(3), fslayout.HiddenKey(4)
	putBlob(t, s, orphan, movedOut(10000))
	putBlob(t, s, small, movedOut(0))
	putBlob(t, s, owned, movedOut(100))
	putBlob(t, s, fslayout.BackKey(owned), []byte("/staple"))
	putBlob(t, s, foreign, []byte("not a TýrFS blob, only named like one"))
	h := movedOut(0)
	fslayout.SetFlags(h, 0)
	plain := fslayout.HiddenKey(5)
	putBlob(t, s, plain, h)
	putBlob(t, s, "%short", movedOut(10)) // no hidden key

	// Within the grace, nothing is queued.
	d.sweep.grace = time.Hour
	d.scanHidden()
	if js := queued(d); len(js) != 0 {
		t.Fatalf("within the grace, queued %v", js)
	}

	// Past it, every blob named as a hidden one is, over rounds of
	// hiddenScanBatch; only the two orphans go.
	d.sweep.grace = time.Nanosecond
	time.Sleep(time.Millisecond)
	d.scanHidden()
	var keys []string
	for _, j := range queued(d) {
		if j.kind != jobSweep || j.ks != fsKS {
			t.Fatalf("queued %+v", j)
		}
		keys = append(keys, j.key)
		d.check(context.Background(), j)
	}
	slices.Sort(keys)
	if want := []string{orphan, owned, small, foreign, plain}; !slices.Equal(keys, want) {
		t.Fatalf("queued %q, want %q", keys, want)
	}
	for key, kept := range map[string]bool{orphan: false, small: false, owned: true, foreign: true, plain: true, "%short": true} {
		_, err := s.readPart(context.Background(), dirRef{fsKS, key}, 0, 0, 0)
		if exists := err == nil; exists != kept {
			t.Errorf("%s: exists %v (%v), want %v", key, exists, err, kept)
		}
	}
	if got := d.sweep.counts[slices.Index(dirOutcomes, dirCompacted)].Load(); got != 2 {
		t.Errorf("reclaimed %d, want 2", got)
	}
	if got := d.sweep.counts[slices.Index(dirOutcomes, dirSkipped)].Load(); got != 3 {
		t.Errorf("skipped %d, want 3", got)
	}
	// The back name stays too.
	if got := string(readBlob(t, s, fslayout.BackKey(owned))); got != "/staple" {
		t.Errorf("back name %q", got)
	}

	// The worker scans on its own, every d.sweep.every.
	later := fslayout.HiddenKey(6)
	putBlob(t, s, later, movedOut(10))
	d.sweep.every = 10 * time.Millisecond
	defer s.StartDirCompaction(0, time.Nanosecond)()
	waitCompactor(t, "the worker sweeps "+later, func() bool {
		_, err := s.readPart(context.Background(), dirRef{fsKS, later}, 0, 0, 0)
		return errors.Is(err, errs.ErrNotFound)
	})
	if _, err := s.readPart(context.Background(), dirRef{fsKS, owned}, 0, 0, 0); err != nil {
		t.Errorf("%s, in use, is gone: %v", owned, err)
	}
}

// The scan goes through a keyspace in rounds of hiddenScanBatch and starts
// again from the first once it reached the end.
func TestHiddenScanRounds(t *testing.T) {
	s := newFSService(t)
	d := s.dirs
	d.sweep.defaults()
	d.sweep.grace = time.Nanosecond
	n := hiddenScanBatch + 10
	h := fslayout.EncodeHeader(fslayout.Attr{Kind: fslayout.KindFile, Mode: 0o644})
	for i := range n {
		putBlob(t, s, fslayout.HiddenKey(uint64(i)), h)
	}
	time.Sleep(time.Millisecond)
	var rounds []int
	for range 3 {
		d.scanHidden()
		rounds = append(rounds, len(queued(d)))
	}
	if want := []int{hiddenScanBatch, 10, hiddenScanBatch}; !slices.Equal(rounds, want) {
		t.Fatalf("rounds queued %v, want %v", rounds, want)
	}
}
