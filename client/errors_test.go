package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
)

// commitAnswer is what a commitServer answers: every Commit with err (and
// the refused trailer if refused), and every Resolve with outcome.
type commitAnswer struct {
	err     error
	refused bool
	outcome tyrpb.Outcome
}

type commitServer struct {
	tyrpb.UnimplementedTyrServer
	commitAnswer
	resolves atomic.Int32
}

func (s *commitServer) Commit(ctx context.Context, _ *tyrpb.CommitRequest) (*tyrpb.CommitResponse, error) {
	if s.refused {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(errs.RefusedTrailer, "1"))
	}
	return nil, s.err
}

func (s *commitServer) Resolve(context.Context, *tyrpb.ResolveRequest) (*tyrpb.ResolveResponse, error) {
	s.resolves.Add(1)
	return &tyrpb.ResolveResponse{Outcome: s.outcome, Detail: "as told"}, nil
}

func startCommitServer(t *testing.T, s *commitServer) *Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	tyrpb.RegisterTyrServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c, err := Dial(lis.Addr().String(), WithoutRouting())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// For each kind of failed commit: its class, alone and named once first,
// whether retrying can help, whether it changed nothing for certain, and
// whether the client asked the cluster for the outcome (only for a lost
// answer, never for a definite refusal).
func TestCommitErrorsClassAndRetry(t *testing.T) {
	for _, tc := range []struct {
		name      string
		server    commitAnswer
		class     error
		retryable bool
		refused   bool
		resolved  bool
		unknown   bool
		text      string // in the message, after the class
	}{
		{name: "conflict", server: commitAnswer{err: status.Error(codes.Aborted, `conflict: blob "a1": no version manager of the blob came first in the chain`)},
			class: ErrConflict, retryable: true, refused: true, text: `blob "a1": no version manager`},
		{name: "invalid argument", server: commitAnswer{err: status.Error(codes.InvalidArgument, "invalid argument: atomic width 3")},
			class: ErrInvalidArgument, refused: true, text: "atomic width 3"},
		{name: "not found", server: commitAnswer{err: status.Error(codes.NotFound, `not found: blob "k"`)},
			class: ErrNotFound, refused: true, text: `blob "k"`},
		{name: "too large", server: commitAnswer{err: status.Error(codes.ResourceExhausted, "too large: commit of 20 MiB")},
			class: ErrTooLarge, refused: true, text: "commit of 20 MiB"},
		{name: "unavailable, refused", server: commitAnswer{err: status.Error(codes.Unavailable, "unavailable: node n1 is catching up"), refused: true},
			class: ErrUnavailable, retryable: true, refused: true, text: "node n1 is catching up"},
		// The answer lost: resolution says it did not take effect.
		{name: "lost, aborted", server: commitAnswer{err: status.Error(codes.Unavailable, "unavailable: node n1 shutting down; commit outcome unknown"),
			outcome: tyrpb.Outcome_OUTCOME_ABORTED},
			class: ErrConflict, retryable: true, refused: true, resolved: true, text: "commit aborted: its answer was lost (node n1 shutting down"},
		// The answer lost: resolution cannot tell.
		{name: "lost, unknown", server: commitAnswer{err: status.Error(codes.Unavailable, "unavailable: node n1 shutting down; commit outcome unknown"),
			outcome: tyrpb.Outcome_OUTCOME_UNKNOWN},
			class: ErrUnavailable, resolved: true, unknown: true, text: "commit outcome unknown: the answer was lost (node n1 shutting down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &commitServer{commitAnswer: tc.server}
			c := startCommitServer(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := c.Commit(ctx, "ks", CreateOp("k"))
			if err == nil {
				t.Fatal("committed")
			}
			if got := errs.Classes(err); len(got) != 1 || got[0] != tc.class {
				t.Errorf("%v: classes %v, want %v alone", err, got, tc.class)
			}
			text := strings.TrimPrefix(err.Error(), "tyr: ")
			if !strings.HasPrefix(text, tc.class.Error()+": ") || errs.ClassWordPrefixes(text) != 1 {
				t.Errorf("%q: want the class %q named once, first", err, tc.class)
			}
			if !strings.Contains(text, tc.text) {
				t.Errorf("%q: want %q in it", err, tc.text)
			}
			if Retryable(err) != tc.retryable || Refused(err) != tc.refused {
				t.Errorf("%v: retryable %t, refused %t; want %t, %t", err, Retryable(err), Refused(err), tc.retryable, tc.refused)
			}
			if resolved := s.resolves.Load() > 0; resolved != tc.resolved {
				t.Errorf("%v: resolved %t, want %t", err, resolved, tc.resolved)
			}
			if errors.Is(err, ErrOutcomeUnknown) != tc.unknown {
				t.Errorf("%v: outcome unknown %t, want %t", err, errors.Is(err, ErrOutcomeUnknown), tc.unknown)
			}
		})
	}
}

// A client Error built without a class word in its message names its
// class first all the same.
func TestErrorTextNamesItsClass(t *testing.T) {
	for _, e := range []*Error{
		{Class: ErrTooLarge, Message: "transaction reads more than 1024 blobs"},
		{Class: ErrConflict, Message: "conflict: blob \"k\" changed"},
		{Class: ErrNotFound, Message: `blob "k": not found`},
	} {
		got := e.Error()
		if !strings.HasPrefix(got, "tyr: "+e.Class.Error()+": ") || errs.ClassWordPrefixes(got) != 1 {
			t.Errorf("%q: want the class %q once, first", got, e.Class)
		}
	}
}
