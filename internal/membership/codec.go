package membership

import (
	"encoding/binary"
	"fmt"
)

// Everything this package puts on the wire (member metadata, catalog
// entries, broadcast messages and the push/pull state) is built from the
// primitives below: single bytes, unsigned and zig-zag varints, and
// length-prefixed byte strings. Each record starts with a format byte.
//
// The formats are append-only: a later format may add fields at the end of a
// record, never remove, reorder or reinterpret one. A decoder reads the
// fields it knows and ignores the rest of the record, so an older node can
// read what a newer one sends. Records that sit inside a larger message are
// length-prefixed for the same reason: a record that grew does not shift the
// records after it.

// encoder appends primitives to a byte slice. It never fails; limits are
// checked by the callers, which know which limit applies.
type encoder struct {
	buf []byte
}

func (e *encoder) byte(b byte) { e.buf = append(e.buf, b) }

func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }

func (e *encoder) varint(v int64) { e.buf = binary.AppendVarint(e.buf, v) }

func (e *encoder) bytes(b []byte) {
	e.uvarint(uint64(len(b)))
	e.buf = append(e.buf, b...)
}

func (e *encoder) string(s string) {
	e.uvarint(uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// decoder reads primitives from a byte slice. The first problem sticks in
// err and every later read returns a zero value, so a caller can read a whole
// record and check err once. Every length is checked against a limit the
// caller passes before anything is allocated, so hostile input cannot make
// the decoder allocate more than the limits allow.
type decoder struct {
	buf []byte
	err error
	// what names the record being decoded, for error messages.
	what string
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("membership: %w: decoding %s: %s", ErrMalformed, d.what, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.buf) < 1 {
		d.fail("truncated")
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("bad unsigned varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail("bad signed varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// bytes reads a length-prefixed byte string of at most max bytes and
// returns a copy, so the result does not alias a buffer the caller may
// reuse.
func (d *decoder) bytes(field string, max int) []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(max) {
		d.fail("%s is %d bytes, longer than the limit of %d", field, n, max)
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.fail("%s truncated", field)
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]byte, n)
	copy(out, d.buf[:n])
	d.buf = d.buf[n:]
	return out
}

func (d *decoder) string(field string, max int) string {
	return string(d.bytes(field, max))
}

// count reads a record count and checks it against max and against the
// bytes left, since every record takes at least one byte; this keeps a
// forged count from making the caller preallocate a huge slice.
func (d *decoder) count(field string, max int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(max) {
		d.fail("%d %s, more than the limit of %d", n, field, max)
		return 0
	}
	if n > uint64(len(d.buf)) {
		d.fail("%d %s cannot fit in the %d bytes left", n, field, len(d.buf))
		return 0
	}
	return int(n)
}

// formatByte reads a record's format byte. Zero is never a valid format, so
// that an all-zero buffer is rejected; any other value is accepted, since
// formats only ever append fields.
func (d *decoder) formatByte() byte {
	f := d.byte()
	if d.err == nil && f == 0 {
		d.fail("format 0 is not a valid format")
	}
	return f
}
