package server_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/frame"
	"github.com/tyrstore/tyr/internal/server"
	"github.com/tyrstore/tyr/internal/storage"
)

// dataServer starts a single server on loopback, gRPC and the data path on
// one port, and returns its address, its metrics, a client of it and a
// context for the test's calls.
func dataServer(t *testing.T) (string, *server.Metrics, *client.Client, context.Context) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := storage.Open(storage.Options{Dir: t.TempDir(), CacheBytes: 8 << 20, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	metrics := server.NewMetrics()
	svc := server.NewService(engine, log)
	g := svc.Register(metrics)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(svc.Listen(lis)) }()
	t.Cleanup(func() {
		g.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if err := engine.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	c, err := client.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return lis.Addr().String(), metrics, c, ctx
}

// dataReads returns tyr_data_path_reads_total.
func dataReads(t *testing.T, m *server.Metrics) float64 {
	return counter(t, m, "tyr_data_path_reads_total")
}

// counter returns the value of the unlabelled counter name.
func counter(t *testing.T, m *server.Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// Reads travel over the data path and answer as over gRPC: the bytes, a
// part of the bytes, the errors by class; a large read in parts at one
// version; calls of gRPC on the same port go on; a client without the data
// path reads the same over gRPC.
func TestDataPathReads(t *testing.T) {
	addr, metrics, c, ctx := dataServer(t)
	if _, err := c.CreateKeyspace(ctx, "data", client.KeyspaceConfig{ChunkSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), (client.PayloadBytesMax+client.PayloadBytesMax/2)/16)
	if _, err := c.WriteCreate(ctx, "data", "big", 0, big); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteCreate(ctx, "data", "small", 0, []byte("hello, data path")); err != nil {
		t.Fatal(err)
	}

	before := dataReads(t, metrics)
	got, info, err := c.ReadPart(ctx, "data", "small", 7, 100)
	if err != nil || string(got) != "data path" || info.Size != 16 || info.Version == 0 {
		t.Fatalf("read %q, %+v, %v; want %q at size 16", got, info, err, "data path")
	}
	if got, err := c.Read(ctx, "data", "big", 0, uint64(len(big))); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("large read: %d bytes, %v; want the %d written", len(got), err, len(big))
	}
	if got, err := c.Read(ctx, "data", "small", 16, 10); err != nil || len(got) != 0 {
		t.Errorf("read at the end: %q, %v; want nothing", got, err)
	}
	if _, err := c.Read(ctx, "data", "missing", 0, 1); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("read of a missing blob: %v, want ErrNotFound", err)
	}
	if _, _, err := c.ReadPart(ctx, "data", "small", 0, client.PayloadBytesMax+1); !errors.Is(err, client.ErrTooLarge) {
		t.Errorf("read above the payload limit: %v, want ErrTooLarge", err)
	}
	if _, err := c.Read(ctx, "data", strings.Repeat("k", client.KeyBytesMax+1), 0, 1); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("read of a key above the limit: %v, want ErrInvalidArgument", err)
	}
	if _, err := c.Read(ctx, "no-such-keyspace", "k", 0, 1); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("read in a missing keyspace: %v, want ErrNotFound", err)
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if _, err := c.Read(done, "data", "small", 0, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("read with a cancelled context: %v, want context.Canceled", err)
	}
	// 1 small + 2 parts of big + the end + missing + too large + missing
	// keyspace; the long key is refused by the client.
	if n := dataReads(t, metrics) - before; n != 7 {
		t.Errorf("%v reads over the data path, want 7", n)
	}

	plain, err := client.Dial(addr, client.WithoutDataPath())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	before = dataReads(t, metrics)
	if got, err := plain.Read(ctx, "data", "small", 0, 5); err != nil || string(got) != "hello" {
		t.Fatalf("read over gRPC: %q, %v", got, err)
	}
	if n := dataReads(t, metrics) - before; n != 0 {
		t.Errorf("a client without the data path made %v data-path reads", n)
	}
}

// A frame that breaks the protocol ends its connection and nothing else:
// the server goes on serving both paths.
func TestDataPathBadFrames(t *testing.T) {
	addr, _, c, ctx := dataServer(t)
	if _, err := c.CreateKeyspace(ctx, "default", client.DefaultKeyspaceConfig()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteCreate(ctx, "default", "k", 0, []byte("v")); err != nil {
		t.Fatal(err)
	}
	valid := frame.AppendRead(nil, frame.Read{Keyspace: "default", Key: "k", Length: 1})
	// framed gives body a length prefix.
	framed := func(body []byte) []byte {
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	flags := bytes.Clone(valid[frame.LenBytes:])
	flags[1] = 0x80
	for name, b := range map[string][]byte{
		"empty request":   framed(nil),
		"over the limit":  binary.LittleEndian.AppendUint32(nil, frame.CommitBytesMax+1),
		"a long read":     framed(append(bytes.Clone(valid[frame.LenBytes:]), make([]byte, frame.RequestBytesMax)...)),
		"unknown kind":    framed([]byte{9}),
		"unknown flags":   framed(flags),
		"key cut short":   framed(valid[frame.LenBytes : len(valid)-1]),
		"fixed part only": framed(make([]byte, 10)),
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write(append(frame.Magic[:], b...)); err != nil {
			t.Fatal(err)
		}
		if n, err := conn.Read(make([]byte, 64)); err == nil {
			t.Errorf("%s: %d bytes answered, want the connection closed", name, n)
		}
		_ = conn.Close()
	}
	if got, err := c.Read(ctx, "default", "k", 0, 1); err != nil || string(got) != "v" {
		t.Fatalf("read after bad frames: %q, %v", got, err)
	}
	if _, err := c.Stat(ctx, "default", "k"); err != nil {
		t.Fatalf("stat over gRPC after bad frames: %v", err)
	}
}

// Pipelined requests, sent in one write before any answer is read, are
// answered in order, each as alone: more of them than one flush holds,
// errors among them, and a large answer that flushes the held ones.
func TestDataPathPipelined(t *testing.T) {
	addr, _, c, ctx := dataServer(t)
	if _, err := c.CreateKeyspace(ctx, "data", client.DefaultKeyspaceConfig()); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("pipe"), (3<<20)/4)
	if _, err := c.WriteCreate(ctx, "data", "big", 0, big); err != nil {
		t.Fatal(err)
	}
	type want struct {
		code byte
		data []byte
	}
	var out []byte
	var wants []want
	for i := range 300 {
		key, w := fmt.Sprintf("k%d", i), want{}
		switch {
		case i%7 == 3:
			key, w.code = fmt.Sprintf("missing%d", i), 5 // NOT_FOUND
		case i == 150:
			key, w.data = "big", big
		default:
			w.data = []byte(key)
			if _, err := c.WriteCreate(ctx, "data", key, 0, w.data); err != nil {
				t.Fatal(err)
			}
		}
		out = frame.AppendRead(out, frame.Read{Keyspace: "data", Key: key, Length: uint64(len(big))})
		wants = append(wants, w)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	go func() { _, _ = conn.Write(append(frame.Magic[:], out...)) }()
	r := bufio.NewReader(conn)
	for i, w := range wants {
		head := make([]byte, frame.LenBytes+frame.HeaderBytes)
		if _, err := io.ReadFull(r, head); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		h, n, err := frame.DecodeHeader(head)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		tail := make([]byte, n)
		if _, err := io.ReadFull(r, tail); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if h.Code != w.code || (w.code == 0 && !bytes.Equal(tail, w.data)) {
			t.Fatalf("answer %d: code %d, %d bytes; want code %d, %d bytes", i, h.Code, len(tail), w.code, len(w.data))
		}
	}
}

// A data-path read's result comes from bufpool and goes back once the
// answer is written, so later reads get buffers holding earlier answers'
// bytes: each answer still holds exactly its blob's bytes, and a sparse
// blob's hole reads as zeros, not as what the buffer held before.
func TestDataPathReusedBuffers(t *testing.T) {
	_, metrics, c, ctx := dataServer(t)
	if _, err := c.CreateKeyspace(ctx, "data", client.DefaultKeyspaceConfig()); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	var keys []string
	for i := range 6 {
		key := fmt.Sprintf("dense%d", i)
		// Of bufpool's class of the sparse blob's length.
		want[key] = bytes.Repeat([]byte{byte(0xa0 + i)}, 100<<10+4+i*1000)
		keys = append(keys, key, "sparse")
	}
	for key, data := range want {
		if _, err := c.WriteCreate(ctx, "data", key, 0, data); err != nil {
			t.Fatal(err)
		}
	}
	// 100 KiB of hole, then 4 bytes.
	want["sparse"] = append(make([]byte, 100<<10), "tail"...)
	if _, err := c.WriteCreate(ctx, "data", "sparse", 100<<10, []byte("tail")); err != nil {
		t.Fatal(err)
	}
	before := dataReads(t, metrics)
	for round := range 4 {
		for _, key := range keys {
			got, err := c.Read(ctx, "data", key, 0, 1<<20)
			if err != nil {
				t.Fatalf("round %d: read %s: %v", round, key, err)
			}
			if !bytes.Equal(got, want[key]) {
				t.Fatalf("round %d: read %s: %d bytes, not the %d written", round, key, len(got), len(want[key]))
			}
		}
	}
	if n := dataReads(t, metrics) - before; n < float64(4*len(keys)) {
		t.Fatalf("%v reads went over the data path, want %d", n, 4*len(keys))
	}
}

// Commits travel over the data path and answer as over gRPC: results, the
// errors by class, a certain refusal marked as one, a transaction's read
// checks; a commit message that does not decode is answered with an
// error, not a closed connection; a client without the data path commits
// over gRPC.
func TestDataPathCommits(t *testing.T) {
	addr, metrics, c, ctx := dataServer(t)
	if _, err := c.CreateKeyspace(ctx, "data", client.DefaultKeyspaceConfig()); err != nil {
		t.Fatal(err)
	}
	commits := func() float64 { return counter(t, metrics, "tyr_data_path_commits_total") }
	before := commits()
	r, err := c.Commit(ctx, "data", client.CreateOp("a"), client.WriteOp("a", 0, []byte("hello"), false),
		client.AppendOp("a", []byte(", world"), false))
	if err != nil || len(r) != 3 || r[2].Offset != 5 || r[2].Size != 12 || r[2].Version == 0 {
		t.Fatalf("commit: %+v, %v; want the append at 5, size 12", r, err)
	}
	if got, err := c.Read(ctx, "data", "a", 0, 100); err != nil || string(got) != "hello, world" {
		t.Fatalf("read back %q, %v", got, err)
	}
	_, err = c.Commit(ctx, "data", client.CreateOp("a"))
	if !errors.Is(err, client.ErrExists) || !client.Refused(err) {
		t.Errorf("create of an existing blob: %v (refused %v), want ErrExists, refused", err, client.Refused(err))
	}
	if _, err := c.CommitIf(ctx, "data", []client.Check{{Key: "a", Version: r[2].Version - 1}}, client.WriteOp("a", 0, []byte("H"), false)); !errors.Is(err, client.ErrConflict) {
		t.Errorf("commit with a stale check: %v, want ErrConflict", err)
	}
	if _, err := c.CommitIf(ctx, "data", []client.Check{{Key: "a", Version: r[2].Version}}, client.WriteOp("a", 0, []byte("H"), false)); err != nil {
		t.Errorf("commit with a current check: %v", err)
	}
	if _, err := c.Commit(ctx, "no-such-keyspace", client.CreateOp("a")); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("commit in a missing keyspace: %v, want ErrNotFound", err)
	}
	// 1 commit, the create, two CommitIfs, the missing keyspace.
	if n := commits() - before; n != 5 {
		t.Errorf("%v commits over the data path, want 5", n)
	}

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	bad := frame.AppendCommit(nil, []byte{0xff, 0xff, 0xff})
	if _, err := conn.Write(append(append(frame.Magic[:], bad...), frame.AppendRead(nil, frame.Read{Keyspace: "data", Key: "a", Length: 1})...)); err != nil {
		t.Fatal(err)
	}
	r2 := bufio.NewReader(conn)
	for i, want := range []byte{3, 0} { // INVALID_ARGUMENT, then the read on the same connection
		head := make([]byte, frame.LenBytes+frame.HeaderBytes)
		if _, err := io.ReadFull(r2, head); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		h, n, err := frame.DecodeHeader(head)
		if err != nil || h.Code != want {
			t.Fatalf("answer %d: code %d, %v; want %d", i, h.Code, err, want)
		}
		if _, err := io.ReadFull(r2, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
	}

	plain, err := client.Dial(addr, client.WithoutDataPath())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	before = commits()
	if _, err := plain.Commit(ctx, "data", client.WriteOp("a", 0, []byte("h"), false)); err != nil {
		t.Fatalf("commit over gRPC: %v", err)
	}
	if _, err := plain.Commit(ctx, "data", client.CreateOp("a")); !errors.Is(err, client.ErrExists) || !client.Refused(err) {
		t.Errorf("create of an existing blob over gRPC: %v, want ErrExists, refused", err)
	}
	if n := commits() - before; n != 0 {
		t.Errorf("a client without the data path made %v data-path commits", n)
	}
}

// A server that restarts closes the client's idle data connections. A
// commit is not sent on one of those (it could not be told from a commit
// lost after it arrived, and would fail or need resolving): the commits
// after the restart, as many as there were idle connections, all go
// through at once, over the data path.
func TestDataPathCommitAfterRestart(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	var addr string
	start := func() (*server.Metrics, func()) {
		engine, err := storage.Open(storage.Options{Dir: dir, CacheBytes: 8 << 20, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		metrics := server.NewMetrics()
		svc := server.NewService(engine, log)
		g := svc.Register(metrics)
		lis, err := net.Listen("tcp", cmp.Or(addr, "127.0.0.1:0"))
		if err != nil {
			t.Fatal(err)
		}
		addr = lis.Addr().String()
		served := make(chan error, 1)
		go func() { served <- g.Serve(svc.Listen(lis)) }()
		return metrics, func() {
			g.Stop()
			if err := <-served; err != nil {
				t.Errorf("serve: %v", err)
			}
			if err := engine.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	_, stop := start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateKeyspace(ctx, "data", client.DefaultKeyspaceConfig()); err != nil {
		t.Fatal(err)
	}
	const n = 8
	commitAll := func(round int) {
		t.Helper()
		errc := make(chan error, n)
		for i := range n {
			go func() {
				_, err := c.WriteCreate(ctx, "data", fmt.Sprintf("k%d", i), 0, []byte{byte(round)})
				errc <- err
			}()
		}
		for range n {
			if err := <-errc; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	commitAll(1)
	stop()
	metrics, stop := start()
	defer stop()
	commitAll(2)
	if got := counter(t, metrics, "tyr_data_path_commits_total"); got != n {
		t.Errorf("%v commits over the data path after the restart, want %d", got, n)
	}
	for i := range n {
		if got, err := c.Read(ctx, "data", fmt.Sprintf("k%d", i), 0, 1); err != nil || !bytes.Equal(got, []byte{2}) {
			t.Errorf("k%d: %v, %v; want the second round's byte", i, got, err)
		}
	}
}

// Pipelined reads share a view of the store (readViews), but not across a
// commit: a read pipelined after a commit on the same connection sees it,
// and the read before it does not.
func TestDataPathReadAfterCommitPipelined(t *testing.T) {
	addr, _, c, ctx := dataServer(t)
	if _, err := c.CreateKeyspace(ctx, "data", client.DefaultKeyspaceConfig()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteCreate(ctx, "data", "a", 0, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	commit, err := proto.Marshal(&tyrpb.CommitRequest{Keyspace: []byte("data"), Ops: []*tyrpb.Op{
		{Key: []byte("a"), Kind: &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Data: []byte("v2")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	read := frame.AppendRead(nil, frame.Read{Keyspace: "data", Key: "a", Length: 2})
	out := slices.Concat(frame.Magic[:], read, read, frame.AppendCommit(nil, commit), read, read)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	for i, want := range []string{"v1", "v1", "", "v2", "v2"} {
		head := make([]byte, frame.LenBytes+frame.HeaderBytes)
		if _, err := io.ReadFull(r, head); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		h, n, err := frame.DecodeHeader(head)
		if err != nil || h.Code != 0 {
			t.Fatalf("answer %d: code %d, %v", i, h.Code, err)
		}
		tail := make([]byte, n)
		if _, err := io.ReadFull(r, tail); err != nil {
			t.Fatal(err)
		}
		if want != "" && string(tail) != want {
			t.Errorf("answer %d: %q, want %q", i, tail, want)
		}
	}
}
