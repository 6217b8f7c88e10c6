package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/bufpool"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/frame"
)

// The data path: reads, fetches and commits in binary frames
// (internal/frame) over plain TCP, on the gRPC port. Listen splits the
// port's connections by their first bytes; a data connection is served by
// serveData, one request at a time, through the same handlers, metrics and
// operation count as gRPC's Read, FsFetch and Commit.

// sniffTimeout bounds the wait for a new connection's first bytes.
const sniffTimeout = 10 * time.Second

// Listen returns the listener to serve gRPC on: it accepts from lis and
// keeps the connections that open with frame.Magic for the data path.
// Closing it closes lis and every data connection. Call it after
// Register.
func (s *Service) Listen(lis net.Listener) net.Listener {
	l := &splitListener{lis: lis, grpc: make(chan net.Conn), done: make(chan struct{}), data: map[net.Conn]bool{}, svc: s}
	go l.accept()
	return l
}

type splitListener struct {
	lis  net.Listener
	grpc chan net.Conn
	svc  *Service

	mu     sync.Mutex
	err    error // why accepting stopped
	data   map[net.Conn]bool
	closed bool
	done   chan struct{}
}

func (l *splitListener) accept() {
	for {
		conn, err := l.lis.Accept()
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.close()
			return
		}
		go l.sniff(conn)
	}
}

// sniff reads conn's first bytes and hands it to the data path or to gRPC.
func (l *splitListener) sniff(conn net.Conn) {
	var head [len(frame.Magic)]byte
	_ = conn.SetReadDeadline(time.Now().Add(sniffTimeout))
	n, err := io.ReadFull(conn, head[:])
	_ = conn.SetReadDeadline(time.Time{})
	if err != nil && n == 0 {
		_ = conn.Close()
		return
	}
	if err == nil && head == frame.Magic {
		if !l.track(conn, true) {
			return
		}
		defer l.track(conn, false)
		l.svc.serveData(conn)
		return
	}
	// gRPC reads the bytes sniffed again, then the rest.
	pc := &prefixConn{Conn: conn, prefix: head[:n]}
	select {
	case l.grpc <- pc:
	case <-l.done:
		_ = conn.Close()
	}
}

// track adds or removes a data connection; adding fails (and closes conn)
// once the listener is closed.
func (l *splitListener) track(conn net.Conn, add bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if add && l.closed {
		_ = conn.Close()
		return false
	}
	if add {
		l.data[conn] = true
	} else {
		delete(l.data, conn)
	}
	return true
}

func (l *splitListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.grpc:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil && !errors.Is(l.err, net.ErrClosed) {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

func (l *splitListener) Close() error {
	l.close()
	return nil
}

func (l *splitListener) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.done)
	conns := l.data
	l.data = nil
	l.mu.Unlock()
	_ = l.lis.Close()
	for c := range conns {
		_ = c.Close()
	}
}

func (l *splitListener) Addr() net.Addr { return l.lis.Addr() }

// prefixConn is a connection whose first bytes were read already.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// dataHandler wraps the Read, FsFetch and Commit handlers in the
// interceptors every gRPC call passes (metrics, the operation count) but
// the routing header, which a data-path response carries in its own
// header.
func (s *Service) dataHandler(interceptors ...grpc.UnaryServerInterceptor) grpc.UnaryHandler {
	h := func(ctx context.Context, req any) (any, error) {
		switch req := req.(type) {
		case *tyrpb.FsFetchRequest:
			return s.FsFetch(ctx, req)
		case *tyrpb.CommitRequest:
			return s.Commit(ctx, req)
		}
		return s.Read(ctx, req.(*tyrpb.ReadRequest))
	}
	for i := len(interceptors) - 1; i >= 0; i-- {
		ic, next := interceptors[i], h
		h = func(ctx context.Context, req any) (any, error) {
			info := readInfo
			switch req.(type) {
			case *tyrpb.FsFetchRequest:
				info = fetchInfo
			case *tyrpb.CommitRequest:
				info = commitInfo
			}
			return ic(ctx, req, info, next)
		}
	}
	return h
}

// The methods the data path's requests are counted as.
var (
	readInfo   = &grpc.UnaryServerInfo{FullMethod: tyrpb.Tyr_Read_FullMethodName}
	fetchInfo  = &grpc.UnaryServerInfo{FullMethod: tyrpb.Tyr_FsFetch_FullMethodName}
	commitInfo = &grpc.UnaryServerInfo{FullMethod: tyrpb.Tyr_Commit_FullMethodName}
)

// trailerSink takes the place of a gRPC stream in a data-path commit's
// context, so that the Commit handler's trailer (the refusal mark, see
// refusedTrailer) reaches the data-path answer.
type trailerSink struct{ trailer metadata.MD }

func (t *trailerSink) Method() string               { return tyrpb.Tyr_Commit_FullMethodName }
func (t *trailerSink) SetHeader(metadata.MD) error  { return nil }
func (t *trailerSink) SendHeader(metadata.MD) error { return nil }
func (t *trailerSink) SetTrailer(md metadata.MD) error {
	t.trailer = metadata.Join(t.trailer, md)
	return nil
}

// dataCall decodes a data-path request into its gRPC request, calls its
// handler, and returns the answer's header (but its routing IDs) and
// tail: the data, the encoded commit response, or the error message.
func (s *Service) dataCall(ctx context.Context, req frame.Read) (frame.Header, []byte) {
	var (
		in   any
		sink *trailerSink
	)
	switch req.Kind {
	case frame.KindCommit:
		c := &tyrpb.CommitRequest{}
		if err := proto.Unmarshal(req.Message, c); err != nil {
			return errorAnswer(status.Error(codes.InvalidArgument, fmt.Sprintf("commit request does not decode: %v", err)))
		}
		in, sink = c, &trailerSink{}
		ctx = grpc.NewContextWithServerTransportStream(ctx, sink)
	case frame.KindFsFetch:
		in = &tyrpb.FsFetchRequest{Keyspace: []byte(req.Keyspace), Path: []byte(req.Key), Length: req.Length,
			Uid: req.UID, Gids: req.GIDs}
	default:
		in = &tyrpb.ReadRequest{
			Keyspace: []byte(req.Keyspace), Key: []byte(req.Key), Offset: req.Offset, Length: req.Length,
			Version: req.Version, Consistent: req.Flags&frame.FlagConsistent != 0, Use: req.Flags&frame.FlagUse != 0}
	}
	out, err := s.dataRead(ctx, in)
	if sink != nil {
		s.metrics.dataCommits.Inc()
	} else {
		s.metrics.dataReads.Inc()
	}
	if err != nil {
		h, tail := errorAnswer(err)
		if sink != nil && len(sink.trailer.Get(errs.RefusedTrailer)) > 0 {
			h.Flags |= frame.FlagRefused
		}
		return h, tail
	}
	switch resp := out.(type) {
	case *tyrpb.CommitResponse:
		b, err := proto.Marshal(resp)
		if err != nil {
			return errorAnswer(status.Error(codes.Internal, err.Error()))
		}
		return frame.Header{}, b
	case *tyrpb.FsFetchResponse:
		h := frame.Header{Size: resp.GetSize(), Version: resp.GetVersion()}
		if e := resp.GetErrno(); e != 0 {
			h.Flags |= frame.FlagErrno
			h.Size = uint64(e)
		}
		return h, resp.GetData()
	}
	resp := out.(*tyrpb.ReadResponse)
	return frame.Header{Size: resp.GetSize(), Version: resp.GetVersion()}, resp.GetData()
}

// errorAnswer is the header and message of a failed request.
func errorAnswer(err error) (frame.Header, []byte) {
	st := status.Convert(err)
	tail := []byte(st.Message())
	if len(tail) > frame.MessageBytesMax {
		tail = tail[:frame.MessageBytesMax]
	}
	return frame.Header{Code: uint8(st.Code())}, tail
}

// serveData answers the requests of one data connection, whose magic was
// read, until it closes or sends a frame that does not decode.
func (s *Service) serveData(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReaderSize(conn, 4<<10)
	var prefix [frame.LenBytes]byte
	body := make([]byte, frame.RequestBytesMax)
	var (
		heads        []byte // the held answers' headers, back to back
		pending      [][]byte
		pendingBytes int
		reads        [][]byte // the held answers' read results, given back to bufpool once written
		views        = readViews{engine: s.engine, budget: -1}
	)
	defer views.close()
	for {
		if _, err := io.ReadFull(r, prefix[:]); err != nil {
			return
		}
		n, err := frame.RequestLen(prefix[:])
		if err != nil {
			s.log.Debug("data path: bad request", "remote", conn.RemoteAddr().String(), "err", err)
			return
		}
		buf := body
		if n > len(buf) {
			buf = make([]byte, n) // a commit; reads fit body
		}
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return
		}
		views.spend(frame.LenBytes + n)
		req, err := frame.DecodeRequest(buf[:n])
		if err != nil {
			s.log.Debug("data path: bad request", "remote", conn.RemoteAddr().String(), "err", err)
			return
		}
		var (
			h    frame.Header
			tail []byte
		)
		if req.Kind == frame.KindHello {
			h.Size = frame.FeatureCommits
		} else {
			ctx := context.Background()
			if req.Kind == frame.KindCommit {
				// A read after it on the connection sees it.
				views.close()
			} else {
				ctx = withReadViews(ctx, &views, r.Buffered())
			}
			h, tail = s.dataCall(ctx, req)
			if req.Kind != frame.KindCommit && h.Code == uint8(codes.OK) {
				reads = append(reads, tail)
			}
		}
		if ids := s.currentRouting(); ids != nil {
			h.Flags, h.RingID, h.MembersID = h.Flags|frame.FlagRouting, ids.ringID, ids.membersID
		}
		// The answers of pipelined requests go out together: they wait
		// while more requests are already buffered, up to
		// pipelineFlushBytes and pipelineFlushBuffers, then leave in one
		// vectored write that copies no payload.
		at := len(heads)
		heads = frame.AppendResponse(heads, h, len(tail))
		pending = append(pending, heads[at:len(heads):len(heads)], tail)
		pendingBytes += len(heads) - at + len(tail)
		if pendingBytes < pipelineFlushBytes && len(pending) < pipelineFlushBuffers && nextBuffered(r) {
			continue
		}
		views.close()
		bufs := net.Buffers(pending)
		_, err = bufs.WriteTo(conn)
		// A read's result is this answer's alone (it was read for it,
		// into a buffer no one else holds), and has left.
		for _, b := range reads {
			bufpool.Put(b)
		}
		clear(pending)
		clear(reads)
		pending, heads, pendingBytes, reads = pending[:0], heads[:0], 0, reads[:0]
		if err != nil {
			return
		}
	}
}

// nextBuffered reports whether the whole of the next request is already
// in r's buffer, so that reading it cannot block.
func nextBuffered(r *bufio.Reader) bool {
	if r.Buffered() < frame.LenBytes {
		return false
	}
	prefix, _ := r.Peek(frame.LenBytes)
	n, err := frame.RequestLen(prefix)
	return err == nil && r.Buffered() >= frame.LenBytes+n
}

// Bounds on the answers a data connection holds back while pipelined
// requests are waiting: their bytes and their buffers (two an answer; a
// vectored write takes at most 1,024).
const (
	pipelineFlushBytes   = 1 << 20
	pipelineFlushBuffers = 128
)
