package server

// TýrFS's metadata service (internal/fsmeta): FsFetch checks a file's
// ancestors' permissions from this node's store, its copies of popular
// directories' permissions, or reads of their headers, then reads the
// file; FsInvalidate drops copies on every member.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/fsmeta"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/storage"
)

// The sources of tyr_fs_permission_lookups_total.
const (
	fsPermLocal  = "local"
	fsPermCopy   = "copy"
	fsPermRemote = "remote"
)

func (m *Metrics) countPerm(source string) {
	if m != nil {
		m.fsPermBy[source].Inc()
	}
}

// errnoResponse answers a file-system refusal.
func errnoResponse(e syscall.Errno) *tyrpb.FsFetchResponse {
	return &tyrpb.FsFetchResponse{Errno: uint32(e)}
}

// FsFetch implements tyrpb.TyrServer.
func (s *Service) FsFetch(ctx context.Context, req *tyrpb.FsFetchRequest) (*tyrpb.FsFetchResponse, error) {
	p, err := fslayout.CleanPath(string(req.GetPath()))
	if err != nil {
		var e syscall.Errno
		errors.As(err, &e)
		return errnoResponse(e), nil
	}
	if len(req.GetGids()) > limits.FSGroupsMax {
		return nil, toStatus(fmt.Errorf("%w: fetch for %d groups, above %d", errs.ErrInvalidArgument, len(req.GetGids()), limits.FSGroupsMax))
	}
	if req.GetLength() > limits.PayloadBytesMax {
		return nil, toStatus(fmt.Errorf("%w: fetch of %d bytes, above %d", errs.ErrInvalidArgument, req.GetLength(), limits.PayloadBytesMax))
	}
	if p == "/" {
		return errnoResponse(syscall.EISDIR), nil
	}
	ks, err := s.engine.Acquire(string(req.GetKeyspace()))
	if err != nil {
		return nil, toStatus(err)
	}
	defer ks.Release()
	key := fslayout.FileKey(p)
	// Counted as forwarded here, or as local by the read below.
	if target, err := s.route(ctx, ks, key); err != nil {
		return nil, toStatus(err)
	} else if target != nil {
		s.metrics.countRead(readForwarded)
		return target.FsFetch(markForwarded(ctx), req)
	}
	cred := fsmeta.Cred{UID: req.GetUid(), GIDs: req.GetGids()}
	for _, dir := range fslayout.Ancestors(p) {
		perm, errno, err := s.dirPerm(ctx, ks, dir)
		if err != nil {
			return nil, toStatus(err)
		}
		if errno == 0 && !fsmeta.Allowed(perm, cred, fsmeta.MayExec) {
			errno = syscall.EACCES
		}
		if errno != 0 {
			return errnoResponse(errno), nil
		}
	}
	n := max(req.GetLength(), fslayout.HeaderBytes)
	resp, err := s.Read(ctx, &tyrpb.ReadRequest{Keyspace: req.GetKeyspace(), Key: []byte(key), Length: n})
	// A staple's data blob is no file (fslayout, invariant 5).
	dataBlob := err == nil && len(resp.GetData()) >= fslayout.HeaderBytes && fslayout.Flags(resp.GetData())&fslayout.FlagMovedOut != 0
	if isNotFound(err) || dataBlob {
		// A directory, or nothing.
		if _, errno, err := s.dirPerm(ctx, ks, fslayout.DirKey(p)); err != nil || errno != 0 {
			if errno == syscall.ENOTDIR {
				// dirPerm found a file at p after all: the data blob,
				// or a file renamed there since the read.
				errno = syscall.ENOENT
			}
			return errnoResponse(errno), err
		}
		return errnoResponse(syscall.EISDIR), nil
	}
	if err != nil {
		return nil, err
	}
	a, err := fslayout.DecodeHeader(key, resp.GetData(), resp.GetSize())
	if err != nil {
		s.log.Warn("fs fetch", "keyspace", ks.Name, "path", p, "err", err)
		return errnoResponse(syscall.EIO), nil
	}
	// A symbolic link is read whatever its mode, as readlink(2) does.
	if a.Kind != fslayout.KindSymlink && !fsmeta.Allowed(fsmeta.PermOf(a), cred, fsmeta.MayRead) {
		return errnoResponse(syscall.EACCES), nil
	}
	if fslayout.Flags(resp.GetData()) == fslayout.FlagStapled {
		// A staple still read through its pointer: its homing may have
		// been forgotten (a node stopped), so this node queues one.
		s.dirs.queueHome(ks.Name, p)
	}
	return &tyrpb.FsFetchResponse{Data: resp.GetData(), Size: resp.GetSize(), Version: resp.GetVersion()}, nil
}

// dirPerm returns the permissions of the directory dir (a key ending in
// "/"): from this node's copy, else from its store if it is one of the
// directory's version managers, else by a read of the header; it keeps
// what it read as the copy if the directory is popular here. A missing
// directory is ENOENT, or ENOTDIR where a file has its path.
func (s *Service) dirPerm(ctx context.Context, ks *storage.Keyspace, dir string) (fsmeta.Perm, syscall.Errno, error) {
	perm, ticket, ok := s.fsmeta.Lookup(ks.Name, dir, time.Now())
	if ok {
		s.metrics.countPerm(fsPermCopy)
		return perm, 0, nil
	}
	local := s.node == nil
	if !local {
		pl, err := s.node.Placement(ks.Name, int(ks.Config.Replication))
		if err != nil {
			return fsmeta.Perm{}, 0, err
		}
		local = pl.ServesBlob(dir) && !s.node.CatchingUp()
	}
	var errno syscall.Errno
	var err error
	if local {
		s.metrics.countPerm(fsPermLocal)
		b, info, rerr := ks.Store.Read(dir, 0, fslayout.HeaderBytes)
		perm, errno, err = s.decodePerm(ctx, ks, dir, b, info.Size, rerr)
	} else {
		s.metrics.countPerm(fsPermRemote)
		resp, rerr := s.Read(fresh(ctx), &tyrpb.ReadRequest{Keyspace: []byte(ks.Name), Key: []byte(dir), Length: fslayout.HeaderBytes})
		perm, errno, err = s.decodePerm(ctx, ks, dir, resp.GetData(), resp.GetSize(), rerr)
	}
	if err == nil && errno == 0 {
		s.fsmeta.Install(ks.Name, dir, perm, ticket)
	}
	return perm, errno, err
}

// decodePerm returns the permissions in the header b of directory dir, a
// blob of size bytes, as read with error err.
func (s *Service) decodePerm(ctx context.Context, ks *storage.Keyspace, dir string, b []byte, size uint64, err error) (fsmeta.Perm, syscall.Errno, error) {
	if isNotFound(err) {
		file := dir[:len(dir)-1]
		if _, ferr := s.Read(fresh(ctx), &tyrpb.ReadRequest{Keyspace: []byte(ks.Name), Key: []byte(file)}); ferr == nil {
			return fsmeta.Perm{}, syscall.ENOTDIR, nil
		}
		return fsmeta.Perm{}, syscall.ENOENT, nil
	}
	if err != nil {
		return fsmeta.Perm{}, 0, err
	}
	a, err := fslayout.DecodeHeader(dir, b, size)
	if err != nil {
		s.log.Warn("fs fetch", "keyspace", ks.Name, "dir", dir, "err", err)
		return fsmeta.Perm{}, syscall.EIO, nil
	}
	return fsmeta.PermOf(a), 0, nil
}

// isNotFound reports whether err, from the store or as a status, is of
// class ErrNotFound.
func isNotFound(err error) bool {
	return errors.Is(err, errs.ErrNotFound) || status.Code(err) == codes.NotFound
}

// fresh returns ctx without the metadata of the request it serves, so
// that a read this node makes for itself is routed as a client's would
// be, not served locally as a forwarded one.
func fresh(ctx context.Context) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.MD{})
}

// FsInvalidate implements tyrpb.TyrServer.
func (s *Service) FsInvalidate(ctx context.Context, req *tyrpb.FsInvalidateRequest) (*tyrpb.FsInvalidateResponse, error) {
	name, prefix := string(req.GetKeyspace()), string(req.GetPrefix())
	if err := keyspace.ValidateName(name); err != nil {
		return nil, toStatus(err)
	}
	if len(prefix) == 0 || prefix[0] != '/' || prefix[len(prefix)-1] != '/' {
		return nil, toStatus(fmt.Errorf("%w: invalidation prefix %q is not a directory's key", errs.ErrInvalidArgument, prefix))
	}
	start := time.Now()
	if n := s.fsmeta.Invalidate(name, prefix); n > 0 && s.metrics != nil {
		s.metrics.fsInvalidated.Add(float64(n))
	}
	if req.GetLocal() || s.cluster == nil || s.node == nil {
		return &tyrpb.FsInvalidateResponse{}, nil
	}
	fwd := &tyrpb.FsInvalidateRequest{Keyspace: req.GetKeyspace(), Prefix: req.GetPrefix(), Local: true}
	var wg sync.WaitGroup
	var mu sync.Mutex
	missed := 0
	for _, m := range s.cluster.View().Members() {
		if m.Meta.ID == s.cluster.Self() || m.State == membership.StateLeft {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.invalidateMember(ctx, m, fwd)
			if err != nil {
				mu.Lock()
				missed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if missed > 0 {
		// Invariant 3 of internal/fsmeta: a member not reached stops
		// using its copies within the lease of their fetch, which began
		// before this invalidation did.
		s.log.Info("fs invalidation: waiting out members not reached", "keyspace", name, "prefix", prefix, "missed", missed)
		t := time.NewTimer(time.Until(start.Add(fsmeta.Lease)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, toStatus(ctx.Err())
		}
	}
	return &tyrpb.FsInvalidateResponse{}, nil
}

// invalidateMember sends req to member m, giving it at most
// fsInvalidateTimeout.
func (s *Service) invalidateMember(ctx context.Context, m membership.Member, req *tyrpb.FsInvalidateRequest) error {
	if m.State != membership.StateAlive && m.State != membership.StateSuspect {
		return errors.New("not alive")
	}
	conn, err := s.node.Conn(m.Meta.ID)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, fsInvalidateTimeout)
	defer cancel()
	_, err = tyrpb.NewTyrClient(conn).FsInvalidate(ctx, req)
	return err
}

// fsInvalidateTimeout bounds the wait for one member's answer to an
// invalidation; a member that does not answer in time is waited out.
const fsInvalidateTimeout = time.Second
