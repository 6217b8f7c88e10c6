package main

/*
#include <stdlib.h>
#define TYR_TYPES_ONLY
#include "tyr.h"
*/
import "C"

import (
	"bytes"
	"context"
	"time"
	"unsafe"

	"github.com/tyrstore/tyr/client"
)

// conn is a client and the deadline of its calls.
type conn struct {
	c       *client.Client
	timeout time.Duration
}

// ctx is the context of one call.
func (c *conn) ctx() (context.Context, context.CancelFunc) {
	if c.timeout <= 0 {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), c.timeout)
}

// withConn runs f with client handle h and a context for one call.
func withConn(st *C.tyr_status, h C.tyr_client, f func(ctx context.Context, c *conn) error) C.int {
	return call(st, func() error {
		c, err := lookup[*conn](uint64(h))
		if err != nil {
			return err
		}
		ctx, cancel := c.ctx()
		defer cancel()
		return f(ctx, c)
	})
}

//export tyr_connect
func tyr_connect(endpoint *C.char, timeoutMs C.int64_t, flags C.uint32_t, out *C.tyr_client, st *C.tyr_status) C.int {
	return call(st, func() error {
		if out == nil {
			return invalid("tyr_connect: out is NULL")
		}
		if timeoutMs < 0 {
			return invalid("tyr_connect: negative timeout %d ms", int64(timeoutMs))
		}
		ep := client.DefaultEndpoint
		if endpoint != nil && *endpoint != 0 {
			ep = C.GoString(endpoint)
		}
		var opts []client.Option
		if flags&C.TYR_CONNECT_NO_ROUTING != 0 {
			opts = append(opts, client.WithoutRouting())
		}
		if flags&C.TYR_CONNECT_NO_DATA_PATH != 0 {
			opts = append(opts, client.WithoutDataPath())
		}
		c, err := client.Dial(ep, opts...)
		if err != nil {
			return err
		}
		*out = C.tyr_client(newHandle(&conn{c: c, timeout: time.Duration(timeoutMs) * time.Millisecond}))
		return nil
	})
}

//export tyr_close
func tyr_close(h C.tyr_client) C.int {
	return call(nil, func() error {
		c, err := release[*conn](uint64(h))
		if err != nil {
			return err
		}
		return c.c.Close()
	})
}

//export tyr_ready
func tyr_ready(h C.tyr_client, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error { return c.c.Ready(ctx) })
}

func keyspaceInfo(out *C.tyr_keyspace_info, ki client.KeyspaceInfo) {
	*out = C.tyr_keyspace_info{}
	name := unsafe.Slice((*byte)(unsafe.Pointer(&out.name[0])), len(out.name))
	copy(name[:len(name)-1], ki.Name)
	out.config = C.tyr_keyspace_config{chunk_size: C.uint64_t(ki.Config.ChunkSize),
		replication: C.uint32_t(ki.Config.Replication), mvcc: cBool(ki.Config.MVCC), sync: cBool(ki.Config.Sync)}
	out.created_ns = unixNano(ki.Created)
	out.disk_bytes = C.uint64_t(ki.DiskBytes)
	out.logical_bytes = C.uint64_t(ki.LogicalBytes)
	out.reclaim_bytes = C.uint64_t(ki.ReclaimBytes)
	out.blobs = C.uint64_t(ki.Blobs)
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

//export tyr_keyspace_create
func tyr_keyspace_create(h C.tyr_client, name *C.char, cfg *C.tyr_keyspace_config, info *C.tyr_keyspace_info, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		kc := client.DefaultKeyspaceConfig()
		if cfg != nil {
			kc = client.KeyspaceConfig{ChunkSize: uint64(cfg.chunk_size), Replication: uint32(cfg.replication),
				MVCC: cfg.mvcc != 0, Sync: cfg.sync != 0}
		}
		ki, err := c.c.CreateKeyspace(ctx, C.GoString(name), kc)
		if err == nil && info != nil {
			keyspaceInfo(info, ki)
		}
		return err
	})
}

//export tyr_keyspace_drop
func tyr_keyspace_drop(h C.tyr_client, name *C.char, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error { return c.c.DropKeyspace(ctx, C.GoString(name)) })
}

//export tyr_keyspace_get
func tyr_keyspace_get(h C.tyr_client, name *C.char, out *C.tyr_keyspace_info, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		if out == nil {
			return invalid("tyr_keyspace_get: out is NULL")
		}
		ki, err := c.c.Keyspace(ctx, C.GoString(name))
		if err == nil {
			keyspaceInfo(out, ki)
		}
		return err
	})
}

//export tyr_keyspace_list
func tyr_keyspace_list(h C.tyr_client, out **C.tyr_keyspace_info, n *C.size_t, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		if out == nil || n == nil {
			return invalid("tyr_keyspace_list: out or n is NULL")
		}
		kss, err := c.c.ListKeyspaces(ctx)
		if err != nil {
			return err
		}
		var arr *C.tyr_keyspace_info
		if len(kss) > 0 {
			arr = (*C.tyr_keyspace_info)(C.calloc(C.size_t(len(kss)), C.size_t(unsafe.Sizeof(C.tyr_keyspace_info{}))))
			infos := unsafe.Slice(arr, len(kss))
			for i := range infos {
				keyspaceInfo(&infos[i], kss[i])
			}
		}
		*out, *n = arr, C.size_t(len(kss))
		return nil
	})
}

func blobInfo(out *C.tyr_blob_info, bi client.BlobInfo, key *C.char) {
	*out = C.tyr_blob_info{key: key, size: C.uint64_t(bi.Size), version: C.uint64_t(bi.Version),
		created_ns: unixNano(bi.Created), modified_ns: unixNano(bi.Modified)}
}

func opResult(out *C.tyr_op_result, r client.OpResult) {
	*out = C.tyr_op_result{offset: C.uint64_t(r.Offset), size: C.uint64_t(r.Size),
		version: C.uint64_t(r.Version), value: C.uint64_t(r.Value)}
}

//export tyr_create
func tyr_create(h C.tyr_client, ks, key *C.char, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		return c.c.Create(ctx, C.GoString(ks), C.GoString(key))
	})
}

//export tyr_delete
func tyr_delete(h C.tyr_client, ks, key *C.char, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		return c.c.Delete(ctx, C.GoString(ks), C.GoString(key))
	})
}

//export tyr_stat
func tyr_stat(h C.tyr_client, ks, key *C.char, out *C.tyr_blob_info, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		if out == nil {
			return invalid("tyr_stat: out is NULL")
		}
		bi, err := c.c.Stat(ctx, C.GoString(ks), C.GoString(key))
		if err == nil {
			blobInfo(out, bi, nil)
		}
		return err
	})
}

//export tyr_truncate
func tyr_truncate(h C.tyr_client, ks, key *C.char, size C.uint64_t, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		return c.c.Truncate(ctx, C.GoString(ks), C.GoString(key), uint64(size))
	})
}

//export tyr_write
func tyr_write(h C.tyr_client, ks, key *C.char, offset C.uint64_t, data unsafe.Pointer, n C.size_t, create C.int, res *C.tyr_op_result, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		write := c.c.Write
		if create != 0 {
			write = c.c.WriteCreate
		}
		r, err := write(ctx, C.GoString(ks), C.GoString(key), uint64(offset), bytesIn(data, n))
		if err == nil && res != nil {
			opResult(res, r)
		}
		return err
	})
}

//export tyr_append
func tyr_append(h C.tyr_client, ks, key *C.char, data unsafe.Pointer, n C.size_t, offset *C.uint64_t, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		off, err := c.c.Append(ctx, C.GoString(ks), C.GoString(key), bytesIn(data, n))
		if err == nil && offset != nil {
			*offset = C.uint64_t(off)
		}
		return err
	})
}

//export tyr_put
func tyr_put(h C.tyr_client, ks, key *C.char, data unsafe.Pointer, n C.size_t, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		_, err := c.c.Put(ctx, C.GoString(ks), C.GoString(key), bytes.NewReader(bytesIn(data, n)))
		return err
	})
}

//export tyr_read
func tyr_read(h C.tyr_client, ks, key *C.char, offset C.uint64_t, buf unsafe.Pointer, n C.size_t, got *C.size_t, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		if got == nil || (buf == nil && n > 0) {
			return invalid("tyr_read: buf or n is NULL")
		}
		data, err := c.c.Read(ctx, C.GoString(ks), C.GoString(key), uint64(offset), uint64(n))
		if err == nil {
			*got = C.size_t(copy(bytesIn(buf, n), data))
		}
		return err
	})
}

//export tyr_get
func tyr_get(h C.tyr_client, ks, key *C.char, data *unsafe.Pointer, n *C.size_t, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		if data == nil || n == nil {
			return invalid("tyr_get: data or len is NULL")
		}
		b, err := c.c.Read(ctx, C.GoString(ks), C.GoString(key), 0, client.BlobBytesMax)
		if err == nil {
			*data, *n = cBytes(b), C.size_t(len(b))
		}
		return err
	})
}

//export tyr_atomic
func tyr_atomic(h C.tyr_client, ks, key *C.char, offset C.uint64_t, width, fn C.int, operand C.uint64_t, value *C.uint64_t, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		v, err := c.c.Atomic(ctx, C.GoString(ks), C.GoString(key), uint64(offset), int(width), client.AtomicFunc(fn), uint64(operand))
		if err == nil && value != nil {
			*value = C.uint64_t(v)
		}
		return err
	})
}

//export tyr_cas
func tyr_cas(h C.tyr_client, ks, key *C.char, offset C.uint64_t, expected, data unsafe.Pointer, n C.size_t, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		return c.c.CompareAndSwap(ctx, C.GoString(ks), C.GoString(key), uint64(offset), bytesIn(expected, n), bytesIn(data, n))
	})
}

//export tyr_list
func tyr_list(h C.tyr_client, ks, prefix, startAfter *C.char, limit C.size_t, out **C.tyr_blob_info, n *C.size_t, next **C.char, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		if out == nil || n == nil {
			return invalid("tyr_list: out or n is NULL")
		}
		if limit > client.ListLimitMax {
			return invalid("tyr_list: limit %d is above %d", uint64(limit), client.ListLimitMax)
		}
		blobs, nxt, err := c.c.List(ctx, C.GoString(ks), C.GoString(prefix), C.GoString(startAfter), int(limit))
		if err != nil {
			return err
		}
		*out, *n = blobList(blobs), C.size_t(len(blobs))
		if next != nil {
			*next = nil
			if nxt != "" {
				*next = C.CString(nxt)
			}
		}
		return nil
	})
}

// blobList lays blobs out in one block from malloc: the array of
// tyr_blob_info, then their keys, each NUL-terminated.
func blobList(blobs []client.BlobInfo) *C.tyr_blob_info {
	if len(blobs) == 0 {
		return nil
	}
	head := len(blobs) * int(unsafe.Sizeof(C.tyr_blob_info{}))
	size := head
	for _, b := range blobs {
		size += len(b.Key) + 1
	}
	block := unsafe.Slice((*byte)(C.malloc(C.size_t(size))), size)
	arr := unsafe.Slice((*C.tyr_blob_info)(unsafe.Pointer(&block[0])), len(blobs))
	at := head
	for i, b := range blobs {
		key := (*C.char)(unsafe.Pointer(&block[at]))
		at += copy(block[at:], b.Key)
		block[at] = 0
		at++
		blobInfo(&arr[i], b, key)
	}
	return &arr[0]
}
