package main

/*
#include <stdlib.h>
#define TYR_TYPES_ONLY
#include "tyr.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unsafe"

	"github.com/tyrstore/tyr/client"
)

// stream is the context of a reader or writer. It lives until the stream
// is closed; each call on the stream must end within the client's timeout,
// else the stream is cancelled and the call fails with TYR_TIMEOUT.
type stream struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	timeout time.Duration
}

func newStream(c *conn) stream {
	ctx, cancel := context.WithCancelCause(context.Background())
	return stream{ctx: ctx, cancel: cancel, timeout: c.timeout}
}

// bound runs f, one call on the stream, under the client's timeout.
func (s stream) bound(f func() error) error {
	if s.timeout > 0 {
		t := time.AfterFunc(s.timeout, func() { s.cancel(context.DeadlineExceeded) })
		defer t.Stop()
	}
	err := f()
	if err != nil && errors.Is(context.Cause(s.ctx), context.DeadlineExceeded) {
		return fmt.Errorf("tyr: a call on the stream passed the client's timeout of %v, which cancelled the stream: %w",
			s.timeout, context.DeadlineExceeded)
	}
	return err
}

func (s stream) close() { s.cancel(context.Canceled) }

type reader struct {
	stream
	r *client.Reader
}

type writer struct {
	stream
	w *client.Writer
}

//export tyr_reader_open
func tyr_reader_open(h C.tyr_client, ks, key *C.char, offset C.uint64_t, length C.int64_t, out *C.tyr_reader, st *C.tyr_status) C.int {
	return call(st, func() error {
		c, err := lookup[*conn](uint64(h))
		if err != nil {
			return err
		}
		if out == nil {
			return invalid("tyr_reader_open: out is NULL")
		}
		s := newStream(c)
		var r *client.Reader
		err = s.bound(func() (err error) {
			r, err = c.c.NewRangeReader(s.ctx, C.GoString(ks), C.GoString(key), uint64(offset), int64(length))
			return err
		})
		if err != nil {
			s.close()
			return err
		}
		*out = C.tyr_reader(newHandle(&reader{stream: s, r: r}))
		return nil
	})
}

//export tyr_reader_read
func tyr_reader_read(h C.tyr_reader, buf unsafe.Pointer, n C.size_t, got *C.size_t, st *C.tyr_status) C.int {
	return call(st, func() error {
		r, err := lookup[*reader](uint64(h))
		if err != nil {
			return err
		}
		if got == nil || (buf == nil && n > 0) {
			return invalid("tyr_reader_read: buf or n is NULL")
		}
		var k int
		err = r.bound(func() (err error) {
			k, err = io.ReadFull(r.r, bytesIn(buf, n))
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = nil
			}
			return err
		})
		*got = C.size_t(k)
		return err
	})
}

//export tyr_reader_close
func tyr_reader_close(h C.tyr_reader) {
	call(nil, func() error {
		r, err := release[*reader](uint64(h))
		if err == nil {
			r.r.Close()
			r.close()
		}
		return err
	})
}

//export tyr_writer_open
func tyr_writer_open(h C.tyr_client, ks, key *C.char, offset C.uint64_t, create C.int, out *C.tyr_writer, st *C.tyr_status) C.int {
	return call(st, func() error {
		c, err := lookup[*conn](uint64(h))
		if err != nil {
			return err
		}
		if out == nil {
			return invalid("tyr_writer_open: out is NULL")
		}
		s := newStream(c)
		w := c.c.NewWriter(s.ctx, C.GoString(ks), C.GoString(key), uint64(offset), create != 0)
		*out = C.tyr_writer(newHandle(&writer{stream: s, w: w}))
		return nil
	})
}

//export tyr_writer_write
func tyr_writer_write(h C.tyr_writer, data unsafe.Pointer, n C.size_t, st *C.tyr_status) C.int {
	return call(st, func() error {
		w, err := lookup[*writer](uint64(h))
		if err != nil {
			return err
		}
		return w.bound(func() error {
			_, err := w.w.Write(bytesIn(data, n)) // copies into the writer's parts
			return err
		})
	})
}

//export tyr_writer_close
func tyr_writer_close(h C.tyr_writer, st *C.tyr_status) C.int {
	return call(st, func() error {
		w, err := release[*writer](uint64(h))
		if err != nil {
			return err
		}
		defer w.close()
		return w.bound(w.w.Close)
	})
}

// jsonOut hands v to C as a JSON string from malloc.
func jsonOut(out **C.char, v any) error {
	b, err := json.Marshal(v)
	if err == nil {
		*out = C.CString(string(b))
	}
	return err
}

//export tyr_cluster_status_json
func tyr_cluster_status_json(h C.tyr_client, out **C.char, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		if out == nil {
			return invalid("tyr_cluster_status_json: json is NULL")
		}
		s, err := c.c.ClusterStatus(ctx)
		if err != nil {
			return err
		}
		return jsonOut(out, s)
	})
}

//export tyr_node_usage_json
func tyr_node_usage_json(h C.tyr_client, out **C.char, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		if out == nil {
			return invalid("tyr_node_usage_json: json is NULL")
		}
		u, err := c.c.NodeUsage(ctx)
		if err != nil {
			return err
		}
		return jsonOut(out, u)
	})
}
