package mvcc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tyrstore/tyr/internal/errs"
)

// Reclaiming the space of removed data. A delete, a shrinking truncate, a
// blob or chunks dropped after a ring change, and the page versions a
// catch-up replaces all remove pages with range deletions, which free no
// space by themselves: the bytes stay in the memtable, its write-ahead
// log and the sstables until a compaction rewrites the files the
// deletion covers, and Pebble compacts only as writes come in. So each
// such removal also writes a reclaim marker in its batch:
//
//	'r' key -> removed bytes(8), unix nanoseconds of the removal(8)
//
// and Reclaim, run by the storage engine's background loop, compacts the
// page spans of the marked blobs and deletes their markers. Markers are
// durable with the removal, so a restart loses none.
//
// Which spans: marked blobs are taken in key order, and two neighbours
// share one compaction when the data between them on disk (the blobs not
// marked) is no more than what was removed so far in the span, so the
// bytes rewritten stay within about twice the bytes reclaimed. A span
// waits while it removed less than ReclaimBytesMin and its oldest removal
// is younger than ReclaimDelayMax, so a stream of small deletes costs
// one compaction per ReclaimDelayMax rather than one per delete.
const prefixReclaim = 'r'

const (
	// ReclaimBytesMin is the removed bytes at which a span is compacted
	// at the next pass.
	ReclaimBytesMin = 4 << 20
	// ReclaimDelayMax is how long a smaller removal waits for others to
	// join it: every removal is reclaimed within ReclaimDelayMax plus
	// the engine's pass interval and the compactions ahead of it.
	ReclaimDelayMax = 30 * time.Second
	// ReclaimMarkersMax bounds the markers one Reclaim pass reads.
	ReclaimMarkersMax = 4096
)

func reclaimKey(key string) []byte {
	k := make([]byte, 0, 1+len(key))
	k = append(k, prefixReclaim)
	return append(k, key...)
}

// markReclaim adds to b the marker that removed bytes of blob key's pages
// were deleted at now.
func markReclaim(b *pebble.Batch, key string, removed uint64, now time.Time) error {
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v, removed)
	binary.BigEndian.PutUint64(v[8:], uint64(now.UnixNano()))
	return b.Set(reclaimKey(key), v, nil)
}

type reclaimMark struct {
	key     string
	value   []byte
	removed uint64
	at      time.Time
}

// ReclaimStats is what Reclaim did or left.
type ReclaimStats struct {
	// Spans is how many page spans it compacted, Freed the disk space
	// that freed (Pebble's estimate).
	Spans, Freed uint64
	// Pending is the removed bytes still marked after the pass.
	Pending uint64
}

// Reclaim compacts the page spans of removed data that are due (see the
// top of this file) and returns what it did. pace is called after each
// compaction with the bytes it left in the span, about what it rewrote;
// the engine uses it to bound the rate of reclaim work. It is safe to run
// concurrently with everything but itself.
func (s *Store) Reclaim(ctx context.Context, pace func(bytes uint64)) (ReclaimStats, error) {
	var st ReclaimStats
	// Pebble picks its compactions on events only (a flush, a compaction's
	// end, the release of the oldest snapshot). A blob file whose pages a
	// compaction dropped becomes old enough to rewrite
	// (ValueSeparation's RewriteMinimumAge) later, on a store that may see
	// no more writes, such as a node whose ranges moved away: releasing a
	// snapshot on each pass lets Pebble pick the rewrite.
	if err := s.db.NewSnapshot().Close(); err != nil {
		return st, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	marks, err := s.reclaimMarks()
	if err != nil {
		return st, err
	}
	now := s.opts.Now()
	// pending is what stays marked: all of it until spans are compacted.
	var pending uint64
	for _, m := range marks {
		pending += m.removed
	}
	s.reclaimPending.Store(pending)
	for i := 0; i < len(marks); {
		// Grow the span [i, j) while the data between neighbours is no
		// more than what the span removed.
		removed, oldest := marks[i].removed, marks[i].at
		j := i + 1
		for ; j < len(marks); j++ {
			gap, err := s.db.EstimateDiskUsage(blobPagesEnd(marks[j-1].key), pagePrefix(marks[j].key))
			if err != nil {
				return st, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
			}
			if gap > removed {
				break
			}
			removed += marks[j].removed
			if marks[j].at.Before(oldest) {
				oldest = marks[j].at
			}
		}
		span := marks[i:j]
		i = j
		if removed < ReclaimBytesMin && now.Sub(oldest) < ReclaimDelayMax {
			continue
		}
		start, end := pagePrefix(span[0].key), blobPagesEnd(span[len(span)-1].key)
		used, err := s.db.EstimateDiskUsage(start, end)
		if err != nil {
			return st, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
		}
		if err := s.db.Compact(ctx, start, end, false); err != nil {
			return st, fmt.Errorf("%w: reclaiming the space of blobs %q to %q: %w", errs.ErrUnavailable, span[0].key, span[len(span)-1].key, err)
		}
		if err := s.unmark(span); err != nil {
			return st, err
		}
		pending -= removed
		s.reclaimPending.Store(pending)
		left, err := s.db.EstimateDiskUsage(start, end)
		if err != nil {
			return st, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
		}
		st.Spans++
		st.Freed += used - min(used, left)
		if pace != nil {
			pace(left)
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
	}
	st.Pending = pending
	return st, nil
}

// reclaimMarks returns up to ReclaimMarkersMax markers in key order.
func (s *Store) reclaimMarks() ([]reclaimMark, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixReclaim}, UpperBound: []byte{prefixReclaim + 1}})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer it.Close()
	var out []reclaimMark
	for ok := it.First(); ok && len(out) < ReclaimMarkersMax; ok = it.Next() {
		v := it.Value()
		if len(v) != 16 {
			return nil, fmt.Errorf("%w: reclaim marker %q", errs.ErrCorruption, it.Key())
		}
		out = append(out, reclaimMark{
			key:     string(it.Key()[1:]),
			value:   append([]byte(nil), v...),
			removed: binary.BigEndian.Uint64(v),
			at:      time.Unix(0, int64(binary.BigEndian.Uint64(v[8:]))),
		})
	}
	return out, it.Error()
}

// unmark deletes the markers of span that no removal rewrote since they
// were read: a removal that raced with the compaction keeps its marker
// for the next pass. Markers are written under the blob's lock, so each
// is compared and deleted under it; a blob whose lock stays taken keeps
// its marker, and the next pass compacts it again.
func (s *Store) unmark(span []reclaimMark) error {
	for _, m := range span {
		keys := []string{m.key}
		if !s.locks.lockWithin(keys, 10*time.Millisecond) {
			continue
		}
		err := s.unmarkLocked(m)
		s.locks.unlock(keys)
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) unmarkLocked(m reclaimMark) error {
	cur, closer, err := s.db.Get(reclaimKey(m.key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	same := bytes.Equal(cur, m.value)
	_ = closer.Close()
	if !same {
		return nil
	}
	if err := s.db.Delete(reclaimKey(m.key), pebble.NoSync); err != nil {
		return fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	return nil
}

// Usage is what a store's blobs hold, as opposed to what its files take.
type Usage struct {
	Blobs uint64
	// LogicalBytes is the bytes of the chunks the store holds of its
	// blobs' newest versions, counting the chunks a commit ever wrote
	// (holes inside them included; chunks never written, such as the
	// middle of a sparse blob, are not): what a copy of them would be.
	LogicalBytes uint64
	// ReclaimBytes is the removed bytes whose space is yet to be
	// reclaimed, as the last Reclaim pass left them.
	ReclaimBytes uint64
}

// Usage returns the store's usage, counting the chunks pl says it holds
// (nil: all). It reads every blob record and chunk version: its cost
// grows with the number of blobs and of chunks written, not with their
// sizes.
func (s *Store) Usage(pl Placement) (Usage, error) {
	u := Usage{ReclaimBytes: s.reclaimPending.Load()}
	metas, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixMeta}, UpperBound: []byte{prefixMeta + 1}})
	if err != nil {
		return u, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer metas.Close()
	chunks, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixChunk}, UpperBound: []byte{prefixChunk + 1}})
	if err != nil {
		return u, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer chunks.Close()
	for ok := metas.First(); ok; ok = metas.Next() {
		m, err := decodeMeta(metas.Value())
		if err != nil {
			return u, fmt.Errorf("blob %q: %w", metas.Key()[1:], err)
		}
		u.Blobs++
		key := string(metas.Key()[1:])
		prefix := chunkPrefix(key)
		for ok := chunks.SeekGE(prefix); ok && bytes.HasPrefix(chunks.Key(), prefix); ok = chunks.Next() {
			k := chunks.Key()
			if len(k) != len(prefix)+8 {
				return u, fmt.Errorf("%w: chunk version entry of blob %q", errs.ErrCorruption, key)
			}
			c := binary.BigEndian.Uint64(k[len(prefix):])
			if start := c * s.chunkBytes; start < m.Size && (pl == nil || pl.Holds(key, c)) {
				u.LogicalBytes += min(m.Size, start+s.chunkBytes) - start
			}
		}
		if err := chunks.Error(); err != nil {
			return u, err
		}
	}
	return u, metas.Error()
}
