package mvcc

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tyrstore/tyr/internal/errs"
)

// Trimming after a ring change. Once an old owner's chunks have moved to
// their new owners, it drops what it no longer holds (Trim): a blob of which
// it holds no part as a whole, and from a blob it keeps, the pages of each
// chunk it gave up and, unless it manages the blob, the chunk's version.
// A version manager keeps every chunk's version (see Placement), so it
// drops only the pages.

// trimScanMax bounds the chunks Trim asks the placement about to find
// whether the store holds any part of a blob; past it, it keeps the blob
// (and still drops the pages and versions of the chunks it does not hold).
const trimScanMax = 1 << 16

// Trimmed is what a trim dropped of one blob.
type Trimmed struct {
	// Blob: the whole blob was dropped.
	Blob bool
	// Chunks is how many chunks of a blob kept lost their pages or their
	// versions.
	Chunks int
}

// Changed reports whether the trim dropped anything.
func (t Trimmed) Changed() bool { return t.Blob || t.Chunks > 0 }

// Trim drops what this store keeps of blob key that pl says it does not
// hold, under the blob's lock, and reports whether anything changed: the
// whole blob if the store neither manages it nor holds any of its chunks,
// else the pages of each chunk it does not hold and, unless it manages the
// blob, their chunk versions, in one batch. A blob with nothing to drop
// writes nothing. The space freed is marked for reclaim (reclaim.go).
func (s *Store) Trim(key string, pl Placement) (bool, error) {
	t, err := s.TrimChunks(key, pl)
	return t.Changed(), err
}

// TrimChunks is Trim, reporting what it dropped.
func (s *Store) TrimChunks(key string, pl Placement) (Trimmed, error) {
	if pl == nil {
		return Trimmed{}, nil // the store keeps everything
	}
	keys := []string{key}
	s.locks.lock(keys)
	defer s.locks.unlock(keys)
	rec, err := readRecord(s.db, key)
	if err != nil || !rec.Exists {
		return Trimmed{}, err
	}
	n := (rec.Size + s.chunkBytes - 1) / s.chunkBytes
	manages := pl.Manages(key)
	if !manages && !s.holdsAny(pl, key, n) {
		if err := s.dropBlob(key, rec.Size, rec.Version); err != nil {
			return Trimmed{}, err
		}
		return Trimmed{Blob: true}, nil
	}

	dropped := map[uint64]bool{}
	var removed uint64
	b := s.db.NewBatch()
	err = s.trimPages(b, key, pl, n, rec.Size, dropped, &removed)
	if err == nil && !manages {
		for c := range rec.Chunks {
			if c < n && !pl.Holds(key, c) {
				dropped[c] = true
				err = b.Delete(chunkKey(key, c), nil)
			}
			if err != nil {
				break
			}
		}
	}
	if err == nil && b.Empty() {
		_ = b.Close()
		return Trimmed{}, nil
	}
	if removed = min(removed, rec.Size); err == nil && removed > 0 {
		err = markReclaim(b, key, removed, s.opts.Now())
	}
	if err := commitBatch(b, err, s.opts.Sync); err != nil {
		return Trimmed{}, err
	}
	return Trimmed{Chunks: len(dropped)}, nil
}

// holdsAny reports whether pl holds a chunk of key below chunk n; past
// trimScanMax chunks it answers yes.
func (s *Store) holdsAny(pl Placement, key string, n uint64) bool {
	if n > trimScanMax {
		return true
	}
	for c := range n {
		if pl.Holds(key, c) {
			return true
		}
	}
	return false
}

// trimPages adds to b the deletion of the pages of every chunk below n of
// blob key (size bytes) that pl does not hold and that has pages here,
// found with one iterator that visits only chunks with pages; it adds
// those chunks to dropped and their bytes below size to removed.
func (s *Store) trimPages(b *pebble.Batch, key string, pl Placement, n, size uint64, dropped map[uint64]bool, removed *uint64) error {
	pages := func(c uint64) uint64 { return c * s.chunkBytes / s.pageBytes }
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pagePrefix(key), UpperBound: blobPagesEnd(key)})
	if err != nil {
		return fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer it.Close()
	prefix := len(pagePrefix(key))
	for valid := it.First(); valid; {
		page, _, _, ok := decodePageKey(it.Key(), prefix)
		if !ok {
			return fmt.Errorf("%w: page key of blob %q", errs.ErrCorruption, key)
		}
		c := page * s.pageBytes / s.chunkBytes
		if c >= n {
			break // past the blob's end: not a chunk of it
		}
		if !pl.Holds(key, c) {
			if err := b.DeleteRange(pageKeyVersionless(key, pages(c)), pageKeyVersionless(key, pages(c+1)), nil); err != nil {
				return err
			}
			dropped[c] = true
			*removed += min(size, (c+1)*s.chunkBytes) - c*s.chunkBytes
		}
		valid = it.SeekGE(pageKeyVersionless(key, pages(c+1)))
	}
	return it.Error()
}
