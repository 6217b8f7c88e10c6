package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

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
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "tyr_data_path_reads_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no tyr_data_path_reads_total")
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
		"over the limit":  binary.LittleEndian.AppendUint32(nil, frame.RequestBytesMax+1),
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
