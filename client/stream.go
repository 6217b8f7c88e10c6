package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// partsInFlight is how many part requests a Blob, Reader or Writer keeps
// outstanding at once. A few parallel requests hide the round trip without
// letting memory grow past partsInFlight parts.
const partsInFlight = 4

// The adapters are meant to be handed to code written against these
// interfaces; the compiler checks they stay satisfied.
var (
	_ io.ReaderAt    = (*Blob)(nil)
	_ io.WriterAt    = (*Blob)(nil)
	_ io.ReadCloser  = (*Reader)(nil)
	_ io.WriterTo    = (*Reader)(nil)
	_ io.WriteCloser = (*Writer)(nil)
	_ io.ReaderFrom  = (*Writer)(nil)
)

var (
	errReaderClosed = errors.New("tyr: read from a closed Reader")
	errWriterClosed = errors.New("tyr: write to a closed Writer")
)

// Blob is a handle on one blob for random access through io.ReaderAt and
// io.WriterAt. It holds no state besides its names, so it is cheap to make
// and safe for concurrent use. Every call uses the context given to
// Client.Blob.
type Blob struct {
	c       *Client
	ctx     context.Context
	ks, key string
}

// Blob returns a handle on blob key of keyspace ks. It does not contact the
// server; a missing blob shows up as ErrNotFound on first use.
func (c *Client) Blob(ctx context.Context, ks, key string) *Blob {
	return &Blob{c: c, ctx: ctx, ks: ks, key: key}
}

// Size returns the blob's current size.
func (b *Blob) Size() (int64, error) {
	info, err := b.c.Stat(b.ctx, b.ks, b.key)
	if err != nil {
		return 0, err
	}
	return int64(info.Size), nil
}

// ReadAt reads len(p) bytes at off. Ranges larger than PayloadBytesMax are
// read in parts, a few at a time; each part is atomic, the whole is not. As
// io.ReaderAt requires, a read cut short by the end of the blob returns the
// bytes it got and io.EOF.
func (b *Blob) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &Error{Class: ErrInvalidArgument, Message: fmt.Sprintf("read at negative offset %d", off)}
	}
	if len(p) == 0 {
		return 0, nil
	}
	got := make([]int, numParts(len(p)))
	errs := forEachPart(len(p), func(i, lo, hi int) (bool, error) {
		data, _, err := b.c.ReadPart(b.ctx, b.ks, b.key, uint64(off)+uint64(lo), uint64(hi-lo))
		if err != nil {
			return false, err
		}
		got[i] = copy(p[lo:hi], data)
		// A short part is the end of the blob: later parts would read
		// nothing, so there is no point in starting them.
		return got[i] == hi-lo, nil
	})
	n := 0
	for i := range got {
		if errs[i] != nil {
			return n, errs[i]
		}
		n += got[i]
		if got[i] < min(len(p)-i*PayloadBytesMax, PayloadBytesMax) {
			return n, io.EOF
		}
	}
	return n, nil
}

// WriteAt writes p at off into the blob, which must exist (ErrNotFound
// otherwise), extending it if needed. Data larger than PayloadBytesMax is
// written in parts, a few at a time; each part is atomic, the whole is not.
// On error, n counts the leading parts known to be written.
func (b *Blob) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &Error{Class: ErrInvalidArgument, Message: fmt.Sprintf("write at negative offset %d", off)}
	}
	errs := forEachPart(len(p), func(_, lo, hi int) (bool, error) {
		_, err := b.c.commitOne(b.ctx, b.ks, WriteOp(b.key, uint64(off)+uint64(lo), p[lo:hi], false))
		return err == nil, err
	})
	n := 0
	for i, err := range errs {
		if err != nil {
			return n, err
		}
		n = min(len(p), (i+1)*PayloadBytesMax)
	}
	return n, nil
}

// numParts is how many parts of PayloadBytesMax cover n bytes; an empty range
// still takes one (empty) part so that it is checked against the server.
func numParts(n int) int {
	return max(1, (n+PayloadBytesMax-1)/PayloadBytesMax)
}

// errNotStarted marks parts that were never run because an earlier one
// failed or hit the end; callers never see it, since they stop at the first
// failing or short part, which always comes before.
var errNotStarted = errors.New("tyr: part not started")

// forEachPart calls fn for each part [lo, hi) of a range of n bytes, at most
// partsInFlight at once, and returns each part's error. Parts start in order,
// and none starts once a call has failed or returned false, so every part
// that did not run follows one that stopped the walk.
func forEachPart(n int, fn func(i, lo, hi int) (bool, error)) []error {
	parts := numParts(n)
	errs := make([]error, parts)
	if parts == 1 {
		_, errs[0] = fn(0, 0, n)
		return errs
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stopped bool
	)
	slots := make(chan struct{}, partsInFlight)
	for i := range parts {
		slots <- struct{}{}
		mu.Lock()
		stop := stopped
		mu.Unlock()
		if stop {
			<-slots
			for j := i; j < parts; j++ {
				errs[j] = errNotStarted
			}
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			lo := i * PayloadBytesMax
			more, err := fn(i, lo, min(n, lo+PayloadBytesMax))
			errs[i] = err
			if !more || err != nil {
				mu.Lock()
				stopped = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// Reader streams a blob, or a range of one, in parts of PayloadBytesMax,
// keeping a few part reads in flight ahead of the consumer. Memory stays
// bounded by those parts whatever the blob's size.
//
// Each part is read atomically, from one committed version, but the stream
// as a whole is not a snapshot: if the blob is rewritten while it is read,
// different parts may come from different versions. The stream ends at the
// blob's end as reported by the latest part, or where a part comes back
// short because the blob shrank.
//
// A Reader is not safe for concurrent use. Close it to release the requests
// in flight.
type Reader struct {
	ctx     context.Context
	cancel  context.CancelFunc
	c       *Client
	ks, key string
	next    uint64 // offset of the next part to request
	limit   uint64 // end of the requested range
	size    uint64 // the blob's size as reported by the latest part
	pending []chan partResult
	cur     []byte // unread bytes of the current part
	done    bool   // no further part will be requested
	err     error  // sticky: io.EOF, errReaderClosed or the first failure
}

type partResult struct {
	data []byte
	info BlobInfo
	want uint64
	err  error
}

// NewReader returns a Reader of the whole blob. It reads the first part
// before returning, so a missing blob or keyspace is reported here.
func (c *Client) NewReader(ctx context.Context, ks, key string) (*Reader, error) {
	return c.NewRangeReader(ctx, ks, key, 0, -1)
}

// NewRangeReader returns a Reader of up to length bytes starting at offset;
// a negative length reads to the end of the blob. A range past the end
// yields no bytes. Like NewReader, it reads the first part before returning.
func (c *Client) NewRangeReader(ctx context.Context, ks, key string, offset uint64, length int64) (*Reader, error) {
	limit := ^uint64(0)
	if length >= 0 && uint64(length) <= limit-offset {
		limit = offset + uint64(length)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &Reader{ctx: ctx, cancel: cancel, c: c, ks: ks, key: key, next: offset, limit: limit}
	res := r.readPart(offset, min(limit-offset, PayloadBytesMax))
	if res.err != nil {
		cancel()
		return nil, res.err
	}
	r.next += res.want
	r.accept(res)
	return r, nil
}

func (r *Reader) readPart(offset, length uint64) partResult {
	data, info, err := r.c.ReadPart(r.ctx, r.ks, r.key, offset, length)
	return partResult{data: data, info: info, want: length, err: err}
}

// accept makes res the current part and learns the blob's size from it, so
// that no part is requested past the end as last seen.
func (r *Reader) accept(res partResult) {
	r.cur = res.data
	r.size = res.info.Size
	if uint64(len(res.data)) < res.want {
		r.stop()
	}
}

// stop requests no further parts and drops those in flight.
func (r *Reader) stop() {
	r.done = true
	r.cancel()
	for _, ch := range r.pending {
		<-ch
	}
	r.pending = nil
}

// issue starts part reads until partsInFlight are outstanding or the end of
// the range is reached.
func (r *Reader) issue() {
	for !r.done && len(r.pending) < partsInFlight && r.next < min(r.limit, r.size) {
		offset, length := r.next, min(r.limit-r.next, PayloadBytesMax)
		r.next += length
		ch := make(chan partResult, 1)
		r.pending = append(r.pending, ch)
		go func() { ch <- r.readPart(offset, length) }()
	}
}

// fill makes sure cur holds unread bytes, or returns why it cannot.
func (r *Reader) fill() error {
	for len(r.cur) == 0 {
		if r.err != nil {
			return r.err
		}
		r.issue()
		if len(r.pending) == 0 {
			r.err = io.EOF
			continue
		}
		res := <-r.pending[0]
		r.pending = r.pending[1:]
		if res.err != nil {
			r.err = res.err
			r.stop()
			continue
		}
		r.accept(res)
	}
	return nil
}

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := r.fill(); err != nil {
		return 0, err
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// WriteTo implements io.WriterTo, handing whole parts to w without copying
// them, so io.Copy from a Reader needs no buffer of its own.
func (r *Reader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if err := r.fill(); err == io.EOF {
			return total, nil
		} else if err != nil {
			return total, err
		}
		n, err := w.Write(r.cur)
		total += int64(n)
		r.cur = r.cur[n:]
		if err != nil {
			return total, err
		}
		if len(r.cur) > 0 {
			return total, io.ErrShortWrite
		}
	}
}

// Close stops the reads in flight. It always returns nil; later reads fail.
func (r *Reader) Close() error {
	r.stop()
	r.cur = nil
	r.err = errReaderClosed
	return nil
}

// Writer writes a stream into a blob from a starting offset, buffering it
// into parts of PayloadBytesMax and writing each at increasing offsets with a
// few parts in flight. Memory stays bounded by those parts.
//
// Each part is written atomically, the stream as a whole is not: readers may
// see some parts before others, and on failure the parts already written
// stay. Close must be called to write the last part; it returns the first
// error of the stream.
//
// A Writer is not safe for concurrent use.
type Writer struct {
	ctx     context.Context
	cancel  context.CancelFunc
	c       *Client
	ks, key string
	create  bool
	offset  uint64 // where buf will be written
	buf     []byte // the part being filled
	free    chan []byte
	made    int  // buffers allocated, at most cap(free)
	sent    bool // some part was sent
	closed  bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	err     error // the first error; guarded by mu
}

// NewWriter returns a Writer into blob key of keyspace ks starting at offset.
// With create a missing blob is created; otherwise writes fail with
// ErrNotFound. A Writer closed without data still writes one empty part, so
// that, as with Write, a missing blob is reported (or created).
func (c *Client) NewWriter(ctx context.Context, ks, key string, offset uint64, create bool) *Writer {
	ctx, cancel := context.WithCancel(ctx)
	return &Writer{ctx: ctx, cancel: cancel, c: c, ks: ks, key: key, create: create, offset: offset,
		// One buffer is being filled while the others are in flight.
		free: make(chan []byte, partsInFlight+1)}
}

func (w *Writer) firstErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
		// The stream has failed: stop the parts still in flight.
		w.cancel()
	}
	w.mu.Unlock()
}

// buffer returns an empty part buffer, waiting for one in flight to finish
// once all are allocated.
func (w *Writer) buffer() ([]byte, error) {
	select {
	case b := <-w.free:
		return b[:0], nil
	default:
	}
	if w.made < cap(w.free) {
		w.made++
		return make([]byte, 0, PayloadBytesMax), nil
	}
	select {
	case b := <-w.free:
		return b[:0], nil
	case <-w.ctx.Done():
		if err := w.firstErr(); err != nil {
			return nil, err
		}
		return nil, w.ctx.Err()
	}
}

// send writes buf at the current offset in the background and takes
// ownership of it.
func (w *Writer) send() {
	buf, offset := w.buf, w.offset
	w.buf = nil
	w.offset += uint64(len(buf))
	w.sent = true
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if _, err := w.c.commitOne(w.ctx, w.ks, WriteOp(w.key, offset, buf, w.create)); err != nil {
			w.fail(err)
		}
		if cap(buf) > 0 {
			w.free <- buf
		}
	}()
}

// Write implements io.Writer. It returns once p is buffered or handed to a
// part in flight; errors of parts in flight show up in later calls.
func (w *Writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, errWriterClosed
	}
	n := 0
	for len(p) > 0 {
		if err := w.firstErr(); err != nil {
			return n, err
		}
		if w.buf == nil {
			b, err := w.buffer()
			if err != nil {
				return n, err
			}
			w.buf = b
		}
		k := min(len(p), PayloadBytesMax-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		n += k
		p = p[k:]
		if len(w.buf) == PayloadBytesMax {
			w.send()
		}
	}
	return n, w.firstErr()
}

// ReadFrom implements io.ReaderFrom, reading straight into part buffers so
// io.Copy into a Writer copies each byte once.
func (w *Writer) ReadFrom(r io.Reader) (int64, error) {
	if w.closed {
		return 0, errWriterClosed
	}
	var total int64
	for {
		if err := w.firstErr(); err != nil {
			return total, err
		}
		if w.buf == nil {
			b, err := w.buffer()
			if err != nil {
				return total, err
			}
			w.buf = b
		}
		n, err := r.Read(w.buf[len(w.buf):PayloadBytesMax])
		w.buf = w.buf[:len(w.buf)+n]
		total += int64(n)
		if len(w.buf) == PayloadBytesMax {
			w.send()
		}
		if err == io.EOF {
			return total, w.firstErr()
		}
		if err != nil {
			return total, err
		}
	}
}

// Close writes the last part, waits for all parts and returns the first
// error of the stream. Closing again returns the same error.
func (w *Writer) Close() error {
	if !w.closed {
		w.closed = true
		if w.firstErr() == nil && (len(w.buf) > 0 || !w.sent) {
			w.send()
		}
		w.wg.Wait()
		w.cancel()
		w.buf = nil
	}
	return w.firstErr()
}

// Put creates or replaces blob key with the bytes of r and returns how many
// it wrote. If r yields at most PayloadBytesMax bytes, the put is one atomic
// commit: readers see the old blob or the new one, never a mix. Larger puts
// empty the blob atomically and then stream r into it with a Writer, so they
// are not atomic: readers may see a partly written blob, and on failure the
// blob is left holding a prefix of r.
func (c *Client) Put(ctx context.Context, ks, key string, r io.Reader) (int64, error) {
	// Reading one byte past the payload limit tells a small put from a
	// large one without holding more than one part.
	head, err := io.ReadAll(io.LimitReader(r, PayloadBytesMax+1))
	if err != nil {
		return 0, err
	}
	reset := []Op{WriteOp(key, 0, nil, true), TruncateOp(key, 0)}
	if len(head) <= PayloadBytesMax {
		ops := reset
		if len(head) > 0 {
			ops = append(ops, WriteOp(key, 0, head, false))
		}
		if _, err := c.Commit(ctx, ks, ops...); err != nil {
			return 0, err
		}
		return int64(len(head)), nil
	}
	if _, err := c.Commit(ctx, ks, reset...); err != nil {
		return 0, err
	}
	w := c.NewWriter(ctx, ks, key, 0, false)
	n, err := w.Write(head)
	total := int64(n)
	if err == nil {
		var m int64
		m, err = w.ReadFrom(r)
		total += m
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return total, err
}
