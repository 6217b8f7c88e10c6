package node

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/storage"
)

// ReadThrough serves a read at a version manager of key (see placement.go):
// it pins the blob's record at version (0: the latest committed here) and
// reads each chunk of the range at that version, from the local store
// where this node holds the chunk and from the chunk's read target
// otherwise, in parallel. Every holder committed the version before this
// version manager did, except one that is also a version manager ahead of
// this one in the chain, which may still have it staged and waits for it
// (ReadChunks); so the bytes are those of one blob version: a read that
// spans chunks never mixes two commits.
//
// Where this node holds every chunk of the range, it reads from one
// snapshot of its store instead (mvcc.Store.ReadAt): a shrinking truncate
// drops the older versions of the pages it cuts at once, so reads of
// chunks at a version from separate snapshots could miss them.
//
// With use, it counts the version read as in use by a running transaction
// (mvcc.Store.Pin), and always pins.
func (n *Node) ReadThrough(ctx context.Context, ks *storage.Keyspace, pl Placement, key string, off, length, version uint64, use bool) ([]byte, mvcc.BlobInfo, error) {
	if length > limits.PayloadBytesMax {
		return nil, mvcc.BlobInfo{}, fmt.Errorf("%w: read of %d bytes, above the per-request limit of %d",
			errs.ErrTooLarge, length, limits.PayloadBytesMax)
	}
	cs := ks.Store.ChunkBytes()
	local := !n.CatchingUp()
	for c := off / cs; local && (c*cs < off+length || c == off/cs); c++ {
		local = pl.ServesChunk(key, c)
	}
	if local && !use {
		return ks.Store.ReadAt(key, off, length, version)
	}
	info, release, err := ks.Store.Pin(key, version, use)
	if err != nil {
		return nil, mvcc.BlobInfo{}, err
	}
	defer release()
	if local {
		return ks.Store.ReadAt(key, off, length, info.Version)
	}
	if off >= info.Size || length == 0 {
		return []byte{}, info, nil
	}
	end := min(info.Size, off+length)
	buf := make([]byte, end-off)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for c := off / cs; c*cs < end; c++ {
		lo, hi := max(off, c*cs), min(end, (c+1)*cs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, err := n.readChunk(ctx, ks, pl, key, c, lo, hi-lo, info)
			if err == nil && uint64(len(data)) != hi-lo {
				err = fmt.Errorf("%w: chunk %d of blob %q: %d bytes read, want %d", errs.ErrUnavailable, c, key, len(data), hi-lo)
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				return
			}
			copy(buf[lo-off:], data)
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, mvcc.BlobInfo{}, first
	}
	return buf, info, nil
}

// readChunk reads [off, off+length) of chunk c of key at info's version.
// A holder commits before every version manager, so its version of the
// chunk is at least this one's: the read asks for that (expect), and a
// holder that missed a commit refuses rather than serve older bytes.
func (n *Node) readChunk(ctx context.Context, ks *storage.Keyspace, pl Placement, key string, c, off, length uint64, info mvcc.BlobInfo) ([]byte, error) {
	if pl.ServesChunk(key, c) && !n.CatchingUp() {
		return ks.Store.ReadChunks(key, off, length, info.Version, info.Size, 0)
	}
	expect, err := ks.Store.ChunkVersion(key, c)
	if err != nil {
		return nil, err
	}
	target, err := pl.Target(key, c)
	if err != nil {
		return nil, err
	}
	pc, err := n.peerClient(target)
	if err != nil {
		return nil, err
	}
	resp, err := pc.ReadChunks(ctx, &peerpb.ReadChunksRequest{Keyspace: ks.Name, Key: key, Offset: off, Length: length,
		Version: info.Version, Size: info.Size, Expect: expect})
	if err != nil {
		return nil, fmt.Errorf("%w: chunk %d of blob %q from %s: %w", errs.ErrUnavailable, c, key, target, err)
	}
	return resp.GetData(), nil
}

// ReadChunks implements peerpb.PeerServer: a version manager's read of
// chunks this node holds (see ReadThrough).
func (n *Node) ReadChunks(_ context.Context, req *peerpb.ReadChunksRequest) (*peerpb.ReadChunksResponse, error) {
	if n.CatchingUp() && req.GetExpect() == 0 {
		return nil, statusOf(n.ErrCatchingUp()) // a catch-up read checks the chunk's version instead
	}
	ks, err := n.cfg.Engine.Acquire(req.GetKeyspace())
	if err != nil {
		return nil, statusOf(err)
	}
	defer ks.Release()
	cs := ks.Store.ChunkBytes()
	off, length := req.GetOffset(), req.GetLength()
	if length == 0 || off+length < off || off/cs != (off+length-1)/cs {
		return nil, statusOf(fmt.Errorf("%w: read of %d bytes at %d is not within one chunk", errs.ErrInvalidArgument, length, off))
	}
	pl, err := n.Placement(ks.Name, int(ks.Config.Replication))
	if err != nil {
		return nil, statusOf(err)
	}
	if !pl.Holds(req.GetKey(), off/cs) {
		return nil, statusOf(fmt.Errorf("%w: node %s does not hold chunk %d of blob %q", errs.ErrUnavailable, n.self, off/cs, req.GetKey()))
	}
	if (n.CatchingUp() || pl.w != nil) && n.untrustedChunk(pl, req.GetKey(), off/cs) {
		// Its version is no proof of its bytes (a chunk gained and not
		// copied yet): the expect check below would pass on older pages.
		// While ranges move, a node only gaining the chunk is asked too,
		// by a read replica catching up on a commit only the new owners
		// kept (Placement.sourceReplicas). Outside a move, a node that is
		// not catching up has copied what it gained (in the move, or in
		// its catch-up after a restart), and the read path skips the
		// check.
		return nil, statusOf(fmt.Errorf("%w: node %s has not copied chunk %d of blob %q, which it gained in a ring change", errs.ErrUnavailable, n.self, off/cs, req.GetKey()))
	}
	data, err := ks.Store.ReadChunks(req.GetKey(), off, length, req.GetVersion(), req.GetSize(), req.GetExpect())
	var behind *mvcc.ChunkMismatchError
	if errors.As(err, &behind) && behind.Have < behind.Want {
		// A holder that is also a version manager ahead of the reader in
		// the chain commits after it: the commit may be staged here still.
		// Once it is done, the chunk is in step, or this copy missed it.
		ks.Store.Settle(req.GetKey())
		data, err = ks.Store.ReadChunks(req.GetKey(), off, length, req.GetVersion(), req.GetSize(), req.GetExpect())
	}
	if errors.As(err, &behind) && behind.Have < behind.Want {
		n.startCatchUp(fmt.Sprintf("keyspace %q: a read expected %v", ks.Name, err))
	}
	if err != nil {
		return nil, statusOf(err)
	}
	return &peerpb.ReadChunksResponse{Data: data}, nil
}
