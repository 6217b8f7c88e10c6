package client

import (
	"context"
	"errors"
	"time"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/limits"
)

// FSFetch is the server side of TýrFS's fetch (package tyrfs): it reads up
// to length bytes (at least the 64-byte header) from the start of the
// TýrFS file at path, after the node serving the file checked search
// permission on its ancestor directories and read permission on the file
// for uid and gids. A refusal is returned as errno (a Linux errno: EACCES,
// ENOENT, ENOTDIR, EISDIR, EINVAL, ENAMETOOLONG, EIO), with a nil error;
// err is for everything else. The request goes straight to the node
// serving the file's first chunk.
func (c *Client) FSFetch(ctx context.Context, ks, path string, uid uint32, gids []uint32, length uint64) (data []byte, info BlobInfo, errno uint32, err error) {
	req := &tyrpb.FsFetchRequest{Keyspace: []byte(ks), Path: []byte(path), Uid: uid, Gids: gids, Length: length}
	resp, err := c.fsFetchRPC(ctx, req)
	if err != nil {
		return nil, BlobInfo{}, 0, fromStatus(err)
	}
	if e := resp.GetErrno(); e != 0 {
		return nil, BlobInfo{}, e, nil
	}
	return resp.GetData(), BlobInfo{Key: path, Size: resp.GetSize(), Version: resp.GetVersion()}, 0, nil
}

// FSPermissionLease is how long a server may use its copy of a TýrFS
// directory's permissions.
const FSPermissionLease = limits.FSPermissionLease

// FSInvalidate makes every server drop its copies of the permissions of
// keyspace ks's TýrFS directories whose keys start with prefix (a
// directory's key, "/a/"), after a change to them committed. It returns
// once no server uses the old permissions: the endpoint reaches every
// member or waits out those it cannot reach. If the endpoint itself
// cannot be reached, FSInvalidate waits FSPermissionLease, after which no
// copy made before the change is used, and returns nil; it fails only if
// ctx ends first.
func (c *Client) FSInvalidate(ctx context.Context, ks, prefix string) error {
	start := time.Now()
	_, err := c.api.FsInvalidate(ctx, &tyrpb.FsInvalidateRequest{Keyspace: []byte(ks), Prefix: []byte(prefix)})
	if err == nil {
		return nil
	}
	if e := fromStatus(err); errors.Is(e, ErrInvalidArgument) {
		return e
	}
	t := time.NewTimer(time.Until(start.Add(FSPermissionLease)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
