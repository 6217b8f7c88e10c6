package mvcc

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tyrstore/tyr/internal/errs"
)

// Retained is what a store keeps of one blob's versions.
type Retained struct {
	// History lists, newest first, the superseded versions of the blob a
	// read may still name: those whose history records are stored.
	History []uint64
	// Pages lists, for each stored page, the versions of it stored,
	// newest first. With MVCC off, a page's one version is 0.
	Pages map[uint64][]uint64
	// Deltas lists, for each stored page, the versions of it stored as
	// deltas (keys.go), newest first: each needs the versions after it in
	// Pages down to the first whole one.
	Deltas map[uint64][]uint64
}

// Retained returns what the store keeps of blob key's versions, from one
// point-in-time view: for checks that the collector deletes what it must
// (superseded versions past their retention) and nothing else.
func (s *Store) Retained(key string) (Retained, error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	out := Retained{Pages: map[uint64][]uint64{}, Deltas: map[uint64][]uint64{}}
	prefixLen := len(pagePrefix(key))
	pages, err := newPageIter(snap, key)
	if err != nil {
		return Retained{}, err
	}
	defer pages.Close()
	for ok := pages.First(); ok; ok = pages.Next() {
		page, version, delta, ok := decodePageKey(pages.Key(), prefixLen)
		if !ok {
			return Retained{}, fmt.Errorf("%w: page key %x", errs.ErrCorruption, pages.Key())
		}
		out.Pages[page] = append(out.Pages[page], version)
		if delta {
			out.Deltas[page] = append(out.Deltas[page], version)
		}
	}
	if err := pages.Error(); err != nil {
		return Retained{}, err
	}
	history, err := snap.NewIter(&pebble.IterOptions{LowerBound: historyPrefix(key), UpperBound: historyEnd(key)})
	if err != nil {
		return Retained{}, fmt.Errorf("%w: %w", errs.ErrUnavailable, err)
	}
	defer history.Close()
	hlen := len(historyPrefix(key)) + 8
	for ok := history.First(); ok; ok = history.Next() {
		k := history.Key()
		if len(k) != hlen {
			return Retained{}, fmt.Errorf("%w: history key %x", errs.ErrCorruption, k)
		}
		out.History = append(out.History, ^binary.BigEndian.Uint64(k[hlen-8:]))
	}
	return out, history.Error()
}
