package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/frame"
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
	return c.FSFetchInto(ctx, ks, path, uid, gids, length, nil)
}

// FSFetchInto is FSFetch reading the answer into buf's memory when it
// fits in buf's capacity, so that a caller reading many files reuses one
// buffer: data then shares buf's memory (an answer that does not fit, or
// that came over gRPC, is allocated anew). buf may be nil.
func (c *Client) FSFetchInto(ctx context.Context, ks, path string, uid uint32, gids []uint32, length uint64, buf []byte) (data []byte, info BlobInfo, errno uint32, err error) {
	req := &tyrpb.FsFetchRequest{Keyspace: []byte(ks), Path: []byte(path), Uid: uid, Gids: gids, Length: length}
	resp, err := c.fsFetchRPC(ctx, req, buf)
	if err != nil {
		return nil, BlobInfo{}, 0, fromStatus(err)
	}
	r := fetchResult(path, resp)
	return r.Data, r.Info, r.Errno, nil
}

// FSFetchResult is one path's answer in FSFetchMany, as FSFetch gives it:
// the data and its blob's description, or a refusal as Errno, or Err.
type FSFetchResult struct {
	Data  []byte
	Info  BlobInfo
	Errno uint32
	Err   error
}

// FSFetchManyMax bounds the paths of one FSFetchMany.
const FSFetchManyMax = limits.FSFetchManyMax

// FSFetchMany is FSFetch of every path of paths at once, each answered as
// FSFetch answers it, in the order given. The fetches bound for one node
// go on one data connection, pipelined (the node answers them in order,
// its answers written together), and the nodes are asked in parallel, so
// a batch of small files costs about one round trip per node rather than
// one per file. A fetch whose node could not be reached over the data
// path is sent again alone, as FSFetch sends it (over gRPC, through the
// endpoint, or to another endpoint on failover); fetches change nothing,
// so sending one again is safe. A client without the data path
// (WithoutDataPath) sends each alone over gRPC. The error is for the batch
// as a whole: more than FSFetchManyMax paths.
func (c *Client) FSFetchMany(ctx context.Context, ks string, paths []string, uid uint32, gids []uint32, length uint64) ([]FSFetchResult, error) {
	return c.FSFetchManyInto(ctx, ks, paths, uid, gids, length, nil)
}

// FSFetchManyInto is FSFetchMany reading the answer for paths[i] into
// bufs[i]'s memory when it fits there, as FSFetchInto does; bufs is nil
// or holds a buffer for every path, no two sharing memory (more or fewer
// is ErrInvalidArgument). Every read into bufs has ended when it returns.
func (c *Client) FSFetchManyInto(ctx context.Context, ks string, paths []string, uid uint32, gids []uint32, length uint64, bufs [][]byte) ([]FSFetchResult, error) {
	if len(paths) > FSFetchManyMax {
		return nil, fmt.Errorf("%w: a fetch of %d paths, above %d", ErrInvalidArgument, len(paths), FSFetchManyMax)
	}
	if bufs != nil && len(bufs) != len(paths) {
		return nil, fmt.Errorf("%w: %d buffers for %d paths", ErrInvalidArgument, len(bufs), len(paths))
	}
	out := make([]FSFetchResult, len(paths))
	done := make([]bool, len(paths))
	req := func(i int) *tyrpb.FsFetchRequest {
		return &tyrpb.FsFetchRequest{Keyspace: []byte(ks), Path: []byte(paths[i]), Uid: uid, Gids: gids, Length: length}
	}
	if c.data != nil && !forwardedCall(ctx) {
		groups := map[string][]int{}
		for i, p := range paths {
			addr := c.router.pickAddr(ctx, ks, p, readShape{direct: true, n: length})
			if addr == "" {
				addr = c.dataEndpoint()
			}
			groups[addr] = append(groups[addr], i)
		}
		var wg sync.WaitGroup
		for addr, idx := range splitBatch(groups) {
			wg.Go(func() {
				reqs := make([]*tyrpb.FsFetchRequest, len(idx))
				var into [][]byte
				if bufs != nil {
					into = make([][]byte, len(idx))
				}
				for k, i := range idx {
					reqs[k] = req(i)
					if bufs != nil {
						into[k] = bufs[i]
					}
				}
				answers, err := c.data.fetchMany(ctx, addr, reqs, into)
				for k, a := range answers {
					if a.h.Flags&frame.FlagRouting != 0 && k == len(answers)-1 {
						c.router.observeIDs(a.h.RingID, a.h.MembersID)
					}
					if retryable(ctx, a.err) {
						continue // sent again alone
					}
					i := idx[k]
					done[i] = true
					if a.err != nil {
						out[i].Err = fromStatus(a.err)
						continue
					}
					out[i] = fetchResult(paths[i], fetchAnswer(a.resp, a.h))
				}
				if retryable(ctx, err) {
					c.router.refresh()
				}
			})
		}
		wg.Wait()
	}
	for i := range paths {
		if done[i] {
			continue
		}
		var buf []byte
		if bufs != nil {
			buf = bufs[i]
		}
		resp, err := c.fsFetchRPC(ctx, req(i), buf)
		if err != nil {
			out[i].Err = fromStatus(err)
			continue
		}
		out[i] = fetchResult(paths[i], resp)
	}
	return out, nil
}

// Each node's share of a batch of fetches goes on up to
// fetchManyConnsMax connections at once, at least fetchManyPartMin
// fetches to each, so that the node reads them in parallel.
const (
	fetchManyConnsMax = 4
	fetchManyPartMin  = 8
)

// splitBatch cuts each address's fetches into parts of one connection.
func splitBatch(groups map[string][]int) iter.Seq2[string, []int] {
	return func(yield func(string, []int) bool) {
		for addr, idx := range groups {
			parts := min(fetchManyConnsMax, max(1, len(idx)/fetchManyPartMin))
			for k := range parts {
				if !yield(addr, idx[k*len(idx)/parts:(k+1)*len(idx)/parts]) {
					return
				}
			}
		}
	}
}

// fetchResult is a fetch's answer for the caller.
func fetchResult(path string, resp *tyrpb.FsFetchResponse) FSFetchResult {
	if e := resp.GetErrno(); e != 0 {
		return FSFetchResult{Errno: e}
	}
	return FSFetchResult{Data: resp.GetData(), Info: BlobInfo{Key: path, Size: resp.GetSize(), Version: resp.GetVersion()}}
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
