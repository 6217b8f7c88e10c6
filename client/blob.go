package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/frame"
)

// Op is one operation of an atomic Commit. Build ops with CreateOp, WriteOp,
// AppendOp, TruncateOp and DeleteOp.
type Op struct{ pb *tyrpb.Op }

// CreateOp creates an empty blob; the commit fails with ErrExists if it
// exists.
func CreateOp(key string) Op {
	return Op{&tyrpb.Op{Key: []byte(key), Kind: &tyrpb.Op_Create{Create: &tyrpb.CreateOp{}}}}
}

// WriteOp writes data at offset. With create, a missing blob is created
// instead of failing with ErrNotFound.
func WriteOp(key string, offset uint64, data []byte, create bool) Op {
	return Op{&tyrpb.Op{Key: []byte(key), Kind: &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Offset: offset, Data: data, Create: create}}}}
}

// AppendOp writes data at the blob's end as of the commit.
func AppendOp(key string, data []byte, create bool) Op {
	return Op{&tyrpb.Op{Key: []byte(key), Kind: &tyrpb.Op_Append{Append: &tyrpb.AppendOp{Data: data, Create: create}}}}
}

// TruncateOp sets the blob's size: shrinking drops data, extending reads as
// zeros.
func TruncateOp(key string, size uint64) Op {
	return Op{&tyrpb.Op{Key: []byte(key), Kind: &tyrpb.Op_Truncate{Truncate: &tyrpb.TruncateOp{Size: size}}}}
}

// DeleteOp removes the blob.
func DeleteOp(key string) Op {
	return Op{&tyrpb.Op{Key: []byte(key), Kind: &tyrpb.Op_Delete{Delete: &tyrpb.DeleteOp{}}}}
}

// AtomicFunc is the function of an AtomicOp.
type AtomicFunc = tyrpb.AtomicFunc

// Atomic functions. Arithmetic wraps at the op's width; Sub computes
// current - operand; the signed min/max read both values as two's
// complement of the op's width.
const (
	FuncAdd         = tyrpb.AtomicFunc_ATOMIC_FUNC_ADD
	FuncSub         = tyrpb.AtomicFunc_ATOMIC_FUNC_SUB
	FuncMul         = tyrpb.AtomicFunc_ATOMIC_FUNC_MUL
	FuncAnd         = tyrpb.AtomicFunc_ATOMIC_FUNC_AND
	FuncOr          = tyrpb.AtomicFunc_ATOMIC_FUNC_OR
	FuncXor         = tyrpb.AtomicFunc_ATOMIC_FUNC_XOR
	FuncMinSigned   = tyrpb.AtomicFunc_ATOMIC_FUNC_MIN_SIGNED
	FuncMaxSigned   = tyrpb.AtomicFunc_ATOMIC_FUNC_MAX_SIGNED
	FuncMinUnsigned = tyrpb.AtomicFunc_ATOMIC_FUNC_MIN_UNSIGNED
	FuncMaxUnsigned = tyrpb.AtomicFunc_ATOMIC_FUNC_MAX_UNSIGNED
	FuncSet         = tyrpb.AtomicFunc_ATOMIC_FUNC_SET
)

// AtomicOp updates the little-endian unsigned integer of width bytes (1, 2,
// 4 or 8) at offset of an existing blob: value = fn(value, operand), with
// the operand truncated to width bytes. Bytes past the end read as zeros and
// the op extends the blob. OpResult.Value is the new value.
func AtomicOp(key string, offset uint64, width int, fn AtomicFunc, operand uint64) Op {
	w := uint32(width)
	if width < 0 || width > 8 {
		w = 0 // rejected by the server
	}
	return Op{&tyrpb.Op{Key: []byte(key), Kind: &tyrpb.Op_Atomic{Atomic: &tyrpb.AtomicOp{
		Offset: offset, Width: w, Func: fn, Operand: operand}}}}
}

// CASOp replaces the bytes at offset with data if they equal expected (same
// length, 1 to CASBytesMax bytes; bytes past the end compare as zeros).
// Otherwise the whole commit fails with ErrConflict and changes nothing.
func CASOp(key string, offset uint64, expected, data []byte) Op {
	return Op{&tyrpb.Op{Key: []byte(key), Kind: &tyrpb.Op_Cas{Cas: &tyrpb.CasOp{Offset: offset, Expected: expected, Data: data}}}}
}

// Atomic applies one AtomicOp and returns the new value.
func (c *Client) Atomic(ctx context.Context, ks, key string, offset uint64, width int, fn AtomicFunc, operand uint64) (uint64, error) {
	r, err := c.commitOne(ctx, ks, AtomicOp(key, offset, width, fn, operand))
	return r.Value, err
}

// CompareAndSwap applies one CASOp: ErrConflict when the bytes differ.
func (c *Client) CompareAndSwap(ctx context.Context, ks, key string, offset uint64, expected, data []byte) error {
	_, err := c.commitOne(ctx, ks, CASOp(key, offset, expected, data))
	return err
}

// OpResult is one committed op's outcome.
type OpResult struct {
	Offset  uint64 // where the data landed (write, append)
	Size    uint64 // blob size after the commit
	Version uint64 // blob version after the commit; 0 after a delete
	Value   uint64 // the new value (atomic)
}

// Commit applies ops to blobs of keyspace ks atomically: all take effect, at
// once, or none does. Ops apply in order, so a later op sees earlier ones.
//
// If the answer is lost (the connection breaks, or the node coordinating
// the commit dies), Commit asks the cluster's nodes for the outcome for up
// to ResolveTimeout (see resolve.go): it returns the results if the commit
// took effect, an ErrConflict error if it did not and never will, and an
// error wrapping ErrOutcomeUnknown if the outcome could not be learnt. A
// commit the server refused for certain (Refused) is not resolved: its
// error is returned as it is. When the node could not be reached at all
// and the cluster found the commit did not take effect, Commit sends it
// anew, under a new ID, through each other member it knows in turn, so a
// client whose endpoint is down keeps committing. With WithFailover or
// WithEndpoints, a commit that certainly did not reach the endpoint goes
// as it is to the next one, without resolution, and one that reached no
// node fails at once, Refused (see WithFailover).
func (c *Client) Commit(ctx context.Context, ks string, ops ...Op) ([]OpResult, error) {
	return c.commit(ctx, ks, ops, nil, true)
}

// Check is a condition of CommitIf: blob Key is at Version, or with
// Version 0 does not exist.
type Check struct {
	Key     string
	Version uint64
}

// CommitIf applies ops as Commit does, if every check holds when the
// commit applies, with the checked blobs locked; otherwise nothing applies
// and it fails with ErrConflict. It is a transaction's commit without its
// reads: a version from an earlier read, or absence, checked in the same
// request as the writes. At most ReadChecksMax checks.
func (c *Client) CommitIf(ctx context.Context, ks string, checks []Check, ops ...Op) ([]OpResult, error) {
	reads := make([]*tyrpb.ReadCheck, len(checks))
	for i, ch := range checks {
		reads[i] = &tyrpb.ReadCheck{Key: []byte(ch.Key), Version: ch.Version}
	}
	return c.commit(ctx, ks, ops, reads, true)
}

// commit sends a commit, resolving its outcome if its answer is lost and
// resolve is set.
func (c *Client) commit(ctx context.Context, ks string, ops []Op, reads []*tyrpb.ReadCheck, resolve bool) ([]OpResult, error) {
	req := &tyrpb.CommitRequest{Keyspace: []byte(ks), Ops: make([]*tyrpb.Op, len(ops)), Reads: reads, TxnId: newTxnID()}
	for i, op := range ops {
		req.Ops[i] = op.pb
	}
	if resolve && c.router != nil {
		// Resolution must reach other nodes when the endpoint is the
		// node that died, so the client learns them first (once).
		c.router.current(ctx)
	}
	targets := []tyrpb.TyrClient{c.api}
	for i := 0; ; i++ {
		results, unreachable, err := c.commitVia(ctx, targets[i], req, resolve)
		if !unreachable {
			return results, err
		}
		if i == 0 {
			if c.fo != nil {
				// The endpoint the client failed over to, if any.
				targets = append(targets, c.api)
			}
			targets = append(targets, c.router.members(ctx)...)
		}
		if i+1 == len(targets) {
			return nil, err
		}
		req = proto.Clone(req).(*tyrpb.CommitRequest)
		req.TxnId = newTxnID()
	}
}

// commitVia sends commit req through target. It reports unreachable when
// the node could not be reached (the call failed as unavailable) and
// resolution found the commit did not take effect and never will: it
// may then be sent anew through another node.
func (c *Client) commitVia(ctx context.Context, target tyrpb.TyrClient, req *tyrpb.CommitRequest, resolve bool) (results []OpResult, unreachable bool, err error) {
	resp, refused, err := c.commitRPC(ctx, target, req)
	if err == nil {
		results, err = opResults(len(req.GetOps()), resp.GetResults())
		return results, false, err
	}
	err = fromStatus(err)
	var e *Error
	if errors.As(err, &e) && refused {
		e.refused = true
	}
	// A definite refusal changed nothing: only a lost answer is resolved.
	if !resolve || Refused(err) || ctx.Err() != nil {
		return nil, false, err
	}
	results, rerr := c.resolve(ctx, req, err)
	return results, rerr != nil && errors.Is(err, ErrUnavailable) && errors.Is(rerr, ErrConflict) && Refused(rerr), rerr
}

// commitRPC sends commit req through target, and reports whether a
// failure was a certain refusal. The endpoint's commits go over the data
// path (data.go) while its server takes them there; others, and those
// marked "tyr-forwarded", over gRPC.
func (c *Client) commitRPC(ctx context.Context, target tyrpb.TyrClient, req *tyrpb.CommitRequest) (*tyrpb.CommitResponse, bool, error) {
	if target == c.api && c.data != nil && !forwardedCall(ctx) {
		resp, h, sent, err := c.data.commit(ctx, c.dataEndpoint(), req)
		if h.Flags&frame.FlagRouting != 0 {
			c.router.observeIDs(h.RingID, h.MembersID)
		}
		if sent {
			return resp, h.Flags&frame.FlagRefused != 0, err
		}
	}
	var trailer metadata.MD
	resp, err := target.Commit(ctx, req, grpc.Trailer(&trailer))
	return resp, len(trailer.Get(errs.RefusedTrailer)) > 0, err
}

func opResults(n int, in []*tyrpb.OpResult) ([]OpResult, error) {
	if len(in) != n {
		return nil, fmt.Errorf("tyr: %w: commit of %d ops answered with %d results", ErrCorruption, n, len(in))
	}
	out := make([]OpResult, n)
	for i, r := range in {
		out[i] = OpResult{Offset: r.GetOffset(), Size: r.GetSize(), Version: r.GetVersion(), Value: r.GetValue()}
	}
	return out, nil
}

func (c *Client) commitOne(ctx context.Context, ks string, op Op) (OpResult, error) {
	r, err := c.Commit(ctx, ks, op)
	if err != nil {
		return OpResult{}, err
	}
	return r[0], nil
}

// Create creates an empty blob; ErrExists if it exists.
func (c *Client) Create(ctx context.Context, ks, key string) error {
	_, err := c.commitOne(ctx, ks, CreateOp(key))
	return err
}

// Write writes data at offset into an existing blob (ErrNotFound otherwise),
// extending it if needed. Data larger than PayloadBytesMax is written in
// parts, in order; each part is atomic, the whole is not.
func (c *Client) Write(ctx context.Context, ks, key string, offset uint64, data []byte) (OpResult, error) {
	return c.write(ctx, ks, key, offset, data, false)
}

// WriteCreate is Write that creates a missing blob.
func (c *Client) WriteCreate(ctx context.Context, ks, key string, offset uint64, data []byte) (OpResult, error) {
	return c.write(ctx, ks, key, offset, data, true)
}

func (c *Client) write(ctx context.Context, ks, key string, offset uint64, data []byte, create bool) (OpResult, error) {
	var r OpResult
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), PayloadBytesMax)
		var err error
		r, err = c.commitOne(ctx, ks, WriteOp(key, offset, data[:n], create))
		if err != nil {
			return r, err
		}
		offset += uint64(n)
		data = data[n:]
	}
	return r, nil
}

// Append writes data at the blob's end atomically and returns the offset
// where it landed. Data larger than PayloadBytesMax is refused (ErrTooLarge)
// rather than split, so an append is never interleaved with another.
func (c *Client) Append(ctx context.Context, ks, key string, data []byte) (uint64, error) {
	r, err := c.commitOne(ctx, ks, AppendOp(key, data, false))
	return r.Offset, err
}

// Truncate sets the size of an existing blob.
func (c *Client) Truncate(ctx context.Context, ks, key string, size uint64) error {
	_, err := c.commitOne(ctx, ks, TruncateOp(key, size))
	return err
}

// Delete removes a blob; ErrNotFound if it does not exist.
func (c *Client) Delete(ctx context.Context, ks, key string) error {
	_, err := c.commitOne(ctx, ks, DeleteOp(key))
	return err
}

// Stat describes a blob.
func (c *Client) Stat(ctx context.Context, ks, key string) (BlobInfo, error) {
	b, err := c.statRPC(ctx, &tyrpb.StatRequest{Keyspace: []byte(ks), Key: []byte(key)})
	if err != nil {
		return BlobInfo{}, fromStatus(err)
	}
	return blobInfo(b), nil
}

// ReadPart reads at most PayloadBytesMax bytes in one request, so the bytes
// come from one commit. It also returns the blob's size and version as of
// that commit. A read at or past the end returns no bytes.
func (c *Client) ReadPart(ctx context.Context, ks, key string, offset, length uint64) ([]byte, BlobInfo, error) {
	resp, err := c.readRPC(ctx, &tyrpb.ReadRequest{Keyspace: []byte(ks), Key: []byte(key), Offset: offset, Length: length})
	if err != nil {
		return nil, BlobInfo{}, fromStatus(err)
	}
	return resp.GetData(), BlobInfo{Key: key, Size: resp.GetSize(), Version: resp.GetVersion()}, nil
}

// readAttemptsMax bounds how often Read starts over when the version its
// first part found is no longer readable before its last part.
const readAttemptsMax = 3

// Read reads up to length bytes from offset; the result is short at the end
// of the blob. Lengths above PayloadBytesMax are read in parts, all at the
// version the first part found, so the result is one commit's bytes, never
// a mix of two. If that version is superseded and no longer retained
// before the last part (MVCC off), the read starts over, at most
// readAttemptsMax times, then fails with ErrConflict.
func (c *Client) Read(ctx context.Context, ks, key string, offset, length uint64) ([]byte, error) {
	if length <= PayloadBytesMax {
		data, _, err := c.ReadPart(ctx, ks, key, offset, length)
		return data, err
	}
	var err error
	for range readAttemptsMax {
		var out []byte
		if out, err = c.readPinned(ctx, ks, key, offset, length); !errors.Is(err, ErrConflict) {
			return out, err
		}
	}
	return nil, err
}

// readPinned reads length bytes from offset in parts at one version, which
// it uses (see ReadRequest.use) until the last part is read. The first part
// finds the version and the blob's size; the others follow, partsInFlight
// at a time, straight into the result.
func (c *Client) readPinned(ctx context.Context, ks, key string, offset, length uint64) ([]byte, error) {
	first, err := c.readRPC(ctx, &tyrpb.ReadRequest{Keyspace: []byte(ks), Key: []byte(key), Offset: offset,
		Length: min(length, PayloadBytesMax), Consistent: true, Use: true})
	if err != nil {
		return nil, fromStatus(err)
	}
	data, version := first.GetData(), first.GetVersion()
	defer c.release(ks, []*tyrpb.ReadCheck{{Key: []byte(key), Version: version}})
	if uint64(len(data)) < PayloadBytesMax || first.GetSize() <= offset+PayloadBytesMax {
		return data, nil
	}
	out := make([]byte, min(length, first.GetSize()-offset))
	copy(out, data)
	// Within the size the version has: a short answer is a corruption.
	if err := c.readVersion(ctx, ks, key, version, offset+uint64(len(data)), out[len(data):], ErrCorruption); err != nil {
		return nil, err
	}
	return out, nil
}

// ReadVersion fills out with the bytes from offset of version version of
// the blob, read in parts (PayloadBytesMax each, several at once): the
// bytes a read that found that version (ReadPart's BlobInfo) would have
// given. The range must lie within the blob at that version:
// ErrOutOfRange if it does not. ErrConflict if the version is superseded
// and no longer kept (see KeyspaceConfig's MVCC and the server's
// --version-linger).
func (c *Client) ReadVersion(ctx context.Context, ks, key string, version, offset uint64, out []byte) error {
	return c.readVersion(ctx, ks, key, version, offset, out, ErrOutOfRange)
}

// readVersion fills out with the bytes from offset of version version of
// the blob; short is the class of the error when the version holds fewer.
func (c *Client) readVersion(ctx context.Context, ks, key string, version, offset uint64, out []byte, short error) error {
	errs := forEachPart(len(out), func(_, lo, hi int) (bool, error) {
		resp, err := c.readRPC(ctx, &tyrpb.ReadRequest{Keyspace: []byte(ks), Key: []byte(key),
			Offset: offset + uint64(lo), Length: uint64(hi - lo), Version: version})
		if err != nil {
			return false, fromStatus(err)
		}
		if n := copy(out[lo:hi], resp.GetData()); n != hi-lo {
			return false, &Error{Class: short, Message: fmt.Sprintf(
				"blob %q: %d bytes at %d of version %d of size %d, want %d", key, n, offset+uint64(lo), version, resp.GetSize(), hi-lo)}
		}
		return true, nil
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// List returns up to limit blobs (0: the server's default, 1000) whose keys
// start with prefix and sort after startAfter, in key order. next is
// non-empty when more may follow: pass it as startAfter for the next page.
func (c *Client) List(ctx context.Context, ks, prefix, startAfter string, limit int) (blobs []BlobInfo, next string, err error) {
	resp, err := c.list(ctx, ks, prefix, startAfter, limit, 0)
	if err != nil {
		return nil, "", err
	}
	blobs = make([]BlobInfo, len(resp.GetBlobs()))
	for i, b := range resp.GetBlobs() {
		blobs[i] = blobInfo(b)
	}
	return blobs, resp.GetNextStartAfter(), nil
}

// ListedBlob is a blob ListData listed: its description and, if it was
// small enough, its bytes.
type ListedBlob struct {
	BlobInfo
	// Data is the blob's bytes when HasData; otherwise read them.
	Data    []byte
	HasData bool
}

// ListData is List, and gives each blob of at most dataMax bytes (and at
// most one chunk) its bytes, up to ListDataBytesMax of them in all: one
// request for a page of small blobs, such as a page of records. Each
// blob's bytes are those of the version it describes; the blobs are read
// one by one, not at one instant, as List lists them.
func (c *Client) ListData(ctx context.Context, ks, prefix, startAfter string, limit, dataMax int) (blobs []ListedBlob, next string, err error) {
	if dataMax < 1 || dataMax > ListDataBytesMax {
		return nil, "", &Error{Class: ErrInvalidArgument,
			Message: fmt.Sprintf("list data limit %d out of range [1, %d]", dataMax, ListDataBytesMax)}
	}
	resp, err := c.list(ctx, ks, prefix, startAfter, limit, uint32(dataMax))
	if err != nil {
		return nil, "", err
	}
	blobs = make([]ListedBlob, len(resp.GetBlobs()))
	for i, b := range resp.GetBlobs() {
		blobs[i] = ListedBlob{BlobInfo: blobInfo(b), Data: b.GetData(),
			HasData: b.GetSize() == 0 || uint64(len(b.GetData())) == b.GetSize()}
	}
	return blobs, resp.GetNextStartAfter(), nil
}

func (c *Client) list(ctx context.Context, ks, prefix, startAfter string, limit int, dataMax uint32) (*tyrpb.ListResponse, error) {
	if limit < 0 || limit > ListLimitMax {
		return nil, &Error{Class: ErrInvalidArgument,
			Message: fmt.Sprintf("list limit %d out of range [0, %d]", limit, ListLimitMax)}
	}
	resp, err := c.api.List(ctx, &tyrpb.ListRequest{Keyspace: []byte(ks), Prefix: []byte(prefix),
		StartAfter: []byte(startAfter), Limit: uint32(limit), DataMax: dataMax})
	return resp, fromStatus(err)
}
