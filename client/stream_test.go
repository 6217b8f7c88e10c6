package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// multiPart is large enough to need four parts, the last one short, so every
// path through part splitting and read-ahead is taken.
const multiPart = 3*client.PayloadBytesMax + 123

func randomBytes(seed uint64, n int) []byte {
	var s [32]byte
	s[0] = byte(seed)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

// setup starts one server for a test and creates keyspace "stream" on it.
func setup(t *testing.T) (*client.Client, context.Context) {
	t.Helper()
	c := testserver.Start(t).Client()
	ctx := context.Background()
	if _, err := c.CreateKeyspace(ctx, "stream", client.KeyspaceConfig{MVCC: true}); err != nil {
		t.Fatal(err)
	}
	return c, ctx
}

func readAll(t *testing.T, c *client.Client, ctx context.Context, key string) []byte {
	t.Helper()
	r, err := c.NewReader(ctx, "stream", key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestStreams(t *testing.T) {
	c, ctx := setup(t)
	data := randomBytes(1, multiPart)
	// Blob "big" holds data for the subtests that only read.
	n, err := c.Put(ctx, "stream", "big", bytes.NewReader(data))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("put: %d, %v; want %d", n, err, len(data))
	}

	t.Run("PutAndReader", func(t *testing.T) {
		if got := readAll(t, c, ctx, "big"); !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes, want %d equal ones", len(got), len(data))
		}
		// iotest reads in tiny and odd sizes; a range across a part
		// boundary keeps that quick while still crossing parts.
		const from, length = client.PayloadBytesMax - 30_000, 60_000
		r, err := c.NewRangeReader(ctx, "stream", "big", from, length)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if err := iotest.TestReader(r, data[from:from+length]); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("PutReplaces", func(t *testing.T) {
		// Exactly one payload is still the atomic path; one more byte is
		// not. Each put must replace the longer blob before it.
		for _, n := range []int{client.PayloadBytesMax + 1, client.PayloadBytesMax, 5, 0} {
			if _, err := c.Put(ctx, "stream", "replace", bytes.NewReader(data[:n])); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, c, ctx, "replace"); !bytes.Equal(got, data[:n]) {
				t.Fatalf("put of %d bytes read back as %d", n, len(got))
			}
		}
	})

	t.Run("RangeReader", func(t *testing.T) {
		for _, tc := range []struct{ off, length int64 }{
			{0, 0}, {10, 100}, {client.PayloadBytesMax - 5, client.PayloadBytesMax + 10},
			{2 * client.PayloadBytesMax, -1}, {multiPart - 3, 1000}, {multiPart + 5, 10},
		} {
			r, err := c.NewRangeReader(ctx, "stream", "big", uint64(tc.off), tc.length)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			lo := min(tc.off, int64(len(data)))
			hi := int64(len(data))
			if tc.length >= 0 {
				hi = min(hi, tc.off+tc.length)
			}
			if err != nil || !bytes.Equal(got, data[lo:hi]) {
				t.Fatalf("range %+v: %d bytes, %v; want %d", tc, len(got), err, hi-lo)
			}
		}
	})

	t.Run("WriterAtReaderAt", func(t *testing.T) {
		if err := c.Create(ctx, "stream", "at"); err != nil {
			t.Fatal(err)
		}
		b := c.Blob(ctx, "stream", "at")
		if n, err := b.WriteAt(data, 100); err != nil || n != len(data) {
			t.Fatalf("WriteAt: %d, %v", n, err)
		}
		size, err := b.Size()
		if err != nil || size != int64(len(data))+100 {
			t.Fatalf("Size: %d, %v; want %d", size, err, len(data)+100)
		}
		want := append(make([]byte, 100), data...)
		got := make([]byte, len(want))
		if n, err := b.ReadAt(got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
			t.Fatalf("ReadAt whole: %d, %v", n, err)
		}
		// A read running past the end is short and says io.EOF.
		got = make([]byte, 2*client.PayloadBytesMax)
		off := size - client.PayloadBytesMax - 7
		n, err := b.ReadAt(got, off)
		if err != io.EOF || n != client.PayloadBytesMax+7 || !bytes.Equal(got[:n], want[off:]) {
			t.Fatalf("ReadAt past end: %d, %v; want %d, io.EOF", n, err, client.PayloadBytesMax+7)
		}
		if n, err := b.ReadAt(got[:10], size); n != 0 || err != io.EOF {
			t.Fatalf("ReadAt at end: %d, %v; want 0, io.EOF", n, err)
		}
		if _, err := b.ReadAt(got[:10], -1); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("ReadAt negative offset: %v", err)
		}
		// iotest checks the io.ReaderAt contract through a section reader;
		// each of its reads is a request, so the section is kept small.
		if err := iotest.TestReader(io.NewSectionReader(b, size-100, 100), want[size-100:]); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Writer", func(t *testing.T) {
		w := c.NewWriter(ctx, "stream", "w", 5, true)
		// Odd write sizes make parts straddle writes.
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1_000_003)
			if k, err := w.Write(rest[:n]); err != nil || k != n {
				t.Fatalf("Write: %d, %v", k, err)
			}
			rest = rest[n:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := w.Write([]byte("x")); err == nil {
			t.Fatal("Write after Close succeeded")
		}
		if got := readAll(t, c, ctx, "w"); !bytes.Equal(got, append(make([]byte, 5), data...)) {
			t.Fatalf("read back %d bytes", len(got))
		}
		// An empty Writer with create makes an empty blob.
		if err := c.NewWriter(ctx, "stream", "w-empty", 0, true).Close(); err != nil {
			t.Fatal(err)
		}
		if st, err := c.Stat(ctx, "stream", "w-empty"); err != nil || st.Size != 0 {
			t.Fatalf("empty writer: %+v, %v", st, err)
		}
	})

	t.Run("Missing", func(t *testing.T) {
		if _, err := c.NewReader(ctx, "stream", "nope"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("NewReader of missing blob: %v", err)
		}
		if _, err := c.NewReader(ctx, "no-such-ks", "k"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("NewReader in missing keyspace: %v", err)
		}
		b := c.Blob(ctx, "stream", "nope")
		if _, err := b.ReadAt(make([]byte, 10), 0); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("ReadAt of missing blob: %v", err)
		}
		if _, err := b.WriteAt(data, 0); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("WriteAt to missing blob: %v", err)
		}
		if _, err := b.Size(); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("Size of missing blob: %v", err)
		}
		w := c.NewWriter(ctx, "stream", "nope", 0, false)
		_, _ = w.Write(data)
		if err := w.Close(); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("Writer to missing blob: Close gave %v", err)
		}
		if _, err := c.Put(ctx, "no-such-ks", "k", bytes.NewReader(data)); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("Put in missing keyspace: %v", err)
		}
	})

	t.Run("ReaderClose", func(t *testing.T) {
		r, err := c.NewReader(ctx, "stream", "big")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r, make([]byte, 10)); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Read(make([]byte, 10)); err == nil || err == io.EOF {
			t.Fatalf("Read after Close: %v, want an error", err)
		}
	})
}
