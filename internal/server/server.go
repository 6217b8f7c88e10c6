// Package server is the network edge of a tyr node: it serves the gRPC API
// over the storage engine, turns every mutation into a transaction committed
// through the chain, and exports metrics.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/fsmeta"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/node"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/txn"
)

// Service implements tyrpb.TyrServer over an Engine.
type Service struct {
	tyrpb.UnimplementedTyrServer
	engine *storage.Engine
	log    *slog.Logger
	// cluster, when set, owns keyspace creation and drops (see Cluster).
	cluster *Cluster
	// node, when set, replicates commits and routes reads (replicate.go).
	node *node.Node
	// metrics, set by Register, counts where reads are served.
	metrics *Metrics
	// capacityBytes is the capacity NodeUsage reports; 0 measures the
	// file system (WithCapacity).
	capacityBytes uint64
	// ops is the rate of client operations answered (usage.go), counted
	// by the interceptor Register installs.
	ops *opsRate
	// routing caches the routing IDs of the current view (routing.go).
	routing atomic.Pointer[routingIDs]
	// dataRead serves the data path's requests (datapath.go); set by Register.
	dataRead grpc.UnaryHandler
	// fsmeta keeps TýrFS's copies of popular directories' permissions
	// (fsmeta.go).
	fsmeta *fsmeta.Resolver
	// dirs compacts TýrFS directory logs in the background (fscompact.go).
	dirs *dirCompactor
}

// NewService returns a Service over engine.
func NewService(engine *storage.Engine, log *slog.Logger) *Service {
	now := time.Now()
	s := &Service{engine: engine, log: log, ops: newOpsRate(now), fsmeta: fsmeta.NewResolver(now)}
	s.dirs = newDirCompactor(s)
	return s
}

// Register creates a gRPC server with tyr's limits and interceptors and
// registers s on it.
func (s *Service) Register(m *Metrics) *grpc.Server {
	s.metrics = m
	g := grpc.NewServer(
		// Long-lived workers keep their grown stacks; a fresh goroutine per
		// request would grow its stack again inside Pebble on every call.
		grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))),
		grpc.MaxRecvMsgSize(limits.MessageBytesMax),
		grpc.MaxSendMsgSize(limits.MessageBytesMax),
		grpc.ChainUnaryInterceptor(m.interceptor(s.log), s.countOps(), s.routingHeaders()),
	)
	tyrpb.RegisterTyrServer(g, s)
	m.Registry.MustRegister(s.dirs)
	s.dataRead = s.dataHandler(m.interceptor(s.log), s.countOps())
	healthpb.RegisterHealthServer(g, healthServer{ready: s.Ready})
	if s.node != nil {
		peerpb.RegisterPeerServer(g, s.node)
	}
	return g
}

// toStatus maps an error to a gRPC status with its class's code; the
// message is the error text with the class word first and nowhere else
// (errs.Text). A status error without a class passes through unchanged.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	code, classified := errs.Code(err)
	if _, ok := status.FromError(err); ok && !classified {
		return err
	}
	return status.Error(code, errs.Text(err))
}

// refusedTrailer marks a failed commit the server refused for certain
// (errs.IsRefused): the client need not resolve its outcome, whatever
// its class.
func refusedTrailer(ctx context.Context, err error) {
	if errs.IsRefused(err) {
		// SetTrailer fails only outside a handler's context.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(errs.RefusedTrailer, "1"))
	}
}

func keyspaceInfo(ks *storage.Keyspace, diskBytes uint64) *tyrpb.KeyspaceInfo {
	return &tyrpb.KeyspaceInfo{
		Name: ks.Name,
		Config: &tyrpb.KeyspaceConfig{ChunkSize: ks.Config.ChunkBytes, Replication: ks.Config.Replication,
			Mvcc: ks.Config.MVCC, Sync: ks.Config.Sync},
		CreatedUnixNano: ks.Created.UnixNano(),
		DiskBytes:       diskBytes,
	}
}

// CreateKeyspace implements tyrpb.TyrServer.
func (s *Service) CreateKeyspace(_ context.Context, req *tyrpb.CreateKeyspaceRequest) (*tyrpb.KeyspaceInfo, error) {
	cfg := keyspace.Config{}
	if c := req.GetConfig(); c != nil {
		cfg = keyspace.Config{ChunkBytes: c.ChunkSize, Replication: c.Replication, MVCC: c.Mvcc, Sync: c.Sync}
	} else if s.cluster != nil {
		cfg.Sync = s.cluster.DefaultSync
	}
	ks, err := s.createKeyspace(string(req.GetName()), cfg)
	if err != nil {
		return nil, toStatus(err)
	}
	s.log.Info("keyspace created", "keyspace", ks.Name, "chunk_bytes", ks.Config.ChunkBytes,
		"replication", ks.Config.Replication, "mvcc", ks.Config.MVCC, "sync", ks.Config.Sync)
	return keyspaceInfo(ks, 0), nil
}

// DropKeyspace implements tyrpb.TyrServer.
func (s *Service) DropKeyspace(_ context.Context, req *tyrpb.DropKeyspaceRequest) (*tyrpb.DropKeyspaceResponse, error) {
	if err := s.dropKeyspace(string(req.GetName())); err != nil {
		return nil, toStatus(err)
	}
	s.log.Info("keyspace dropped", "keyspace", string(req.GetName()))
	return &tyrpb.DropKeyspaceResponse{}, nil
}

// ListKeyspaces implements tyrpb.TyrServer.
func (s *Service) ListKeyspaces(context.Context, *tyrpb.ListKeyspacesRequest) (*tyrpb.ListKeyspacesResponse, error) {
	resp := &tyrpb.ListKeyspacesResponse{}
	for _, ks := range s.engine.List() {
		resp.Keyspaces = append(resp.Keyspaces, keyspaceInfo(ks, 0))
	}
	return resp, nil
}

// GetKeyspace implements tyrpb.TyrServer.
func (s *Service) GetKeyspace(_ context.Context, req *tyrpb.GetKeyspaceRequest) (*tyrpb.KeyspaceInfo, error) {
	ks, err := s.engine.Acquire(string(req.GetName()))
	if err != nil {
		return nil, toStatus(err)
	}
	defer ks.Release()
	u, err := s.keyspaceUsage(ks)
	if err != nil {
		return nil, toStatus(err)
	}
	info := keyspaceInfo(ks, ks.DiskBytes())
	info.LogicalBytes, info.ReclaimBytes, info.Blobs = u.LogicalBytes, u.ReclaimBytes, u.Blobs
	return info, nil
}

// keyspaceUsage returns what this node's copy of ks holds: on a cluster
// node, the chunks its placement gives it.
func (s *Service) keyspaceUsage(ks *storage.Keyspace) (mvcc.Usage, error) {
	if s.node == nil {
		return ks.Store.Usage(nil)
	}
	pl, err := s.node.Placement(ks.Name, int(ks.Config.Replication))
	if err != nil {
		return mvcc.Usage{}, err
	}
	return ks.Store.Usage(pl)
}

// DecodeOps turns wire ops into transaction ops, rejecting malformed ones.
func DecodeOps(in []*tyrpb.Op) ([]txn.Op, error) {
	ops, err := decodeOps(in, 0)
	if err != nil {
		return nil, err
	}
	if err := txn.Validate(ops); err != nil {
		return nil, err
	}
	return ops, nil
}

// DecodeCommit turns a wire commit into transaction ops: its ops, then one
// txn.OpReadCheck per read check. A commit of only read checks is valid.
func DecodeCommit(req *tyrpb.CommitRequest) ([]txn.Op, error) {
	if n := len(req.GetReads()); n > limits.ReadChecksMax {
		return nil, fmt.Errorf("%w: commit of %d read checks, above the limit of %d",
			errs.ErrTooLarge, n, limits.ReadChecksMax)
	}
	ops, err := decodeOps(req.GetOps(), len(req.GetReads()))
	if err != nil {
		return nil, err
	}
	for _, r := range req.GetReads() {
		ops = append(ops, txn.Op{Key: string(r.GetKey()), Kind: txn.OpReadCheck, Version: r.GetVersion()})
	}
	if err := txn.Validate(ops); err != nil {
		return nil, err
	}
	return ops, nil
}

func decodeOps(in []*tyrpb.Op, extra int) ([]txn.Op, error) {
	if len(in) > limits.OpsPerCommitMax {
		return nil, fmt.Errorf("%w: commit of %d ops, above the limit of %d",
			errs.ErrTooLarge, len(in), limits.OpsPerCommitMax)
	}
	ops := make([]txn.Op, 0, len(in)+extra)
	for i, o := range in {
		op := txn.Op{Key: string(o.GetKey())}
		switch k := o.GetKind().(type) {
		case *tyrpb.Op_Create:
			op.Kind = txn.OpCreate
		case *tyrpb.Op_Write:
			op.Kind, op.Offset, op.Data, op.Create = txn.OpWrite, k.Write.GetOffset(), k.Write.GetData(), k.Write.GetCreate()
		case *tyrpb.Op_Append:
			op.Kind, op.Data, op.Create = txn.OpAppend, k.Append.GetData(), k.Append.GetCreate()
		case *tyrpb.Op_Truncate:
			op.Kind, op.Size = txn.OpTruncate, k.Truncate.GetSize()
		case *tyrpb.Op_Delete:
			op.Kind = txn.OpDelete
		case *tyrpb.Op_Atomic:
			a := k.Atomic
			if a.GetWidth() > 8 || a.GetFunc() < 0 || a.GetFunc() > 255 {
				return nil, fmt.Errorf("%w: op %d: atomic width %d, function %d",
					errs.ErrInvalidArgument, i, a.GetWidth(), a.GetFunc())
			}
			op.Kind, op.Offset, op.Width, op.Func, op.Operand = txn.OpAtomic, a.GetOffset(), int(a.GetWidth()),
				txn.AtomicFunc(a.GetFunc()), a.GetOperand()
			if op.Width == 0 || op.Func == 0 {
				// Zero would read as "no atomic fields" to txn.Validate.
				return nil, fmt.Errorf("%w: op %d: atomic width %d, function %d",
					errs.ErrInvalidArgument, i, a.GetWidth(), a.GetFunc())
			}
		case *tyrpb.Op_Cas:
			op.Kind, op.Offset, op.Expected, op.Data = txn.OpCompareAndSwap, k.Cas.GetOffset(), k.Cas.GetExpected(), k.Cas.GetData()
		default:
			return nil, fmt.Errorf("%w: op %d has no kind", errs.ErrInvalidArgument, i)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// Commit implements tyrpb.TyrServer.
func (s *Service) Commit(ctx context.Context, req *tyrpb.CommitRequest) (*tyrpb.CommitResponse, error) {
	ops, err := DecodeCommit(req)
	if err != nil {
		return nil, toStatus(err)
	}
	if len(req.GetTxnId()) > 0 {
		if err := node.CheckClientID(req.GetTxnId(), time.Now()); err != nil {
			return nil, toStatus(err)
		}
	}
	ks, err := s.engine.Acquire(string(req.GetKeyspace()))
	if err != nil {
		return nil, toStatus(err)
	}
	defer ks.Release()
	results, err := s.commit(ctx, ks, ops, req.GetTxnId())
	if err != nil {
		refusedTrailer(ctx, err)
		return nil, toStatus(err)
	}
	// The read checks come after the ops and answer nothing.
	results = results[:len(req.GetOps())]
	s.dirs.noticeCommit(ks.Name, ops, results)
	resp := &tyrpb.CommitResponse{Results: make([]*tyrpb.OpResult, len(results))}
	for i, r := range results {
		resp.Results[i] = &tyrpb.OpResult{Offset: r.Offset, Size: r.Size, Version: r.Version, Value: r.Value}
	}
	return resp, nil
}

// Read implements tyrpb.TyrServer.
func (s *Service) Read(ctx context.Context, req *tyrpb.ReadRequest) (*tyrpb.ReadResponse, error) {
	if err := keyspace.ValidateKey(string(req.GetKey())); err != nil {
		return nil, toStatus(err)
	}
	ks, err := s.engine.Acquire(string(req.GetKeyspace()))
	if err != nil {
		return nil, toStatus(err)
	}
	defer ks.Release()
	if s.node != nil {
		return s.clusterRead(ctx, ks, req)
	}
	var (
		data []byte
		info mvcc.BlobInfo
	)
	if req.GetVersion() == 0 {
		data, info, err = storeRead(ctx, ks, string(req.GetKey()), req.GetOffset(), req.GetLength())
	} else {
		data, info, err = ks.Store.ReadAt(string(req.GetKey()), req.GetOffset(), req.GetLength(), req.GetVersion())
	}
	if err != nil {
		return nil, toStatus(err)
	}
	s.metrics.countRead(readLocal)
	if req.GetUse() && req.GetVersion() == 0 {
		// Counted after the read: a commit that supersedes the version
		// meanwhile makes it garbage only after the linger time.
		ks.Store.Use(string(req.GetKey()), info.Version)
	}
	return &tyrpb.ReadResponse{Data: data, Size: info.Size, Version: info.Version}, nil
}

func blobInfo(b mvcc.BlobInfo) *tyrpb.BlobInfo {
	return &tyrpb.BlobInfo{Key: b.Key, Size: b.Size, Version: b.Version,
		CreatedUnixNano: b.Created.UnixNano(), ModifiedUnixNano: b.Modified.UnixNano()}
}

// Stat implements tyrpb.TyrServer.
func (s *Service) Stat(ctx context.Context, req *tyrpb.StatRequest) (*tyrpb.BlobInfo, error) {
	if err := keyspace.ValidateKey(string(req.GetKey())); err != nil {
		return nil, toStatus(err)
	}
	ks, err := s.engine.Acquire(string(req.GetKeyspace()))
	if err != nil {
		return nil, toStatus(err)
	}
	defer ks.Release()
	if target, err := s.readTarget(ctx, ks, string(req.GetKey())); err != nil {
		return nil, toStatus(err)
	} else if target != nil {
		return target.Stat(markForwarded(ctx), req)
	}
	info, err := ks.Store.Stat(string(req.GetKey()))
	if err != nil {
		return nil, toStatus(err)
	}
	return blobInfo(info), nil
}

// attachData gives each listed blob of at most dataMax bytes, within its
// first chunk, its bytes, read from the local store as a direct read
// would, until the response holds limits.ListDataBytesMax of them. The listing
// holds only blobs this node serves, whose first chunk it holds. A blob
// that changed since it was listed is described as read; one deleted
// meanwhile keeps its listing, without bytes.
func attachData(ks *storage.Keyspace, blobs []*tyrpb.BlobInfo, dataMax uint32) error {
	limit := min(uint64(dataMax), ks.Store.ChunkBytes())
	room := uint64(limits.ListDataBytesMax)
	for _, b := range blobs {
		if b.GetSize() == 0 || b.GetSize() > limit || b.GetSize() > room {
			continue
		}
		data, info, err := ks.Store.Read(b.GetKey(), 0, b.GetSize())
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if info.Size > limit || info.Size > room || uint64(len(data)) != info.Size {
			continue // grew meanwhile
		}
		b.Size, b.Version, b.ModifiedUnixNano, b.Data = info.Size, info.Version, info.Modified.UnixNano(), data
		room -= info.Size
	}
	return nil
}

// trimData drops the bytes of merged listings past limits.ListDataBytesMax.
func trimData(blobs []*tyrpb.BlobInfo) {
	room := limits.ListDataBytesMax
	for _, b := range blobs {
		if len(b.GetData()) > room {
			b.Data = nil
		}
		room -= len(b.GetData())
	}
}

// List implements tyrpb.TyrServer.
func (s *Service) List(ctx context.Context, req *tyrpb.ListRequest) (*tyrpb.ListResponse, error) {
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = limits.ListLimitDefault
	}
	if limit > limits.ListLimitMax {
		return nil, toStatus(fmt.Errorf("%w: list limit %d above the maximum of %d",
			errs.ErrInvalidArgument, limit, limits.ListLimitMax))
	}
	prefix, startAfter := string(req.GetPrefix()), string(req.GetStartAfter())
	if len(prefix) > limits.KeyBytesMax || len(startAfter) > limits.KeyBytesMax {
		return nil, toStatus(fmt.Errorf("%w: prefix or start_after longer than %d bytes",
			errs.ErrInvalidArgument, limits.KeyBytesMax))
	}
	if !utf8.ValidString(prefix) || !utf8.ValidString(startAfter) {
		return nil, toStatus(fmt.Errorf("%w: prefix or start_after is not valid UTF-8", errs.ErrInvalidArgument))
	}
	ks, err := s.engine.Acquire(string(req.GetKeyspace()))
	if err != nil {
		return nil, toStatus(err)
	}
	defer ks.Release()
	blobs, more, err := s.listOwn(ks, prefix, startAfter, limit)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &tyrpb.ListResponse{Blobs: make([]*tyrpb.BlobInfo, len(blobs))}
	for i, b := range blobs {
		resp.Blobs[i] = blobInfo(b)
	}
	if err := attachData(ks, resp.Blobs, req.GetDataMax()); err != nil {
		return nil, toStatus(err)
	}
	if others := s.listMembers(ctx, ks); others != nil {
		lists := [][]*tyrpb.BlobInfo{resp.Blobs}
		if s.node.CatchingUp() {
			// This node's copies may be behind: only the others' count.
			lists, more = nil, false
			if len(others) == 0 {
				return nil, toStatus(s.node.ErrCatchingUp())
			}
		}
		for _, id := range others {
			conn, err := s.node.Conn(id)
			if err != nil {
				return nil, toStatus(err)
			}
			r, err := tyrpb.NewTyrClient(conn).List(markForwarded(ctx), req)
			if err != nil {
				return nil, err
			}
			lists = append(lists, r.GetBlobs())
			more = more || r.GetNextStartAfter() != ""
		}
		var cut bool
		resp.Blobs, cut = mergeListings(lists, limit)
		more = more || cut
		trimData(resp.Blobs)
	}
	if more && len(resp.Blobs) > 0 {
		resp.NextStartAfter = resp.Blobs[len(resp.Blobs)-1].GetKey()
	}
	return resp, nil
}
