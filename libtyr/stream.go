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
	"io"
	"unsafe"

	"github.com/tyrstore/tyr/client"
)

// A stream lives until it is closed, so its context is cancelled by Close
// rather than bounded by the client's deadline.
type reader struct {
	r      *client.Reader
	cancel context.CancelFunc
}

type writer struct {
	w      *client.Writer
	cancel context.CancelFunc
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
		ctx, cancel := context.WithCancel(context.Background())
		r, err := c.c.NewRangeReader(ctx, C.GoString(ks), C.GoString(key), uint64(offset), int64(length))
		if err != nil {
			cancel()
			return err
		}
		*out = C.tyr_reader(newHandle(&reader{r: r, cancel: cancel}))
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
		k, err := io.ReadFull(r.r, bytesIn(buf, n))
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = nil
		}
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
			r.cancel()
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
		ctx, cancel := context.WithCancel(context.Background())
		w := c.c.NewWriter(ctx, C.GoString(ks), C.GoString(key), uint64(offset), create != 0)
		*out = C.tyr_writer(newHandle(&writer{w: w, cancel: cancel}))
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
		_, err = w.w.Write(bytesIn(data, n)) // copies into the writer's parts
		return err
	})
}

//export tyr_writer_close
func tyr_writer_close(h C.tyr_writer, st *C.tyr_status) C.int {
	return call(st, func() error {
		w, err := release[*writer](uint64(h))
		if err != nil {
			return err
		}
		defer w.cancel()
		return w.w.Close()
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
