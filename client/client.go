// Package client is the Go client of tyr.
//
// A Client is safe for concurrent use; create one per process and Close it
// at the end. It sends commits and administration over one gRPC connection
// (HTTP/2, multiplexed) per server, and reads over the data path (data.go):
// plain TCP connections it keeps open, one read at a time on each.
// Every call takes a context for cancellation and deadlines.
//
// Errors carry a class usable with errors.Is: ErrNotFound, ErrExists,
// ErrInvalidArgument, ErrOutOfRange, ErrTooLarge, ErrUnavailable,
// ErrConflict, ErrCorruption, ErrNoSpace. An error has one class, and its text names it
// first ("tyr: conflict: ..."). Retryable tells whether sending the request
// again can succeed; Refused whether a failed commit certainly changed
// nothing.
//
// One request carries at most PayloadBytesMax bytes. Read and Write split
// larger ranges into parts; each part is atomic, the whole is not. Append is
// always atomic and refuses more than PayloadBytesMax bytes.
package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/dialopt"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
)

// Error classes; see the package comment.
var (
	ErrNotFound        = errs.ErrNotFound
	ErrExists          = errs.ErrExists
	ErrInvalidArgument = errs.ErrInvalidArgument
	ErrOutOfRange      = errs.ErrOutOfRange
	ErrTooLarge        = errs.ErrTooLarge
	ErrUnavailable     = errs.ErrUnavailable
	ErrConflict        = errs.ErrConflict
	ErrCorruption      = errs.ErrCorruption
	ErrNoSpace         = errs.ErrNoSpace
)

// Limits the server enforces; see the README for the full list.
const (
	PayloadBytesMax = limits.PayloadBytesMax
	KeyBytesMax     = limits.KeyBytesMax
	BlobBytesMax    = limits.BlobBytesMax
	ListLimitMax    = limits.ListLimitMax
	// ListDataBytesMax is the most blob bytes one ListData call returns.
	ListDataBytesMax = limits.ListDataBytesMax
	CASBytesMax      = limits.CASBytesMax
	// OpsPerTxMax and ReadChecksMax bound a transaction's buffered ops and
	// the blobs it reads.
	OpsPerTxMax   = limits.OpsPerCommitMax
	ReadChecksMax = limits.ReadChecksMax
)

// DefaultEndpoint is where a local server listens by default.
const DefaultEndpoint = "127.0.0.1:7420"

// Error is an error returned by the server. Unwrap gives its class.
type Error struct {
	Class   error // one of the Err* classes, or nil when unknown
	Code    codes.Code
	Message string
	// refused: the server marked the failed commit as refused for certain
	// (it changed nothing), whatever its class.
	refused bool
	// unknown: the commit's answer was lost and its outcome could not be
	// learnt (ErrOutcomeUnknown).
	unknown bool
}

// Error returns "tyr: " and the message, with the class word first.
func (e *Error) Error() string { return "tyr: " + errs.Message(e.Class, e.Message) }
func (e *Error) Unwrap() error { return e.Class }

// Is reports whether e is a commit of unknown outcome, for
// errors.Is(err, ErrOutcomeUnknown); errors.Is finds the class by Unwrap.
func (e *Error) Is(target error) bool { return e.unknown && target == ErrOutcomeUnknown }

// Refused reports whether e is a commit the server refused for certain:
// it changed nothing, and never will. Every error of class ErrConflict,
// ErrInvalidArgument, ErrNotFound, ErrExists, ErrOutOfRange or ErrTooLarge
// is one; an ErrUnavailable one is when the server says so (a member was
// catching up, no replica was live), and never when the outcome is
// unknown.
func (e *Error) Refused() bool {
	if e.unknown {
		return false
	}
	return e.refused || errs.IsRefused(e.Class)
}

// Retryable reports whether sending the same request again can succeed:
// after ErrConflict (run the transaction again; RunTx does) or
// ErrUnavailable (later), but not after ErrOutcomeUnknown, where the
// commit may have taken effect, nor after the other classes.
func Retryable(err error) bool { return errs.Retryable(err) }

// Refused reports whether err is the error of a commit that certainly
// changed nothing (see Error.Refused): one the server refused, or one that
// failed before it was sent.
func Refused(err error) bool { return errs.IsRefused(err) }

// fromStatus turns a gRPC error into an *Error; context errors stay as they
// are so errors.Is(err, context.DeadlineExceeded) works.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Canceled:
		return fmt.Errorf("tyr: %s: %w", st.Message(), context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("tyr: %s: %w", st.Message(), context.DeadlineExceeded)
	}
	return &Error{Class: errs.Class(st.Code()), Code: st.Code(), Message: st.Message()}
}

// Client talks to a tyr server.
type Client struct {
	conn *grpc.ClientConn
	api  tyrpb.TyrClient
	// router sends reads to the nodes that serve them; nil WithoutRouting.
	router *router
	// data carries reads (data.go); nil WithoutDataPath.
	data         *dataPath
	endpointAddr string
	// fo sends endpoint calls (api) on to other nodes; nil without
	// WithEndpoints or WithFailover.
	fo *failover
}

// Dial returns a Client for the server at endpoint (host:port). It does not
// wait for the connection; the first call does. Unless WithoutRouting is
// given, reads and stats of a cluster's blobs go straight to the node that
// serves them (see routing.go); everything else goes to endpoint, or, with
// WithEndpoints or WithFailover, to another node when endpoint cannot be
// reached (see WithFailover).
func Dial(endpoint string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var r *router
	dial := func(addr string) (*grpc.ClientConn, error) {
		dialOpts := dialopt.Options()
		if r != nil {
			dialOpts = append(dialOpts, grpc.WithUnaryInterceptor(r.intercept))
		}
		if o.dialer != nil {
			dialOpts = append(dialOpts, grpc.WithContextDialer(o.dialer))
		}
		if o.failover {
			dialOpts = append(dialOpts, grpc.WithStatsHandler(callStats{}))
		}
		conn, err := grpc.NewClient(addr, dialOpts...)
		if err != nil {
			return nil, fmt.Errorf("tyr: dial %s: %w", addr, err)
		}
		return conn, nil
	}
	if !o.noRouting {
		r = newRouter(dial)
	}
	conn, err := dial(endpoint)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, api: tyrpb.NewTyrClient(conn), router: r, endpointAddr: endpoint}
	if !o.noDataPath {
		c.data = newDataPath(o.dialer)
	}
	if o.failover {
		c.fo = newFailover(endpoint, conn, o, r, dial)
		c.api = tyrpb.NewTyrClient(c.fo)
	}
	if r != nil {
		r.endpoint = c.api
		if o.ringFailover {
			// Failing over to the ring's members needs them known
			// before the endpoint goes.
			r.refresh()
		}
	}
	return c, nil
}

// Ready returns nil if the server serves reads, as its gRPC health service
// (grpc.health.v1.Health) says: it has caught up on what it may have missed
// while down, holds its read lease and knows the cluster's ring. Otherwise
// it returns an ErrUnavailable error, or the error of the call.
func (c *Client) Ready(ctx context.Context) error {
	var cc grpc.ClientConnInterface = c.conn
	if c.fo != nil {
		cc = c.fo
	}
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fromStatus(err)
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return &Error{Class: ErrUnavailable, Code: codes.Unavailable, Message: "server not ready: health " + st.String()}
	}
	return nil
}

// Close closes the connections. Calls in flight fail.
func (c *Client) Close() error {
	err := c.conn.Close()
	if c.fo != nil {
		c.fo.close()
	}
	if c.router != nil {
		c.router.close()
	}
	if c.data != nil {
		c.data.close()
	}
	return err
}

// KeyspaceConfig is a keyspace's configuration, fixed at creation. Zero
// ChunkSize and Replication mean the server's defaults (64 MiB, 1).
type KeyspaceConfig struct {
	ChunkSize   uint64
	Replication uint32
	MVCC        bool
	Sync        bool
}

// DefaultKeyspaceConfig is 64 MiB chunks, one replica, MVCC on, sync on.
func DefaultKeyspaceConfig() KeyspaceConfig {
	return KeyspaceConfig{ChunkSize: limits.ChunkBytesDefault, Replication: 1, MVCC: true, Sync: true}
}

// KeyspaceInfo describes a keyspace.
type KeyspaceInfo struct {
	Name    string
	Config  KeyspaceConfig
	Created time.Time
	// DiskBytes is the space used on the answering node; only Keyspace
	// fills it, as it does the fields below.
	DiskBytes uint64
	// LogicalBytes is the bytes of the chunks the answering node holds
	// that a commit wrote (newest versions): what its share of the data
	// is, beside DiskBytes, what it takes.
	LogicalBytes uint64
	// ReclaimBytes is the bytes the answering node removed (deletes,
	// truncates, chunks moved away, replaced copies) whose space is yet
	// to be reclaimed.
	ReclaimBytes uint64
	// Blobs is the number of blobs the answering node keeps a record of.
	Blobs uint64
}

func keyspaceInfo(k *tyrpb.KeyspaceInfo) KeyspaceInfo {
	c := k.GetConfig()
	return KeyspaceInfo{Name: k.GetName(), Created: time.Unix(0, k.GetCreatedUnixNano()), DiskBytes: k.GetDiskBytes(),
		LogicalBytes: k.GetLogicalBytes(), ReclaimBytes: k.GetReclaimBytes(), Blobs: k.GetBlobs(),
		Config: KeyspaceConfig{ChunkSize: c.GetChunkSize(), Replication: c.GetReplication(), MVCC: c.GetMvcc(), Sync: c.GetSync()}}
}

// CreateKeyspace creates a keyspace; ErrExists if it exists, and
// ErrInvalidArgument for a bad name or configuration.
func (c *Client) CreateKeyspace(ctx context.Context, name string, cfg KeyspaceConfig) (KeyspaceInfo, error) {
	k, err := c.api.CreateKeyspace(ctx, &tyrpb.CreateKeyspaceRequest{Name: []byte(name), Config: &tyrpb.KeyspaceConfig{
		ChunkSize: cfg.ChunkSize, Replication: cfg.Replication, Mvcc: cfg.MVCC, Sync: cfg.Sync}})
	if err != nil {
		return KeyspaceInfo{}, fromStatus(err)
	}
	return keyspaceInfo(k), nil
}

// DropKeyspace removes a keyspace and all its blobs.
func (c *Client) DropKeyspace(ctx context.Context, name string) error {
	_, err := c.api.DropKeyspace(ctx, &tyrpb.DropKeyspaceRequest{Name: []byte(name)})
	return fromStatus(err)
}

// ListKeyspaces returns all keyspaces, ordered by name.
func (c *Client) ListKeyspaces(ctx context.Context) ([]KeyspaceInfo, error) {
	resp, err := c.api.ListKeyspaces(ctx, &tyrpb.ListKeyspacesRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]KeyspaceInfo, len(resp.GetKeyspaces()))
	for i, k := range resp.GetKeyspaces() {
		out[i] = keyspaceInfo(k)
	}
	return out, nil
}

// Keyspace describes one keyspace, with its disk usage.
func (c *Client) Keyspace(ctx context.Context, name string) (KeyspaceInfo, error) {
	k, err := c.api.GetKeyspace(ctx, &tyrpb.GetKeyspaceRequest{Name: []byte(name)})
	if err != nil {
		return KeyspaceInfo{}, fromStatus(err)
	}
	return keyspaceInfo(k), nil
}

// BlobInfo describes a blob.
type BlobInfo struct {
	Key      string
	Size     uint64
	Version  uint64
	Created  time.Time
	Modified time.Time
}

func blobInfo(b *tyrpb.BlobInfo) BlobInfo {
	return BlobInfo{Key: b.GetKey(), Size: b.GetSize(), Version: b.GetVersion(),
		Created: time.Unix(0, b.GetCreatedUnixNano()), Modified: time.Unix(0, b.GetModifiedUnixNano())}
}
