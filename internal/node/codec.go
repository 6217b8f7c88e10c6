package node

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/tyrstore/tyr/api/peerpb"
	"github.com/tyrstore/tyr/internal/chain"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/txn"
)

// envelope is a chain message with what the chain package does not carry:
// its keyspace, and for a Forward the commit version the coordinator chose.
type envelope struct {
	keyspace string
	version  uint64
	begun    int64 // Forward: unix nanoseconds when the coordinator began the commit
	msg      chain.Message
	sent     int64 // unix nanoseconds when the sender queued it
	// bases: Forward: the blobs as the first version manager of each in
	// the chain found them (see mvcc.Base), for the members after it.
	bases map[string]mvcc.Base
	// client: Forward: the client's ID of the commit, if any (resolve.go).
	client []byte
}

// basesChunksMax bounds the chunk versions a Forward may carry per blob:
// more than a commit's data can write into.
const basesChunksMax = 1 << 16

func encodeEnvelope(e envelope) *peerpb.Message {
	m := e.msg
	out := &peerpb.Message{
		Keyspace: e.keyspace, Type: uint32(m.Type), From: string(m.From), To: string(m.To),
		TxnCoordinator: string(m.Txn.Coordinator), TxnSeq: m.Txn.Seq, Index: uint32(m.Index),
		Committed: m.Committed, Err: m.Err, SentUnixNano: e.sent, Version: e.version,
		BegunUnixNano: e.begun, Fresh: m.Fresh, Probe: m.Probe, ClientTxn: e.client, Undecided: m.Undecided,
	}
	for _, id := range m.Origin {
		out.Origin = append(out.Origin, string(id))
	}
	for key, b := range e.bases {
		out.Bases = append(out.Bases, &peerpb.Base{Key: key, Version: b.Version, Size: b.Size, Chunks: b.Chunks,
			InUseOldest: b.InUse.Oldest, InUseUntil: b.InUse.Until, Ahead: b.Ahead})
	}
	for _, id := range m.Chain {
		out.Chain = append(out.Chain, string(id))
	}
	for _, op := range m.Ops {
		out.Ops = append(out.Ops, &peerpb.Op{
			Key: op.Key, Kind: uint32(op.Kind), Offset: op.Offset, Size: op.Size, Data: op.Data,
			Create: op.Create, Width: uint32(op.Width), Func: uint32(op.Func), Operand: op.Operand,
			Expected: op.Expected, Version: op.Version,
		})
	}
	for _, r := range m.Results {
		out.Results = append(out.Results, &peerpb.Result{Offset: r.Offset, Size: r.Size, Version: r.Version, Value: r.Value, Unheld: r.Unheld})
	}
	return out
}

// decodeEnvelope checks what a replica cannot: field ranges. The chain
// state machines validate the rest (addressing, chain shape, ops).
func decodeEnvelope(in *peerpb.Message) (envelope, error) {
	if parts, err := clientParts(in.GetClientTxn()); err != nil {
		return envelope{}, err
	} else if len(parts) > 0 && parts[len(parts)-1].To > len(in.GetOps()) {
		return envelope{}, fmt.Errorf("%w: client transaction IDs cover ops up to %d of %d", errs.ErrInvalidArgument, parts[len(parts)-1].To, len(in.GetOps()))
	}
	if in.GetType() == 0 || in.GetType() > 255 {
		return envelope{}, fmt.Errorf("%w: message type %d", errs.ErrInvalidArgument, in.GetType())
	}
	if in.GetIndex() >= chain.ChainMembersMax {
		return envelope{}, fmt.Errorf("%w: chain index %d", errs.ErrInvalidArgument, in.GetIndex())
	}
	m := chain.Message{
		Type: chain.MessageType(in.GetType()), From: ring.NodeID(in.GetFrom()), To: ring.NodeID(in.GetTo()),
		Txn:   chain.TxnID{Coordinator: ring.NodeID(in.GetTxnCoordinator()), Seq: in.GetTxnSeq()},
		Index: int(in.GetIndex()), Committed: in.GetCommitted(), Err: in.GetErr(),
		Fresh: in.GetFresh(), Probe: in.GetProbe(), Undecided: in.GetUndecided(),
	}
	for _, id := range in.GetChain() {
		m.Chain = append(m.Chain, ring.NodeID(id))
	}
	for _, id := range in.GetOrigin() {
		m.Origin = append(m.Origin, ring.NodeID(id))
	}
	for _, op := range in.GetOps() {
		if op.GetKind() > 255 || op.GetWidth() > 8 || op.GetFunc() > 255 {
			return envelope{}, fmt.Errorf("%w: op kind %d, width %d, func %d", errs.ErrInvalidArgument,
				op.GetKind(), op.GetWidth(), op.GetFunc())
		}
		m.Ops = append(m.Ops, txn.Op{
			Key: op.GetKey(), Kind: txn.OpKind(op.GetKind()), Offset: op.GetOffset(), Size: op.GetSize(),
			Data: op.GetData(), Create: op.GetCreate(), Width: int(op.GetWidth()), Func: txn.AtomicFunc(op.GetFunc()),
			Operand: op.GetOperand(), Expected: op.GetExpected(), Version: op.GetVersion(),
		})
	}
	for _, r := range in.GetResults() {
		m.Results = append(m.Results, txn.Result{Offset: r.GetOffset(), Size: r.GetSize(), Version: r.GetVersion(),
			Value: r.GetValue(), Unheld: r.GetUnheld()})
	}
	if len(in.GetBases()) > len(m.Ops) {
		return envelope{}, fmt.Errorf("%w: %d bases for %d ops", errs.ErrInvalidArgument, len(in.GetBases()), len(m.Ops))
	}
	var bases map[string]mvcc.Base
	for _, b := range in.GetBases() {
		if len(b.GetAhead()) > mvcc.QueueMax {
			return envelope{}, fmt.Errorf("%w: base of blob %q with %d queued versions", errs.ErrInvalidArgument, b.GetKey(), len(b.GetAhead()))
		}
		if len(b.GetChunks()) > basesChunksMax {
			return envelope{}, fmt.Errorf("%w: base of blob %q with %d chunk versions", errs.ErrInvalidArgument, b.GetKey(), len(b.GetChunks()))
		}
		if bases == nil {
			bases = map[string]mvcc.Base{}
		}
		bases[b.GetKey()] = mvcc.Base{Version: b.GetVersion(), Size: b.GetSize(), Chunks: b.GetChunks(),
			InUse: mvcc.InUse{Oldest: b.GetInUseOldest(), Until: b.GetInUseUntil()}, Ahead: b.GetAhead()}
	}
	return envelope{keyspace: in.GetKeyspace(), version: in.GetVersion(), begun: in.GetBegunUnixNano(),
		msg: m, sent: in.GetSentUnixNano(), bases: bases, client: in.GetClientTxn()}, nil
}

// A refusal travels up the chain as text (chain.Message.Err). So that the
// client still gets the refusing member's error class, and the coordinator
// can tell a retryable refusal from a final one, the text starts with a tag:
//
//	"code <gRPC code>: "  a classified error (see errs.Code)
//	"locked: "            a blob was locked by another transaction
//	"stale <floor>: "     the commit version was not above floor
//	"retry: "             a member cannot take the commit yet (it is
//	                      catching up); unavailable if it stays so
//
// "locked: " and "retry: " are followed by the "code <gRPC code>: " of the
// member's error, so the refusal keeps the member's class (a conflict stays
// a conflict when the coordinator gives up retrying it); without one (an
// older member) a locked refusal is a conflict and a retry unavailable. An
// untagged text (the chain's own refusals, such as chain.ErrBusy) is
// reported as unavailable. Every refusal the coordinator reports is
// definite (errs.Refused): the chain aborted the commit.
const (
	tagCode   = "code "
	tagLocked = "locked: "
	tagStale  = "stale "
	tagRetry  = "retry: "
)

// taggedError is a stager error whose Error text carries its tag.
type taggedError struct{ err error }

func (e taggedError) Error() string {
	var stale *mvcc.StaleVersionError
	code, _ := errs.Code(e.err)
	coded := fmt.Sprintf("%s%d: %v", tagCode, code, e.err)
	switch {
	case errors.As(e.err, &stale):
		return fmt.Sprintf("%s%d: %v", tagStale, stale.Floor, e.err)
	case errors.Is(e.err, mvcc.ErrLocked):
		return tagLocked + coded
	case errors.Is(e.err, errCatchingUp), errors.Is(e.err, mvcc.ErrNoBase):
		return tagRetry + coded
	}
	return coded
}

func (e taggedError) Unwrap() error { return e.err }

// refusal is a decoded chain refusal.
type refusal struct {
	err    error  // classified, for the client
	locked bool   // worth trying again as it is
	floor  uint64 // nonzero: worth trying again above this version
}

func decodeRefusal(text string) refusal {
	switch {
	case strings.HasPrefix(text, tagLocked):
		return refusal{err: decodeCoded(text[len(tagLocked):], errs.ErrConflict), locked: true}
	case strings.HasPrefix(text, tagRetry):
		return refusal{err: decodeCoded(text[len(tagRetry):], errs.ErrUnavailable), locked: true}
	case strings.HasPrefix(text, tagStale):
		num, rest, _ := strings.Cut(text[len(tagStale):], ": ")
		floor, err := strconv.ParseUint(num, 10, 64)
		if err == nil {
			return refusal{err: &remoteError{class: errs.ErrConflict, text: errs.Message(errs.ErrConflict, rest)}, floor: floor}
		}
	case strings.HasPrefix(text, tagCode):
		if _, ok, _ := cutCode(text); ok {
			return refusal{err: decodeCoded(text, errs.ErrUnavailable)}
		}
	case text == chain.ErrRestarted.Error(), text == chain.ErrBehind.Error(), text == chain.ErrOrphaned.Error():
		// A member restarted while the commit was on its way, the tail
		// is catching up, or a ring change moved a blob away from a
		// re-executed chain: a new attempt gets through.
		return refusal{err: &remoteError{class: errs.ErrUnavailable, text: errs.Message(errs.ErrUnavailable, text)}, locked: true}
	}
	return refusal{err: &remoteError{class: errs.ErrUnavailable,
		text: errs.Message(errs.ErrUnavailable, "chain refused the commit: "+text)}}
}

// decodeCoded decodes a member's error: "code <gRPC code>: text", or text
// alone. It keeps the code's class, or takes class for text alone or a code
// of no class.
func decodeCoded(text string, class error) error {
	if rest, ok, c := cutCode(text); ok {
		text = rest
		if c != nil {
			class = c
		}
	}
	return &remoteError{class: class, text: errs.Message(class, text)}
}

// cutCode splits "code <gRPC code>: rest" into rest and the code's class
// (nil for a code of no class); ok is false if text does not start so.
func cutCode(text string) (rest string, ok bool, class error) {
	if !strings.HasPrefix(text, tagCode) {
		return "", false, nil
	}
	num, rest, _ := strings.Cut(text[len(tagCode):], ": ")
	code, err := strconv.ParseUint(num, 10, 32)
	if err != nil {
		return "", false, nil
	}
	return rest, true, errs.Class(codes.Code(code))
}

// remoteError is a classified error raised on another member: its text is
// the member's, with its class word first and only there (errs.Message),
// and errors.Is finds its class, and no other.
type remoteError struct {
	class error
	text  string
}

func (e *remoteError) Error() string { return e.text }
func (e *remoteError) Unwrap() error { return e.class }
