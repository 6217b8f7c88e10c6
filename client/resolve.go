package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tyrstore/tyr/api/tyrpb"
)

// Outcome resolution: every commit carries an ID of the client's (its
// clock, then random bytes; CommitRequest.txn_id). When the answer to a
// commit is lost, the client asks the nodes it knows, the endpoint first,
// for the outcome under that ID (the Resolve RPC; the protocol is in
// internal/node/resolve.go). A node answers committed (with the results),
// aborted (the commit changed nothing, and never will: the nodes now
// refuse it), pending (still running) or unknown. The client asks again
// until it learns committed or aborted, or ResolveTimeout passes, or no
// node answered for resolveSilenceMax.

// Timing of resolution.
const (
	// ResolveTimeout bounds how long Commit asks for a lost outcome.
	ResolveTimeout = 30 * time.Second
	// resolvePause is the pause between two rounds of asking.
	resolvePause = 250 * time.Millisecond
	// resolveCallTimeout bounds one node's answer.
	resolveCallTimeout = 5 * time.Second
	// resolveSilenceMax: resolution gives up once no node has answered
	// for this long (a single server that is down, say), rather than
	// wait out ResolveTimeout.
	resolveSilenceMax = 5 * time.Second
)

// ErrOutcomeUnknown is wrapped by the error of a commit whose answer was
// lost and whose outcome could not be learnt: it may or may not have taken
// effect.
var ErrOutcomeUnknown = errors.New("commit outcome unknown")

// newTxnID returns a fresh client ID for a commit: the clock in unix
// nanoseconds (the servers refuse one far from theirs), then 8 random
// bytes.
func newTxnID() []byte {
	id := make([]byte, 16)
	binary.BigEndian.PutUint64(id, uint64(time.Now().UnixNano()))
	_, _ = rand.Read(id[8:])
	return id
}

// refused reports whether a commit's error says that the server decided it
// changed nothing (a class of error decided before anything applies).
func refused(err error) bool {
	for _, class := range []error{ErrConflict, ErrInvalidArgument, ErrNotFound, ErrExists, ErrOutOfRange, ErrTooLarge} {
		if errors.Is(err, class) {
			return true
		}
	}
	return false
}

// resolve learns the outcome of commit req, whose answer was lost with
// cause.
func (c *Client) resolve(ctx context.Context, req *tyrpb.CommitRequest, cause error) ([]OpResult, error) {
	ctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	defer cancel()
	last := "no node answered"
	answered := time.Now()
	for {
		for _, target := range append([]tyrpb.TyrClient{c.api}, c.router.members(ctx)...) {
			cctx, ccancel := context.WithTimeout(ctx, resolveCallTimeout)
			resp, err := target.Resolve(cctx, &tyrpb.ResolveRequest{Commit: req})
			ccancel()
			if err != nil {
				last = fromStatus(err).Error()
				continue
			}
			answered = time.Now()
			switch resp.GetOutcome() {
			case tyrpb.Outcome_OUTCOME_COMMITTED:
				return opResults(len(req.GetOps()), resp.GetResults())
			case tyrpb.Outcome_OUTCOME_ABORTED:
				return nil, &Error{Class: ErrConflict, Code: codes.Aborted,
					Message: fmt.Sprintf("commit aborted: its answer was lost (%v), and the cluster found it did not take effect", cause)}
			default:
				last = fmt.Sprintf("%s: %s", resp.GetOutcome(), resp.GetDetail())
			}
		}
		if time.Since(answered) > resolveSilenceMax {
			return nil, fmt.Errorf("tyr: %w: the answer was lost (%w), and no node answered for %v (last: %s)",
				ErrOutcomeUnknown, cause, resolveSilenceMax, last)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("tyr: %w: the answer was lost (%w), and resolution did not tell (last: %s)",
				ErrOutcomeUnknown, cause, last)
		case <-time.After(resolvePause):
		}
	}
}
