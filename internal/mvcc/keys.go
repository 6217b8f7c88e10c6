package mvcc

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/tyrstore/tyr/internal/errs"
)

// On-disk layout of one keyspace's Pebble database. This layout is
// append-only: new record kinds get new prefixes, and the format byte of a
// record value is bumped, never reinterpreted.
//
//	'm' key                          -> blob record (size, version, times)
//	'p' key 0x00 page(8) ^version(8) -> page bytes (at most PageBytes)
//	'p' key 0x00 page(8) ^version(8) 'd' -> delta of the page as of its next older stored version,
//	                                    either offset(4) bytes: that page cut (or zero-filled) to
//	                                    offset, then bytes; or 0x80000000|length(4) then pieces
//	                                    offset(4) n(4) bytes(n): that page cut (or zero-filled) to
//	                                    length, each piece's bytes then written at its offset
//	'g' deadline(8) pagekey          -> "" (versions of the page older than pagekey's: collect after deadline)
//	'h' key 0x00 ^version(8)         -> history record: the blob record as of version, which a later
//	                                    commit superseded, plus that commit's cut page (MVCC on only)
//	'x' deadline(8) historykey|txnkey -> "" (collect that one history or transaction record after deadline)
//	'c' key 0x00 chunk(8)            -> version of the last commit that changed the chunk (placement.go)
//	'f' key                          -> floor: the oldest version reads of the blob may name (catchup.go)
//	't' txnid                        -> a chain transaction committed here, with its results (txns.go)
//	'k' clientid                     -> a client's commit ID: committed here as a chain transaction, or fenced (txns.go)
//
// History records let a read name an older version of a blob (a
// transaction's repeatable read): the size at that version comes from the
// record, the bytes from the page versions not newer than it. A commit that
// supersedes version v of a blob writes 'h' key ^v with the old record and
// the index of the first page the commit dropped in every version (its cut:
// shrinking truncate, delete; all ones when none), and queues it under 'x'
// with the same deadline its superseded pages get. A read at v is served
// only while 'h' key ^v exists and no later commit cut a page below v's size.
// The collector works off 'x' before 'g' with one clock reading, so a history
// record never outlives the page versions it describes. A delete drops the
// blob's history records at once, as it drops its pages.
//
// Keys contain no NUL, so 'p' key 0x00 sorts all pages of a blob together
// and in page order; inverting the version makes the newest version of a
// page sort first, so a seek to (page, ^v) lands on the newest version not
// newer than v. Page values may be shorter than PageBytes: missing bytes read
// as zeros. No byte at or past the blob's size is ever stored.
//
// Worked example, PageBytes = 4: blob "a" written with "abcdef" at version 7,
// then "XY" at offset 1 at version 9 (MVCC on):
//
//	m a                  -> size 6, version 9
//	p a\0 page0 ^9       -> "aXYd"
//	p a\0 page0 ^7       -> "abcd"   (kept until the 'g' deadline below)
//	p a\0 page1 ^7       -> "ef"
//	g <t9+retention> p a\0 page0 ^9   (page0's versions older than 9 go then)
//
// Deltas. A small change to a stored page would rewrite the page whole: each
// create in a TýrFS directory appends to its log's last page, a 4 KiB write
// into a file changes a sixteenth of one, and either put up to 64 KiB
// through the write-ahead log, the memtable and compactions. So a commit
// (MVCC on) that changes a stored page stores only the bytes it changed, as
// a delta of the page's next older version, when the delta is smaller than
// that page and its chain of deltas is shorter than DeltaDepthMax: a change
// that runs to the page's end as the page cut at the change, then the new
// bytes; any other, to a page of PiecesPageBytesMin or more, as the new
// length and the changed pieces. A read of a page walks the versions from
// the one it finds to the first whole page, which sort right after it.
//
// Invariants:
//
//  1. A delta's base, the page's next older stored version, is the version
//     the writing commit read: commits of a blob are serialized, and no
//     page version sorts between them.
//  2. Only a whole page queues its superseded versions ('g'), and the
//     collector takes, with the newest older version, every version down
//     to the first whole page: a delta and its bases go together, never a
//     base before the deltas that need it.
//  3. Every range deletion of page versions (cut, trim, catch-up, delete)
//     takes whole pages or a version with its delta, never a base alone.
const (
	prefixMeta    = 'm'
	prefixPage    = 'p'
	prefixGarbage = 'g'
	prefixHistory = 'h'
	prefixHistGC  = 'x'

	metaFormat = 1
	metaBytes  = 1 + 8 + 8 + 8 + 8
)

// PageBytes is the largest unit in which chunk data is stored and
// rewritten: a write of a few bytes rewrites at most two pages, not a whole
// chunk. A store's pages are min(PageBytes, chunk size) long, so a page
// never spans two chunks.
const PageBytes = 64 << 10

func metaKey(key string) []byte {
	k := make([]byte, 0, 1+len(key))
	k = append(k, prefixMeta)
	return append(k, key...)
}

// pagePrefix returns the prefix of all page keys of blob key.
func pagePrefix(key string) []byte {
	k := make([]byte, 0, 2+len(key)+16)
	k = append(k, prefixPage)
	k = append(k, key...)
	return append(k, 0)
}

// pageKey is the key of one version of one page.
func pageKey(key string, page, version uint64) []byte {
	k := pagePrefix(key)
	k = binary.BigEndian.AppendUint64(k, page)
	return binary.BigEndian.AppendUint64(k, ^version)
}

// pageKeyVersionless is the page key without its version suffix; all
// versions of the page share it as a prefix.
func pageKeyVersionless(key string, page uint64) []byte {
	return binary.BigEndian.AppendUint64(pagePrefix(key), page)
}

// blobPagesEnd is the first key past every page key of blob key.
func blobPagesEnd(key string) []byte {
	k := pagePrefix(key)
	k[len(k)-1] = 1
	return k
}

// olderPageVersions returns the span [start, end) of the keys of every
// version of page key newer's page older than newer's. The version is
// stored inverted, so they are the page's keys after newer: start is the
// least key after newer, end the least key past every key of the page.
func olderPageVersions(newer []byte) (start, end []byte) {
	return slices.Concat(newer, []byte{0}), prefixUpperBound(newer[:len(newer)-8])
}

// deltaMark ends a page key whose value is a delta.
const deltaMark = 'd'

// DeltaDepthMax is the most deltas a page version stacks on its last whole
// version; the next change of the page writes it whole.
const DeltaDepthMax = 16

// deltaKey is the key of one version of one page stored as a delta; it
// sorts right after that version's whole-page key, before older versions.
func deltaKey(key string, page, version uint64) []byte {
	return append(pageKey(key, page, version), deltaMark)
}

// decodePageKey returns page and version of a page key whose blob prefix has
// length prefixLen, and whether its value is a delta.
func decodePageKey(k []byte, prefixLen int) (page, version uint64, delta, ok bool) {
	switch {
	case len(k) == prefixLen+16:
	case len(k) == prefixLen+17 && k[len(k)-1] == deltaMark:
		delta = true
	default:
		return 0, 0, false, false
	}
	page = binary.BigEndian.Uint64(k[prefixLen:])
	version = ^binary.BigEndian.Uint64(k[prefixLen+8:])
	return page, version, delta, true
}

// encodeDelta is a delta's value: the page cut to offset, then data.
func encodeDelta(offset uint64, data []byte) []byte {
	return append(binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(data)), uint32(offset)), data...)
}

// patchMark flags a delta of pieces: the top bit of its first four bytes,
// which a cut offset (at most PageBytes) never sets.
const patchMark = 1 << 31

// pieceHeaderBytes is what a piece of a delta costs besides its bytes.
const pieceHeaderBytes = 8

// PiecesPageBytesMin is the smallest stored page a change other than an
// append is written as a delta of: a smaller page costs little to write
// whole, and reads back as one value.
const PiecesPageBytesMin = 4 << 10

// span is the bytes [lo, hi) of a page.
type span struct{ lo, hi uint64 }

// encodePatch is a delta's value that makes a page of len(page) bytes
// whose bytes outside spans (sorted, disjoint, inside page) are those of
// its base, zeros past the base's end.
func encodePatch(page []byte, spans []span) []byte {
	n := 4
	for _, s := range spans {
		n += pieceHeaderBytes + int(s.hi-s.lo)
	}
	d := binary.BigEndian.AppendUint32(make([]byte, 0, n), patchMark|uint32(len(page)))
	for _, s := range spans {
		d = binary.BigEndian.AppendUint32(d, uint32(s.lo))
		d = binary.BigEndian.AppendUint32(d, uint32(s.hi-s.lo))
		d = append(d, page[s.lo:s.hi]...)
	}
	return d
}

// deltaPageBytes is the length of the page delta d makes (d holds at
// least 4 bytes).
func deltaPageBytes(d []byte) uint64 {
	head := binary.BigEndian.Uint32(d)
	if head&patchMark != 0 {
		return uint64(head &^ patchMark)
	}
	return uint64(head) + uint64(len(d)-4)
}

// applyDeltas returns page base with deltas applied, oldest last in
// deltas (newest first), in a new slice the caller owns.
func applyDeltas(base []byte, deltas [][]byte) ([]byte, error) {
	size := len(base)
	for _, d := range deltas {
		if len(d) >= 4 {
			size = max(size, int(min(deltaPageBytes(d), PageBytes)))
		}
	}
	page := append(make([]byte, 0, size), base...)
	for i := len(deltas) - 1; i >= 0; i-- {
		var err error
		if page, err = applyDelta(page, deltas[i]); err != nil {
			return nil, err
		}
	}
	return page, nil
}

// applyDelta returns page with delta d applied; it may reuse page.
func applyDelta(page, d []byte) ([]byte, error) {
	if len(d) < 4 {
		return nil, fmt.Errorf("%w: page delta of %d bytes", errs.ErrCorruption, len(d))
	}
	head := binary.BigEndian.Uint32(d)
	off := uint64(head &^ patchMark)
	if deltaPageBytes(d) > PageBytes {
		return nil, fmt.Errorf("%w: page delta of %d bytes at %d", errs.ErrCorruption, len(d)-4, off)
	}
	if uint64(len(page)) >= off {
		page = page[:off]
	} else {
		page = append(page, make([]byte, off-uint64(len(page)))...)
	}
	if head&patchMark == 0 {
		return append(page, d[4:]...), nil
	}
	for rest := d[4:]; len(rest) > 0; {
		if len(rest) < pieceHeaderBytes {
			return nil, fmt.Errorf("%w: page delta piece of %d bytes", errs.ErrCorruption, len(rest))
		}
		lo, n := uint64(binary.BigEndian.Uint32(rest)), uint64(binary.BigEndian.Uint32(rest[4:]))
		rest = rest[pieceHeaderBytes:]
		if n > uint64(len(rest)) || lo+n > off {
			return nil, fmt.Errorf("%w: page delta piece of %d bytes at %d in a page of %d", errs.ErrCorruption, n, lo, off)
		}
		copy(page[lo:lo+n], rest[:n])
		rest = rest[n:]
	}
	return page, nil
}

func garbageKey(deadline time.Time, page []byte) []byte {
	k := make([]byte, 0, 9+len(page))
	k = append(k, prefixGarbage)
	k = binary.BigEndian.AppendUint64(k, uint64(deadline.UnixNano()))
	return append(k, page...)
}

// garbageValue is a collector record's value: the time after which the
// record is due whatever versions are in use (see uses.go).
func garbageValue(latest time.Time) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(latest.UnixNano()))
}

// garbageLatest decodes a garbageValue; a record written before values
// carried it (empty) is due at its key's time.
func garbageLatest(v []byte, due int64) int64 {
	if len(v) != 8 {
		return due
	}
	return int64(binary.BigEndian.Uint64(v))
}

// pageBlob returns the blob key of a whole page's key.
func pageBlob(page []byte) string { return string(page[1 : len(page)-17]) }

// blobMeta is a blob's record. Version is the version of the last commit
// that changed the blob; versions of one blob strictly increase, even across
// delete and re-create, because they are drawn from the clock (see
// Store.nextVersion).
type blobMeta struct {
	Size     uint64
	Version  uint64
	Created  int64 // unix nanoseconds
	Modified int64 // unix nanoseconds
}

func (m blobMeta) encode() []byte {
	b := make([]byte, 0, metaBytes)
	b = append(b, metaFormat)
	b = binary.BigEndian.AppendUint64(b, m.Size)
	b = binary.BigEndian.AppendUint64(b, m.Version)
	b = binary.BigEndian.AppendUint64(b, uint64(m.Created))
	return binary.BigEndian.AppendUint64(b, uint64(m.Modified))
}

func decodeMeta(b []byte) (blobMeta, error) {
	if len(b) != metaBytes || b[0] != metaFormat {
		return blobMeta{}, fmt.Errorf("%w: blob record of %d bytes, format %d", errs.ErrCorruption, len(b), firstByte(b))
	}
	return blobMeta{
		Size:     binary.BigEndian.Uint64(b[1:]),
		Version:  binary.BigEndian.Uint64(b[9:]),
		Created:  int64(binary.BigEndian.Uint64(b[17:])),
		Modified: int64(binary.BigEndian.Uint64(b[25:])),
	}, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// historyPrefix is the prefix of all history keys of blob key.
func historyPrefix(key string) []byte {
	k := make([]byte, 0, 2+len(key)+8)
	k = append(k, prefixHistory)
	k = append(k, key...)
	return append(k, 0)
}

// historyKey is the key of the history record of blob key at version.
func historyKey(key string, version uint64) []byte {
	return binary.BigEndian.AppendUint64(historyPrefix(key), ^version)
}

// historyEnd is the first key past every history key of blob key.
func historyEnd(key string) []byte {
	k := historyPrefix(key)
	k[len(k)-1] = 1
	return k
}

func histGCKey(deadline time.Time, hkey []byte) []byte {
	k := make([]byte, 0, 9+len(hkey))
	k = append(k, prefixHistGC)
	k = binary.BigEndian.AppendUint64(k, uint64(deadline.UnixNano()))
	return append(k, hkey...)
}

// historyRecord is a superseded blob record and the cut of the commit that
// superseded it.
type historyRecord struct {
	Meta blobMeta
	Cut  uint64 // first page the superseding commit dropped; noCut if none
}

func (h historyRecord) encode() []byte {
	return binary.BigEndian.AppendUint64(h.Meta.encode(), h.Cut)
}

func decodeHistory(b []byte) (historyRecord, error) {
	if len(b) != metaBytes+8 {
		return historyRecord{}, fmt.Errorf("%w: history record of %d bytes", errs.ErrCorruption, len(b))
	}
	m, err := decodeMeta(b[:metaBytes])
	if err != nil {
		return historyRecord{}, err
	}
	return historyRecord{Meta: m, Cut: binary.BigEndian.Uint64(b[metaBytes:])}, nil
}
