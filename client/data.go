package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/frame"
)

// The data path: reads and commits travel as binary frames over plain TCP
// to the server's gRPC port (internal/frame), on connections kept open
// between requests. A read's bytes are read straight into the result,
// never decoded from a message; a commit is its gRPC message without
// HTTP/2. Every other call, and a request the data path could not deliver
// (a node that is unreachable, or one without the data path), goes over
// gRPC, so that the answer is the same either way.

// Data-path limits.
const (
	// dataIdleMax is how many idle data connections the client keeps to
	// one address; a burst of concurrent reads opens more, then closes
	// the excess.
	dataIdleMax = 64
	// dataReadBuffer is the read buffer of a data connection: small
	// answers arrive several to a system call.
	dataReadBuffer = 32 << 10
	// dataDirectMin is the least of an answer's bytes read from the
	// socket straight into the result rather than through the read
	// buffer and a copy; after an answer of that size the next answer's
	// header is read alone too, so that the buffer does not take in (and
	// copy) the bytes of the next answer.
	dataDirectMin = 8 << 10
	// dataRetryAfter is how long reads of an address go over gRPC after a
	// new data connection to it broke before its first answer: a server
	// without the data path closes it so.
	dataRetryAfter = 30 * time.Second
)

// dataPath keeps the idle data connections of a client, by address.
type dataPath struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)

	mu     sync.Mutex
	idle   map[string][]*dataConn
	grpcAt map[string]time.Time // address -> until when reads go over gRPC
	closed bool
}

type dataConn struct {
	net.Conn
	r        *bufio.Reader
	out      []byte
	deadline time.Time
	broken   bool // a cancellation may still wake it: not reused
	// commits: its server answered a hello with frame.FeatureCommits.
	commits bool
	// large: its last answer held at least dataDirectMin bytes.
	large bool
}

func newDataPath(dial func(ctx context.Context, addr string) (net.Conn, error)) *dataPath {
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	return &dataPath{dial: dial, idle: map[string][]*dataConn{}, grpcAt: map[string]time.Time{}}
}

// get returns an idle connection to addr (reused true), or a new one.
func (d *dataPath) get(ctx context.Context, addr string) (*dataConn, bool, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, false, errors.New("tyr: client closed")
	}
	if until, ok := d.grpcAt[addr]; ok {
		if time.Now().Before(until) {
			d.mu.Unlock()
			return nil, false, errNoDataPath
		}
		delete(d.grpcAt, addr)
	}
	if idle := d.idle[addr]; len(idle) > 0 {
		c := idle[len(idle)-1]
		d.idle[addr] = idle[:len(idle)-1]
		d.mu.Unlock()
		return c, true, nil
	}
	d.mu.Unlock()
	conn, err := d.dial(ctx, addr)
	if err != nil {
		return nil, false, err
	}
	c := &dataConn{Conn: conn, r: bufio.NewReaderSize(conn, dataReadBuffer)}
	c.out = append(c.out, frame.Magic[:]...)
	return c, false, nil
}

// put keeps c for the next read of addr, or closes it.
func (d *dataPath) put(addr string, c *dataConn) {
	d.mu.Lock()
	if !d.closed && len(d.idle[addr]) < dataIdleMax {
		d.idle[addr] = append(d.idle[addr], c)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	_ = c.Close()
}

func (d *dataPath) close() {
	d.mu.Lock()
	d.closed = true
	idle := d.idle
	d.idle = nil
	d.mu.Unlock()
	for _, conns := range idle {
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

// read sends req to addr and returns its answer, with the header of the
// answering node (its routing IDs). Its errors are gRPC status errors, as
// the gRPC path's are: UNAVAILABLE when addr could not be reached or the
// connection broke; but errNoDataPath when reads of addr go over gRPC for
// now.
func (d *dataPath) read(ctx context.Context, addr string, req *tyrpb.ReadRequest) (*tyrpb.ReadResponse, frame.Header, error) {
	r := frame.Read{Keyspace: string(req.GetKeyspace()), Key: string(req.GetKey()), Offset: req.GetOffset(),
		Length: req.GetLength(), Version: req.GetVersion()}
	if req.GetConsistent() {
		r.Flags |= frame.FlagConsistent
	}
	if req.GetUse() {
		r.Flags |= frame.FlagUse
	}
	return lone(d.send(ctx, addr, []frame.Read{r}, nil))
}

// fetch sends a TýrFS fetch to addr as read does a read; a refusal
// comes back as the response's errno.
func (d *dataPath) fetch(ctx context.Context, addr string, req *tyrpb.FsFetchRequest, into []byte) (*tyrpb.FsFetchResponse, frame.Header, error) {
	resp, h, err := lone(d.send(ctx, addr, []frame.Read{fetchFrame(req)}, [][]byte{into}))
	if err != nil {
		return nil, h, err
	}
	return fetchAnswer(resp, h), h, nil
}

// lone is the answer of a request sent alone.
func lone(out []answered, err error) (*tyrpb.ReadResponse, frame.Header, error) {
	if err != nil {
		return nil, frame.Header{}, err
	}
	return out[0].resp, out[0].h, out[0].err
}

// fetchMany sends the TýrFS fetches reqs to addr on one connection,
// pipelined, and returns their answers, as send does, each read into
// into[i] when it fits (into may be nil).
func (d *dataPath) fetchMany(ctx context.Context, addr string, reqs []*tyrpb.FsFetchRequest, into [][]byte) ([]answered, error) {
	rs := make([]frame.Read, len(reqs))
	for i, req := range reqs {
		rs[i] = fetchFrame(req)
	}
	return d.send(ctx, addr, rs, into)
}

// fetchFrame is the data-path request of a TýrFS fetch.
func fetchFrame(req *tyrpb.FsFetchRequest) frame.Read {
	return frame.Read{Kind: frame.KindFsFetch, Keyspace: string(req.GetKeyspace()),
		Key: string(req.GetPath()), Length: req.GetLength(), UID: req.GetUid(), GIDs: req.GetGids()}
}

// fetchAnswer is a fetch's answer, from its data-path answer: a refusal
// comes back as the errno.
func fetchAnswer(resp *tyrpb.ReadResponse, h frame.Header) *tyrpb.FsFetchResponse {
	if h.Flags&frame.FlagErrno != 0 {
		return &tyrpb.FsFetchResponse{Errno: uint32(h.Size)}
	}
	return &tyrpb.FsFetchResponse{Data: resp.GetData(), Size: resp.GetSize(), Version: resp.GetVersion()}
}

// send sends the requests rs to addr on one connection and returns their
// answers, in order (see exchange), the answer to rs[i] read into into[i]
// when it fits (into may be nil or shorter than rs). A transport failure
// ends them early and is returned as err, as errNoDataPath is.
func (d *dataPath) send(ctx context.Context, addr string, rs []frame.Read, into [][]byte) ([]answered, error) {
	for _, r := range rs {
		if err := frame.CheckRead(r); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		c, reused, err := d.get(ctx, addr)
		if errors.Is(err, errNoDataPath) {
			return nil, err
		}
		if err != nil {
			return nil, transportError(ctx, addr, err)
		}
		out, err := c.exchange(ctx, rs, into)
		// An idle connection may have been closed by its server
		// meanwhile: reads change nothing, so unanswered ones are sent
		// again, once, anew.
		if errors.As(err, new(transportErr)) && reused && attempt == 0 && len(out) == 0 && ctx.Err() == nil {
			_ = c.Close()
			continue
		}
		if err := d.fail(ctx, addr, c, reused, err); err != nil {
			return out, err
		}
		d.keep(addr, c)
		return out, nil
	}
}

// useGRPC sends addr's requests over gRPC for dataRetryAfter: a new data
// connection to it broke before its first answer, as a server without the
// data path breaks it.
func (d *dataPath) useGRPC(addr string) {
	d.mu.Lock()
	d.grpcAt[addr] = time.Now().Add(dataRetryAfter)
	d.mu.Unlock()
}

// commit sends the commit req to addr and returns its answer, with the
// header of the answering node, as read does. sent is false when the
// commit certainly did not leave: errNoDataPath, no connection to addr
// could be had, or the commit is larger than a frame; it may then go
// over gRPC. A commit is never sent again: a connection that breaks after
// it was written leaves its outcome unknown (UNAVAILABLE), for the caller
// to resolve. So it is not written on an idle connection that its server
// already closed (alive), which a server that restarted leaves behind.
func (d *dataPath) commit(ctx context.Context, addr string, req *tyrpb.CommitRequest) (resp *tyrpb.CommitResponse, h frame.Header, sent bool, err error) {
	msg, err := proto.Marshal(req)
	if err != nil || len(msg) >= frame.CommitBytesMax {
		return nil, h, false, errNoDataPath
	}
	var (
		c      *dataConn
		reused bool
	)
	for {
		if ctx.Err() != nil {
			return nil, h, false, status.FromContextError(ctx.Err()).Err()
		}
		c, reused, err = d.get(ctx, addr)
		if errors.Is(err, errNoDataPath) {
			return nil, h, false, err
		}
		if err != nil {
			return nil, h, false, transportError(ctx, addr, err)
		}
		if !reused || c.alive() {
			break
		}
		_ = c.Close()
	}
	if !c.commits {
		// Ask first: a server that does not take commits may close the
		// connection on one.
		out, err := c.exchange(ctx, []frame.Read{{Kind: frame.KindHello}}, nil)
		if err := d.fail(ctx, addr, c, reused, err); err != nil {
			return nil, h, false, err
		}
		if out[0].err != nil || out[0].h.Size&frame.FeatureCommits == 0 {
			d.keep(addr, c)
			return nil, h, false, errNoDataPath
		}
		c.commits = true
	}
	out, err := c.exchange(ctx, []frame.Read{{Kind: frame.KindCommit, Message: msg}}, nil)
	if err := d.fail(ctx, addr, c, reused, err); err != nil {
		return nil, h, true, err
	}
	d.keep(addr, c)
	a := out[0]
	if a.err != nil {
		return nil, a.h, true, a.err
	}
	resp = &tyrpb.CommitResponse{}
	if err := proto.Unmarshal(a.resp.GetData(), resp); err != nil {
		return nil, a.h, true, status.Error(codes.DataLoss, fmt.Sprintf("data path to %s: commit answer does not decode: %v", addr, err))
	}
	return resp, a.h, true, nil
}

// fail closes c, a connection to addr, if err is a failure of the
// connection itself, and returns the error to give for it (see send); nil
// otherwise.
func (d *dataPath) fail(ctx context.Context, addr string, c *dataConn, reused bool, err error) error {
	var netErr transportErr
	if !errors.As(err, &netErr) {
		return nil
	}
	_ = c.Close()
	if !reused && netErr.answerless && ctx.Err() == nil {
		d.useGRPC(addr)
	}
	return transportError(ctx, addr, netErr.err)
}

// keep keeps c for the next request to addr, or closes it if a
// cancellation may still wake it.
func (d *dataPath) keep(addr string, c *dataConn) {
	if c.broken {
		_ = c.Close()
	} else {
		d.put(addr, c)
	}
}

// errNoDataPath: requests to the address go over gRPC for now.
var errNoDataPath = errors.New("the data path is off for this address")

// transportErr is a failure of the connection itself; answerless when it
// broke after the request was sent and before any answer arrived.
type transportErr struct {
	err        error
	answerless bool
}

func (e transportErr) Error() string { return e.err.Error() }

func transportError(ctx context.Context, addr string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("data path to %s: %v", addr, err))
}

// longAgo is a deadline in the past, which wakes a blocked read or write.
var longAgo = time.Unix(1, 0)

// watch sets c's deadline from ctx and wakes c's blocked reads and writes
// when ctx ends; the function it returns stops the watch.
func (c *dataConn) watch(ctx context.Context) (func(), error) {
	deadline, _ := ctx.Deadline()
	if !deadline.Equal(c.deadline) {
		if err := c.SetDeadline(deadline); err != nil {
			return nil, err
		}
		c.deadline = deadline
	}
	if ctx.Done() == nil {
		return func() {}, nil
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(longAgo) })
	return func() {
		if !stop() {
			// The wake-up may land on a later read: retire the
			// connection.
			c.broken = true
		}
	}, nil
}

// answer reads one answer from c, its bytes into buf's memory when they
// fit there.
func (c *dataConn) answer(buf []byte) (*tyrpb.ReadResponse, frame.Header, error) {
	var head [frame.LenBytes + frame.HeaderBytes]byte
	var from io.Reader = c.r
	if c.large && c.r.Buffered() == 0 {
		from = c.Conn
	}
	if n, err := io.ReadFull(from, head[:]); err != nil {
		return nil, frame.Header{}, transportErr{err: err, answerless: n == 0}
	}
	h, n, err := frame.DecodeHeader(head[:])
	if err != nil {
		return nil, frame.Header{}, transportErr{err: err}
	}
	tail := buf[:0]
	if cap(tail) >= n {
		tail = tail[:n]
	} else {
		tail = make([]byte, n)
	}
	// What the buffer holds of the answer, then the rest.
	held := min(c.r.Buffered(), n)
	if _, err := io.ReadFull(c.r, tail[:held]); err != nil {
		return nil, frame.Header{}, transportErr{err: err}
	}
	from = c.r
	if n-held >= dataDirectMin {
		from = c.Conn
	}
	if _, err := io.ReadFull(from, tail[held:]); err != nil {
		return nil, frame.Header{}, transportErr{err: err}
	}
	c.large = n >= dataDirectMin
	if h.Code != uint8(codes.OK) {
		return nil, h, status.Error(codes.Code(h.Code), string(tail))
	}
	return &tyrpb.ReadResponse{Data: tail, Size: h.Size, Version: h.Version}, h, nil
}

// answered is one pipelined request's answer: resp or err, with the
// answer's header.
type answered struct {
	resp *tyrpb.ReadResponse
	h    frame.Header
	err  error
}

// exchange writes the requests rs and reads their answers, which the
// server gives in order. A lone request is written, then answered;
// several are pipelined: a writer of their own sends them while the
// answers are read, so that neither side blocks on a full socket buffer.
// A transport error ends it, is returned, and leaves the later requests
// unanswered. The answer to rs[i] is read into into[i] when it fits.
func (c *dataConn) exchange(ctx context.Context, rs []frame.Read, into [][]byte) ([]answered, error) {
	stop, err := c.watch(ctx)
	if err != nil {
		return nil, transportErr{err: err}
	}
	defer stop()
	for _, r := range rs {
		c.out = frame.AppendRequest(c.out, r)
	}
	var wrote chan error
	if len(rs) == 1 {
		_, err := c.Write(c.out)
		c.out = c.out[:0]
		if err != nil {
			return nil, transportErr{err: err}
		}
	} else {
		wrote = make(chan error, 1)
		go func() {
			_, err := c.Write(c.out)
			wrote <- err
		}()
	}
	out := make([]answered, 0, len(rs))
	var broke error
	for i := range rs {
		var buf []byte
		if i < len(into) {
			buf = into[i]
		}
		resp, h, err := c.answer(buf)
		var netErr transportErr
		if errors.As(err, &netErr) {
			netErr.answerless = netErr.answerless && len(out) == 0
			broke = netErr
			_ = c.SetDeadline(longAgo) // ends the writer too
			break
		}
		out = append(out, answered{resp, h, err})
	}
	if wrote != nil {
		if err := <-wrote; err != nil && broke == nil {
			broke = transportErr{err: err}
		}
		c.out = c.out[:0]
	}
	return out, broke
}
