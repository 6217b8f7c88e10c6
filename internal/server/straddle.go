package server

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/node"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/txn"
)

// Atomic ops across chunks on different nodes.
//
// A chain member applies an atomic op in place only if it holds every
// byte of it: a member holding one of two chunks cannot compute the new
// value. When the two chunks an atomic op spans live on different nodes,
// the coordinator turns the op into a read-modify-write inside the chain:
// it reads the value through a version manager (a consistent read, which
// returns the blob's version), computes the new value, and commits a write
// of it together with a read check of that version. If the blob changed
// in between, the commit fails as a conflict and the coordinator reads and
// tries again for up to node.CommitRetryMax; the caller sees one atomic op.
//
// Only an op whose blob no earlier op of the same commit touches is turned
// so (the value read must be the one the op would see); any other keeps
// the chain's refusal (errs.ErrInvalidArgument). A commit whose own read
// checks fail is tried for node.CommitRetryMax and then fails as a
// conflict, as it would have at once.

// straddling returns the indexes of the atomic ops in ops to turn into
// read-modify-writes (see above).
func straddling(pl node.Placement, cs uint64, ops []txn.Op) []int {
	var out []int
	touched := map[string]bool{}
	for i, op := range ops {
		if op.Kind == txn.OpAtomic && op.Width > 0 && !touched[op.Key] {
			a, b := op.Offset/cs, (op.Offset+uint64(op.Width)-1)/cs
			if a != b && !pl.SameHolders(op.Key, a, b) {
				out = append(out, i)
			}
		}
		touched[op.Key] = true
	}
	return out
}

// commitStraddling runs ops on a cluster, turning the atomic ops at the
// indexes turn into read-modify-writes (see above).
func (s *Service) commitStraddling(ctx context.Context, ks *storage.Keyspace, ops []txn.Op, turn []int, client []byte) ([]txn.Result, error) {
	backoff := time.Millisecond
	deadline := time.Now().Add(node.CommitRetryMax)
	for {
		run := append(make([]txn.Op, 0, len(ops)+len(turn)), ops...)
		values := make([]uint64, len(turn))
		for j, i := range turn {
			op := ops[i]
			resp, err := s.clusterRead(ctx, ks, &tyrpb.ReadRequest{Keyspace: []byte(ks.Name), Key: []byte(op.Key),
				Offset: op.Offset, Length: uint64(op.Width), Consistent: true})
			if err != nil {
				// Every earlier try of the commit was refused: nothing
				// applied.
				return nil, errs.Refused(statusError(err))
			}
			var cur [8]byte
			copy(cur[:], resp.GetData()) // bytes past the end read as zero
			values[j] = op.Func.Apply(op.Width, binary.LittleEndian.Uint64(cur[:]), op.Operand)
			binary.LittleEndian.PutUint64(cur[:], values[j])
			run[i] = txn.Op{Kind: txn.OpWrite, Key: op.Key, Offset: op.Offset, Data: cur[:op.Width]}
			run = append(run, txn.Op{Kind: txn.OpReadCheck, Key: op.Key, Version: resp.GetVersion()})
		}
		results, err := s.node.Commit(ctx, ks.Name, int(ks.Config.Replication), run, client)
		if err == nil {
			for j, i := range turn {
				results[i].Value = values[j]
			}
			return results[:len(ops)], nil
		}
		if !errors.Is(err, errs.ErrConflict) || time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-time.After(backoff/2 + rand.N(backoff)):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// statusError turns a gRPC status error of this package's handlers back
// into an error of its errs class.
func statusError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	class := errs.Class(st.Code())
	if class == nil {
		return err
	}
	return &classed{class: class, msg: st.Message()}
}

type classed struct {
	class error
	msg   string
}

func (e *classed) Error() string { return e.msg }
func (e *classed) Unwrap() error { return e.class }
