// Package fslock is the table of advisory locks on one TýrFS file: the
// rules of flock(2) and of POSIX record locks (fcntl F_SETLK), applied to
// a table that tyrfs keeps in a blob of its own and changes in
// transactions. It does no I/O: the caller reads the table, asks Conflict
// and Apply with the time it reads, and commits what Encode returns.
//
// A lock belongs to a holder (a mount, or a program on the native API:
// one random number per process's use) and to an owner within it (the
// kernel's lock owner: a process's descriptor table for POSIX locks, an
// open file description for flock). Each lock carries the time its lease
// ends; the holder renews its leases while it runs (Renew), and a lock
// whose lease ended is ignored and dropped at the next change, so a
// holder that died gives its locks up within a lease.
//
// Invariants, asserted by Apply's callers through Check:
//  1. Two live locks of the same kind (flock or POSIX) of different
//     (holder, owner) that overlap are both read locks.
//  2. One (holder, owner) has at most one flock lock per file, and its
//     POSIX locks neither overlap nor touch when of the same type (they
//     are merged), as the kernel keeps them.
//  3. A table holds at most EntriesMax locks.
//
// flock and POSIX locks do not conflict with each other, as on Linux.
//
// A table also remembers the paths its file was renamed from (Moved,
// EncodeMoved), newest first, so that a holder that knew the file by one
// of them finds its locks after a rename it did not make.
package fslock

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// EntriesMax bounds the locks of one file: a lock that would need more
// fails (ENOLCK).
const EntriesMax = 1024

// OffsetMax is the end of a lock that runs to the end of the file, as
// the kernel gives it (OFFSET_MAX).
const OffsetMax = math.MaxInt64

// Lock is one advisory lock.
type Lock struct {
	Holder uint64
	Owner  uint64
	// Flock is set for a flock(2) lock, which covers the whole file.
	Flock bool
	// Write is set for an exclusive (write) lock, clear for a shared one.
	Write bool
	// Start and End are the first and last bytes locked (End inclusive;
	// OffsetMax: to the end of the file, wherever it is).
	Start, End uint64
	// Pid is the locking process's, as the holder's machine numbers it.
	Pid uint32
	// Expires is when the lock's lease ends (Unix nanoseconds).
	Expires int64
}

// Table is the locks of one file.
type Table []Lock

// ErrTooMany is Apply's error for a table that would hold more than
// EntriesMax locks.
var ErrTooMany = errors.New("too many locks on one file")

// ErrCorrupt is Decode's error for bytes that are not a table.
var ErrCorrupt = errors.New("corrupt lock table")

const (
	// format is a table without moves; formatMoved one with the paths it
	// was moved from after its locks.
	format      = 1
	formatMoved = 2
	entryBytes  = 8 + 8 + 8 + 8 + 8 + 4 + 1
	flagWrite   = 1 << 0
	flagFlock   = 1 << 1
)

// MovesMax bounds the paths a table remembers it was moved from (see
// EncodeMoved); older ones are forgotten.
const MovesMax = 4

// Encode returns the table's bytes; an empty table is no bytes.
func (t Table) Encode() []byte { return t.EncodeMoved(nil) }

// EncodeMoved returns the bytes of the table with moved, the paths its
// file was renamed from, newest first (at most MovesMax are kept), so
// that a holder that still knows the file by one of them finds its locks
// (see Moved). An empty table is no bytes, whatever moved holds.
func (t Table) EncodeMoved(moved []string) []byte {
	if len(t) == 0 {
		return nil
	}
	moved = slices.DeleteFunc(slices.Clone(moved[:min(len(moved), MovesMax)]), func(p string) bool { return len(p) > math.MaxUint16 })
	b := make([]byte, 0, 1+4+len(t)*entryBytes)
	if len(moved) == 0 {
		b = append(b, format)
	} else {
		b = append(b, formatMoved)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t)))
	}
	for _, l := range t {
		b = binary.LittleEndian.AppendUint64(b, l.Holder)
		b = binary.LittleEndian.AppendUint64(b, l.Owner)
		b = binary.LittleEndian.AppendUint64(b, l.Start)
		b = binary.LittleEndian.AppendUint64(b, l.End)
		b = binary.LittleEndian.AppendUint64(b, uint64(l.Expires))
		b = binary.LittleEndian.AppendUint32(b, l.Pid)
		var f byte
		if l.Write {
			f |= flagWrite
		}
		if l.Flock {
			f |= flagFlock
		}
		b = append(b, f)
	}
	if len(moved) > 0 {
		b = append(b, byte(len(moved)))
		for _, p := range moved {
			b = binary.LittleEndian.AppendUint16(b, uint16(len(p)))
			b = append(b, p...)
		}
	}
	return b
}

// Moved returns moved with from put first, once: the paths a table moved
// from from remembers.
func Moved(moved []string, from string) []string {
	out := []string{from}
	for _, p := range moved {
		if p != from && len(out) < MovesMax {
			out = append(out, p)
		}
	}
	return out
}

// Decode reads a table Encode wrote; no bytes are an empty table.
func Decode(b []byte) (Table, error) {
	t, _, err := DecodeMoved(b)
	return t, err
}

// DecodeMoved reads a table EncodeMoved or Encode wrote, and the paths
// it was moved from.
func DecodeMoved(b []byte) (Table, []string, error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	var entries []byte
	var moved []string
	switch b[0] {
	case format:
		entries = b[1:]
	case formatMoved:
		if len(b) < 5 {
			return nil, nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
		}
		n := binary.LittleEndian.Uint32(b[1:])
		if n > EntriesMax || uint64(len(b)-5) < uint64(n)*entryBytes {
			return nil, nil, fmt.Errorf("%w: %d entries in %d bytes", ErrCorrupt, n, len(b))
		}
		entries = b[5 : 5+n*entryBytes]
		var err error
		if moved, err = decodeMoves(b[5+n*entryBytes:]); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, fmt.Errorf("%w: format %d, %d bytes", ErrCorrupt, b[0], len(b))
	}
	if len(entries)%entryBytes != 0 {
		return nil, nil, fmt.Errorf("%w: format %d, %d bytes", ErrCorrupt, b[0], len(b))
	}
	t := make(Table, 0, len(entries)/entryBytes)
	for e := entries; len(e) > 0; e = e[entryBytes:] {
		f := e[44]
		if f&^(flagWrite|flagFlock) != 0 {
			return nil, nil, fmt.Errorf("%w: flags %#x", ErrCorrupt, f)
		}
		l := Lock{
			Holder:  binary.LittleEndian.Uint64(e),
			Owner:   binary.LittleEndian.Uint64(e[8:]),
			Start:   binary.LittleEndian.Uint64(e[16:]),
			End:     binary.LittleEndian.Uint64(e[24:]),
			Expires: int64(binary.LittleEndian.Uint64(e[32:])),
			Pid:     binary.LittleEndian.Uint32(e[40:]),
			Write:   f&flagWrite != 0,
			Flock:   f&flagFlock != 0,
		}
		if l.Start > l.End {
			return nil, nil, fmt.Errorf("%w: lock from %d to %d", ErrCorrupt, l.Start, l.End)
		}
		t = append(t, l)
	}
	return t, moved, nil
}

// decodeMoves reads the paths EncodeMoved put after the entries.
func decodeMoves(b []byte) ([]string, error) {
	if len(b) == 0 || b[0] == 0 || b[0] > MovesMax {
		return nil, fmt.Errorf("%w: moves %d bytes", ErrCorrupt, len(b))
	}
	moved := make([]string, 0, b[0])
	for rest, n := b[1:], int(b[0]); n > 0; n-- {
		if len(rest) < 2 || len(rest)-2 < int(binary.LittleEndian.Uint16(rest)) {
			return nil, fmt.Errorf("%w: moves cut short", ErrCorrupt)
		}
		k := int(binary.LittleEndian.Uint16(rest))
		moved, rest = append(moved, string(rest[2:2+k])), rest[2+k:]
		if n == 1 && len(rest) > 0 {
			return nil, fmt.Errorf("%w: %d bytes after the moves", ErrCorrupt, len(rest))
		}
	}
	return moved, nil
}

// Holds reports whether holder has a live lock in the table.
func (t Table) Holds(holder uint64, now int64) bool {
	return slices.ContainsFunc(t, func(l Lock) bool { return l.Holder == holder && l.Expires > now })
}

// Check reports whether l's range is valid: Start at most End.
func Check(l Lock) error {
	if l.Start > l.End || l.End > OffsetMax {
		return fmt.Errorf("lock from %d to %d: not a range of a file", l.Start, l.End)
	}
	return nil
}

// whole returns l covering the whole file if it is a flock lock.
func whole(l Lock) Lock {
	if l.Flock {
		l.Start, l.End = 0, OffsetMax
	}
	return l
}

func (l Lock) sameOwner(o Lock) bool {
	return l.Holder == o.Holder && l.Owner == o.Owner && l.Flock == o.Flock
}

func (l Lock) overlaps(o Lock) bool { return l.Start <= o.End && o.Start <= l.End }

// Conflict returns the first lock live at now that keeps l from being
// taken: of the same kind and another (holder, owner), overlapping, and a
// write lock or l one.
func (t Table) Conflict(l Lock, now int64) (Lock, bool) {
	l = whole(l)
	for _, o := range t {
		if o.Expires > now && o.Flock == l.Flock && !o.sameOwner(l) && o.overlaps(l) && (o.Write || l.Write) {
			return o, true
		}
	}
	return Lock{}, false
}

// Apply returns the table with l taken (unlock false) or its range given
// up by its (holder, owner) (unlock true), and the locks that lease ended
// by now dropped. It does not check conflicts: the caller asks Conflict
// first. A POSIX lock replaces the owner's locks in its range, of either
// type, and merges with its locks of the same type it overlaps or
// touches; a flock lock replaces the owner's flock lock.
func (t Table) Apply(l Lock, unlock bool, now int64) (Table, error) {
	l = whole(l)
	out := make(Table, 0, len(t)+2)
	for _, o := range t {
		switch {
		case o.Expires <= now:
		case !o.sameOwner(l) || !o.overlaps(l) && !(!unlock && o.Write == l.Write && touches(o, l)):
			out = append(out, o)
		case !unlock && o.Write == l.Write:
			// Merged into l.
			l.Start, l.End = min(l.Start, o.Start), max(l.End, o.End)
		default:
			// The parts of o outside l stay.
			if o.Start < l.Start {
				left := o
				left.End = l.Start - 1
				out = append(out, left)
			}
			if o.End > l.End {
				right := o
				right.Start = l.End + 1
				out = append(out, right)
			}
		}
	}
	if !unlock {
		out = append(out, l)
	}
	if len(out) > EntriesMax {
		return nil, fmt.Errorf("%w: above %d", ErrTooMany, EntriesMax)
	}
	slices.SortStableFunc(out, func(a, b Lock) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Holder, b.Holder), cmp.Compare(a.Owner, b.Owner))
	})
	return out, nil
}

// touches reports whether o and l are adjacent ranges.
func touches(o, l Lock) bool {
	return o.End != OffsetMax && o.End+1 == l.Start || l.End != OffsetMax && l.End+1 == o.Start
}

// Renew returns the table with the leases of holder's locks ending at
// expires, the locks whose lease ended by now dropped, and how many locks
// holder still has.
func (t Table) Renew(holder uint64, expires, now int64) (Table, int) {
	out := make(Table, 0, len(t))
	n := 0
	for _, o := range t {
		if o.Expires <= now {
			continue
		}
		if o.Holder == holder {
			o.Expires = expires
			n++
		}
		out = append(out, o)
	}
	return out, n
}

// Drop returns the table without holder's locks and those whose lease
// ended by now.
func (t Table) Drop(holder uint64, now int64) Table {
	out := make(Table, 0, len(t))
	for _, o := range t {
		if o.Holder != holder && o.Expires > now {
			out = append(out, o)
		}
	}
	return out
}

// Held reports whether (holder, owner) holds a lock of l's kind, live at
// now.
func (t Table) Held(l Lock, now int64) bool {
	for _, o := range t {
		if o.Expires > now && o.sameOwner(l) {
			return true
		}
	}
	return false
}

// Verify checks invariants 1-3 on the locks live at now.
func (t Table) Verify(now int64) error {
	if len(t) > EntriesMax {
		return fmt.Errorf("%d locks, above %d", len(t), EntriesMax)
	}
	flocks := map[[2]uint64]bool{}
	for i, a := range t {
		if a.Expires <= now {
			continue
		}
		if err := Check(a); err != nil {
			return err
		}
		if a.Flock {
			k := [2]uint64{a.Holder, a.Owner}
			if flocks[k] {
				return fmt.Errorf("owner %d/%d holds two flock locks", a.Holder, a.Owner)
			}
			flocks[k] = true
		}
		for _, b := range t[i+1:] {
			if b.Expires <= now || a.Flock != b.Flock {
				continue
			}
			switch {
			case !a.sameOwner(b) && a.overlaps(b) && (a.Write || b.Write):
				return fmt.Errorf("locks %+v and %+v conflict", a, b)
			case a.sameOwner(b) && !a.Flock && (a.overlaps(b) || a.Write == b.Write && touches(a, b)):
				return fmt.Errorf("locks %+v and %+v of one owner are not merged", a, b)
			}
		}
	}
	return nil
}
