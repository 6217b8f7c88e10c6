package main

/*
#include <stdlib.h>
#define TYR_TYPES_ONLY
#include "tyr.h"
*/
import "C"

import (
	"context"
	"unsafe"

	"github.com/tyrstore/tyr/tyrfs"
)

// fsys is the TýrFS file system of one keyspace, acting for one user.
type fsys struct {
	c  *conn
	fs *tyrfs.FS
}

//export tyr_fs_open
func tyr_fs_open(h C.tyr_client, ks *C.char, uid C.uint32_t, gids *C.uint32_t, ngids C.size_t, out *C.tyr_fs, st *C.tyr_status) C.int {
	return withConn(st, h, func(ctx context.Context, c *conn) error {
		switch {
		case out == nil || ks == nil:
			return invalid("tyr_fs_open: out or ks is NULL")
		case ngids > 0 && gids == nil:
			return invalid("tyr_fs_open: gids is NULL")
		case ngids > C.TYR_FS_GROUPS_MAX:
			return invalid("tyr_fs_open: %d groups, above %d", uint64(ngids), C.TYR_FS_GROUPS_MAX)
		}
		var g []uint32
		for _, gid := range unsafe.Slice(gids, int(ngids)) {
			g = append(g, uint32(gid))
		}
		f, err := tyrfs.New(ctx, c.c, C.GoString(ks))
		if err != nil {
			return err
		}
		*out = C.tyr_fs(newHandle(&fsys{c: c, fs: f.As(tyrfs.Cred{UID: uint32(uid), GIDs: g})}))
		return nil
	})
}

//export tyr_fs_close
func tyr_fs_close(h C.tyr_fs) { _, _ = release[*fsys](uint64(h)) }

//export tyr_fs_fetch_many
func tyr_fs_fetch_many(h C.tyr_fs, paths **C.char, n C.size_t, out *C.tyr_fs_file, st *C.tyr_status) C.int {
	return call(st, func() error {
		f, err := lookup[*fsys](uint64(h))
		switch {
		case err != nil:
			return err
		case n > C.TYR_FS_FETCH_MANY_MAX:
			return invalid("tyr_fs_fetch_many: %d paths, above %d", uint64(n), C.TYR_FS_FETCH_MANY_MAX)
		case n > 0 && (paths == nil || out == nil):
			return invalid("tyr_fs_fetch_many: paths or out is NULL")
		}
		ps := make([]string, n)
		for i, p := range unsafe.Slice(paths, int(n)) {
			if p == nil {
				return invalid("tyr_fs_fetch_many: path %d is NULL", i)
			}
			ps[i] = C.GoString(p)
		}
		ctx, cancel := f.c.ctx()
		defer cancel()
		rs, err := f.fs.FetchMany(ctx, ps)
		if err != nil {
			return err
		}
		for i, r := range rs {
			o := &unsafe.Slice(out, int(n))[i]
			*o = C.tyr_fs_file{}
			if r.Err != nil {
				o.err = C.int(tyrfs.Errno(r.Err))
				continue
			}
			o.data, o.len = cBytes(r.Data), C.size_t(len(r.Data))
			o.mode, o.uid, o.gid = C.uint32_t(r.Attr.Mode), C.uint32_t(r.Attr.UID), C.uint32_t(r.Attr.GID)
			o.mtime_ns = C.int64_t(r.Attr.Mtime)
		}
		return nil
	})
}
