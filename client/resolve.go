package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
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
// effect. Such an error is of class ErrUnavailable, and not Retryable.
var ErrOutcomeUnknown = errs.ErrOutcomeUnknown

// newTxnID returns a fresh client ID for a commit: the clock in unix
// nanoseconds (the servers refuse one far from theirs), then 8 random
// bytes.
func newTxnID() []byte {
	id := make([]byte, 16)
	binary.BigEndian.PutUint64(id, uint64(time.Now().UnixNano()))
	_, _ = rand.Read(id[8:])
	return id
}

// detail is err's text for a message about it: without "tyr: " and
// without class words, which the message's own class replaces.
func detail(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return errs.Message(nil, e.Message)
	}
	return errs.Message(nil, strings.TrimPrefix(err.Error(), "tyr: "))
}

// unknownOutcome is the error of a commit whose answer was lost and whose
// outcome resolution did not learn: of class ErrUnavailable, and
// ErrOutcomeUnknown.
func unknownOutcome(format string, args ...any) error {
	return &Error{Class: ErrUnavailable, Code: codes.Unavailable, unknown: true,
		Message: errs.Message(ErrUnavailable, ErrOutcomeUnknown.Error()+": "+fmt.Sprintf(format, args...))}
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
				last = detail(fromStatus(err))
				continue
			}
			answered = time.Now()
			switch resp.GetOutcome() {
			case tyrpb.Outcome_OUTCOME_COMMITTED:
				return opResults(len(req.GetOps()), resp.GetResults())
			case tyrpb.Outcome_OUTCOME_ABORTED:
				// Aborted for good: like a conflict, it changed nothing and
				// may be run again.
				return nil, &Error{Class: ErrConflict, Code: codes.Aborted, refused: true,
					Message: errs.Message(ErrConflict, fmt.Sprintf("commit aborted: its answer was lost (%s), and the cluster found it did not take effect", detail(cause)))}
			default:
				last = fmt.Sprintf("%s: %s", resp.GetOutcome(), resp.GetDetail())
			}
		}
		if time.Since(answered) > resolveSilenceMax {
			return nil, unknownOutcome("the answer was lost (%s), and no node answered for %v (last: %s)",
				detail(cause), resolveSilenceMax, last)
		}
		select {
		case <-ctx.Done():
			return nil, unknownOutcome("the answer was lost (%s), and resolution did not tell (last: %s)",
				detail(cause), last)
		case <-time.After(resolvePause):
		}
	}
}
