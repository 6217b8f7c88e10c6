package e2e

// TestBadInput proves that every kind of bad request to a real server is
// refused with its documented error class (checked with errors.Is, or the
// gRPC code for requests the Go client cannot build) and changes nothing:
// before and after each one, the keyspaces, their configurations and every
// blob's info and bytes are identical. It covers unknown keyspaces and blobs,
// creating what exists, offsets and sizes past limits.BlobBytesMax, bad keys,
// bad keyspace names and configurations, payloads, reads, list pages and
// commits above their limits, malformed ops, empty commits, and commits whose
// later op fails (none of their earlier ops may take effect).
//
// TestBadInputInvalidUTF8 does the same for keys, keyspace names and list
// prefixes that are not valid UTF-8, sent by the Go client and, as raw
// protobuf bytes, by any client.
//
// They use no randomness. Reproduce a failure with:
//
//	go test -race -count=1 ./tests/e2e -run 'TestBadInput' -v

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/testserver"
)

// blobState is what a bad request must not change about a blob. Bytes of
// blobs above badReadMax are sampled at both ends.
type blobState struct {
	Info       client.BlobInfo
	Head, Tail []byte
}

type storeState struct {
	Keyspaces []client.KeyspaceInfo
	Blobs     map[string][]blobState // by keyspace
}

const badReadMax = 1 << 20

func captureState(t *testing.T, c *client.Client) storeState {
	t.Helper()
	ctx := context.Background()
	kss, err := c.ListKeyspaces(ctx)
	if err != nil {
		t.Fatalf("list keyspaces: %v", err)
	}
	st := storeState{Keyspaces: kss, Blobs: map[string][]blobState{}}
	for _, ks := range kss {
		blobs, next, err := c.List(ctx, ks.Name, "", "", client.ListLimitMax)
		if err != nil || next != "" {
			t.Fatalf("list %s: next %q, %v", ks.Name, next, err)
		}
		for _, b := range blobs {
			s := blobState{Info: b}
			if b.Size <= badReadMax {
				s.Head, err = c.Read(ctx, ks.Name, b.Key, 0, b.Size+1)
			} else {
				s.Head, err = c.Read(ctx, ks.Name, b.Key, 0, 64<<10)
				if err == nil {
					s.Tail, err = c.Read(ctx, ks.Name, b.Key, b.Size-64<<10, 64<<10+1)
				}
			}
			if err != nil {
				t.Fatalf("read %s/%s: %v", ks.Name, b.Key, err)
			}
			st.Blobs[ks.Name] = append(st.Blobs[ks.Name], s)
		}
	}
	return st
}

func describeStateDiff(before, after storeState) string {
	if !reflect.DeepEqual(before.Keyspaces, after.Keyspaces) {
		return fmt.Sprintf("keyspaces changed:\n  before %+v\n  after  %+v", before.Keyspaces, after.Keyspaces)
	}
	var out []string
	for ks, bs := range before.Blobs {
		as := after.Blobs[ks]
		if len(as) != len(bs) {
			var bk, ak []string
			for _, b := range bs {
				bk = append(bk, b.Info.Key)
			}
			for _, a := range as {
				ak = append(ak, a.Info.Key)
			}
			out = append(out, fmt.Sprintf("keyspace %s: blobs %q became %q", ks, bk, ak))
			continue
		}
		for i := range bs {
			if !reflect.DeepEqual(bs[i].Info, as[i].Info) {
				out = append(out, fmt.Sprintf("keyspace %s: blob %+v became %+v", ks, bs[i].Info, as[i].Info))
			}
			if !bytes.Equal(bs[i].Head, as[i].Head) || !bytes.Equal(bs[i].Tail, as[i].Tail) {
				out = append(out, fmt.Sprintf("keyspace %s blob %q: bytes changed: %s", ks, bs[i].Info.Key,
					describeDiff(as[i].Head, bs[i].Head)))
			}
		}
	}
	for ks := range after.Blobs {
		if _, ok := before.Blobs[ks]; !ok {
			out = append(out, fmt.Sprintf("keyspace %s gained blobs", ks))
		}
	}
	return strings.Join(out, "\n  ")
}

func TestBadInput(t *testing.T) {
	srv := testserver.Start(t)
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(srv.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(limits.MessageBytesMax),
			grpc.MaxCallRecvMsgSize(limits.MessageBytesMax)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := tyrpb.NewTyrClient(conn)

	// The state every bad request must leave alone.
	const ks = "bad"
	cfg := client.KeyspaceConfig{ChunkSize: modelChunk, Replication: 1, MVCC: true, Sync: false}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.CreateKeyspace(ctx, ks, cfg)
	must(err)
	_, err = c.CreateKeyspace(ctx, "bad-other", client.KeyspaceConfig{ChunkSize: 1 << 20, MVCC: false, Sync: true})
	must(err)
	aData := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80000 bytes: crosses a page
	_, err = c.WriteCreate(ctx, ks, "a", 0, aData)
	must(err)
	_, err = c.WriteCreate(ctx, ks, "b", 0, []byte("bee"))
	must(err)
	_, err = c.WriteCreate(ctx, "bad-other", "x", 5000, []byte("x"))
	must(err)
	// A blob 10 bytes short of the size limit (holes cost nothing).
	must(c.Create(ctx, ks, "huge"))
	must(c.Truncate(ctx, ks, "huge", limits.BlobBytesMax-10))
	_, err = c.Write(ctx, ks, "huge", limits.BlobBytesMax-20, []byte("end"))
	must(err)
	// The longest key is valid.
	longest := strings.Repeat("k", limits.KeyBytesMax)
	_, err = c.WriteCreate(ctx, ks, longest, 0, []byte("long"))
	must(err)

	// check runs do, which must fail with want, and checks nothing changed.
	check := func(t *testing.T, want error, do func() error) {
		t.Helper()
		before := captureState(t, c)
		err := do()
		if !errors.Is(err, want) {
			t.Errorf("got error %v, want %v", err, want)
		}
		after := captureState(t, c)
		if d := describeStateDiff(before, after); d != "" || !reflect.DeepEqual(before, after) {
			t.Errorf("state changed by a refused request:\n  %s", d)
		}
	}
	// checkCode is check for raw gRPC calls.
	checkCode := func(t *testing.T, want codes.Code, do func() error) {
		t.Helper()
		check(t, nil, func() error {
			if got := status.Code(do()); got != want {
				t.Errorf("got code %v, want %v", got, want)
			}
			return nil
		})
	}
	commit := func(ks string, ops ...client.Op) func() error {
		return func() error { _, err := c.Commit(ctx, ks, ops...); return err }
	}
	data := []byte("data")

	t.Run("UnknownKeyspace", func(t *testing.T) {
		const nosuch = "nosuch"
		for name, do := range map[string]func() error{
			"create":      func() error { return c.Create(ctx, nosuch, "a") },
			"write":       func() error { _, err := c.Write(ctx, nosuch, "a", 0, data); return err },
			"writecreate": func() error { _, err := c.WriteCreate(ctx, nosuch, "a", 0, data); return err },
			"append":      func() error { _, err := c.Append(ctx, nosuch, "a", data); return err },
			"truncate":    func() error { return c.Truncate(ctx, nosuch, "a", 10) },
			"delete":      func() error { return c.Delete(ctx, nosuch, "a") },
			"read":        func() error { _, err := c.Read(ctx, nosuch, "a", 0, 10); return err },
			"stat":        func() error { _, err := c.Stat(ctx, nosuch, "a"); return err },
			"list":        func() error { _, _, err := c.List(ctx, nosuch, "", "", 0); return err },
			"keyspace":    func() error { _, err := c.Keyspace(ctx, nosuch); return err },
			"drop":        func() error { return c.DropKeyspace(ctx, nosuch) },
			"commit":      commit(nosuch, client.CreateOp("a"), client.AppendOp("b", data, true)),
		} {
			t.Run(name, func(t *testing.T) { check(t, client.ErrNotFound, do) })
		}
	})

	t.Run("UnknownBlob", func(t *testing.T) {
		const missing = "missing"
		for name, do := range map[string]func() error{
			"read":      func() error { _, err := c.Read(ctx, ks, missing, 0, 10); return err },
			"readpart":  func() error { _, _, err := c.ReadPart(ctx, ks, missing, 0, 0); return err },
			"write":     func() error { _, err := c.Write(ctx, ks, missing, 0, data); return err },
			"append":    func() error { _, err := c.Append(ctx, ks, missing, data); return err },
			"truncate":  func() error { return c.Truncate(ctx, ks, missing, 0) },
			"stat":      func() error { _, err := c.Stat(ctx, ks, missing); return err },
			"delete":    func() error { return c.Delete(ctx, ks, missing) },
			"write-big": func() error { _, err := c.Write(ctx, ks, missing, 1<<30, data); return err },
		} {
			t.Run(name, func(t *testing.T) { check(t, client.ErrNotFound, do) })
		}
	})

	t.Run("CreateExistingBlob", func(t *testing.T) {
		check(t, client.ErrExists, func() error { return c.Create(ctx, ks, "a") })
		check(t, client.ErrExists, commit(ks, client.CreateOp(longest)))
	})

	t.Run("WritePastBlobBytesMax", func(t *testing.T) {
		for name, do := range map[string]func() error{
			"end-past":     func() error { _, err := c.Write(ctx, ks, "a", limits.BlobBytesMax-5, []byte("0123456789")); return err },
			"at-limit":     func() error { _, err := c.Write(ctx, ks, "a", limits.BlobBytesMax, data); return err },
			"offset-max":   func() error { _, err := c.Write(ctx, ks, "a", math.MaxUint64, data); return err },
			"wraps":        func() error { _, err := c.Write(ctx, ks, "a", math.MaxUint64-1, data); return err },
			"huge-blob":    func() error { _, err := c.Write(ctx, ks, "huge", limits.BlobBytesMax-2, data); return err },
			"create-new":   func() error { _, err := c.WriteCreate(ctx, ks, "new", limits.BlobBytesMax, data); return err },
			"append-past":  func() error { _, err := c.Append(ctx, ks, "huge", bytes.Repeat(data, 3)); return err },
			"append-multi": commit(ks, client.AppendOp("huge", data, false), client.AppendOp("huge", data, false), client.AppendOp("huge", data, false)),
		} {
			t.Run(name, func(t *testing.T) { check(t, client.ErrOutOfRange, do) })
		}
	})

	t.Run("TruncatePastBlobBytesMax", func(t *testing.T) {
		check(t, client.ErrOutOfRange, func() error { return c.Truncate(ctx, ks, "a", limits.BlobBytesMax+1) })
		check(t, client.ErrOutOfRange, func() error { return c.Truncate(ctx, ks, "huge", math.MaxUint64) })
	})

	t.Run("BadKey", func(t *testing.T) {
		for name, key := range map[string]string{
			"too-long": strings.Repeat("k", limits.KeyBytesMax+1),
			"empty":    "",
			"nul":      "a\x00b",
			"nul-only": "\x00",
			// Invalid UTF-8: see TestBadInputInvalidUTF8.
		} {
			t.Run(name, func(t *testing.T) {
				for op, do := range map[string]func() error{
					"create":      func() error { return c.Create(ctx, ks, key) },
					"writecreate": func() error { _, err := c.WriteCreate(ctx, ks, key, 0, data); return err },
					"append":      commit(ks, client.AppendOp(key, data, true)),
					"truncate":    func() error { return c.Truncate(ctx, ks, key, 0) },
					"delete":      func() error { return c.Delete(ctx, ks, key) },
					"read":        func() error { _, err := c.Read(ctx, ks, key, 0, 1); return err },
					"stat":        func() error { _, err := c.Stat(ctx, ks, key); return err },
					// A good op before the bad one must not take effect.
					"second-op": commit(ks, client.WriteOp("a", 0, data, false), client.CreateOp(key)),
				} {
					t.Run(op, func(t *testing.T) { check(t, client.ErrInvalidArgument, do) })
				}
			})
		}
	})

	t.Run("BadKeyspaceConfig", func(t *testing.T) {
		for name, cfg := range map[string]client.KeyspaceConfig{
			"chunk-not-power-of-two": {ChunkSize: 5000},
			"chunk-3x4k":             {ChunkSize: 3 * 4096},
			"chunk-below-4k":         {ChunkSize: 2048},
			"chunk-1":                {ChunkSize: 1},
			"chunk-above-1g":         {ChunkSize: 2 << 30},
			"chunk-max":              {ChunkSize: math.MaxUint64},
			"replication-8":          {ChunkSize: 4096, Replication: limits.ReplicationMax + 1},
			"replication-max":        {Replication: math.MaxUint32},
		} {
			t.Run(name, func(t *testing.T) {
				check(t, client.ErrInvalidArgument, func() error {
					_, err := c.CreateKeyspace(ctx, "newks", cfg)
					return err
				})
			})
		}
	})

	t.Run("BadKeyspaceName", func(t *testing.T) {
		for name, ksName := range map[string]string{
			"uppercase":     "Upper",
			"too-short":     "ab",
			"empty":         "",
			"too-long":      strings.Repeat("a", limits.KeyspaceNameBytesMax+1),
			"dot-dot":       "a..b",
			"leading-dash":  "-abc",
			"trailing-dash": "abc-",
			"leading-dot":   ".abc",
			"underscore":    "a_b",
			"slash":         "ab/c",
			"space":         "a bc",
			"non-ascii":     "café",
		} {
			t.Run(name, func(t *testing.T) {
				check(t, client.ErrInvalidArgument, func() error {
					_, err := c.CreateKeyspace(ctx, ksName, client.KeyspaceConfig{})
					return err
				})
			})
		}
	})

	t.Run("CreateExistingKeyspace", func(t *testing.T) {
		check(t, client.ErrExists, func() error { _, err := c.CreateKeyspace(ctx, ks, cfg); return err })
		check(t, client.ErrExists, func() error {
			_, err := c.CreateKeyspace(ctx, ks, client.KeyspaceConfig{ChunkSize: 1 << 30, Replication: 3})
			return err
		})
		if info, err := c.Keyspace(ctx, ks); err != nil || info.Config != cfg {
			t.Errorf("keyspace %s after a refused re-create: %+v, %v; want config %+v", ks, info.Config, err, cfg)
		}
	})

	t.Run("PayloadTooLarge", func(t *testing.T) {
		big := make([]byte, client.PayloadBytesMax+1)
		check(t, client.ErrTooLarge, func() error { _, err := c.Append(ctx, ks, "a", big); return err })
		check(t, client.ErrTooLarge, commit(ks, client.WriteOp("a", 0, big, false)))
		check(t, client.ErrTooLarge, commit(ks, client.AppendOp("new", big, true)))
	})

	t.Run("ReadTooLarge", func(t *testing.T) {
		check(t, client.ErrTooLarge, func() error {
			_, _, err := c.ReadPart(ctx, ks, "a", 0, client.PayloadBytesMax+1)
			return err
		})
		check(t, client.ErrTooLarge, func() error {
			_, _, err := c.ReadPart(ctx, ks, "a", 0, math.MaxUint64)
			return err
		})
	})

	t.Run("ListLimitTooLarge", func(t *testing.T) {
		check(t, client.ErrInvalidArgument, func() error {
			_, _, err := c.List(ctx, ks, "", "", client.ListLimitMax+1)
			return err
		})
		check(t, client.ErrInvalidArgument, func() error { _, _, err := c.List(ctx, ks, "", "", -1); return err })
		// The server checks too, for clients that do not.
		checkCode(t, codes.InvalidArgument, func() error {
			_, err := raw.List(ctx, &tyrpb.ListRequest{Keyspace: []byte(ks), Limit: client.ListLimitMax + 1})
			return err
		})
		checkCode(t, codes.InvalidArgument, func() error {
			_, err := raw.List(ctx, &tyrpb.ListRequest{Keyspace: []byte(ks), Limit: math.MaxUint32})
			return err
		})
	})

	t.Run("CommitTooLarge", func(t *testing.T) {
		ops := make([]client.Op, limits.OpsPerCommitMax+1)
		for i := range ops {
			ops[i] = client.WriteOp("a", uint64(i), []byte{'!'}, false)
		}
		check(t, client.ErrTooLarge, commit(ks, ops...))
		chunk := make([]byte, client.PayloadBytesMax)
		check(t, client.ErrTooLarge, commit(ks, client.WriteOp("a", 0, chunk, false),
			client.WriteOp("a", 0, chunk, false), client.WriteOp("a", 0, chunk, false),
			client.WriteOp("a", 0, chunk, false), client.WriteOp("b", 0, []byte{1}, false)))
	})

	t.Run("CommitFailsInTheMiddle", func(t *testing.T) {
		// Each commit's earlier ops would succeed alone; a later one fails,
		// so none may take effect.
		for name, tc := range map[string]struct {
			want error
			ops  []client.Op
		}{
			"create-existing": {client.ErrExists, []client.Op{
				client.WriteOp("a", 0, []byte("XXXX"), false), client.CreateOp("b"),
				client.AppendOp("a", data, false)}},
			"missing-blob": {client.ErrNotFound, []client.Op{
				client.CreateOp("fresh"), client.AppendOp("a", data, false), client.TruncateOp("b", 1),
				client.WriteOp("missing", 0, data, false)}},
			"delete-then-create-existing": {client.ErrExists, []client.Op{
				client.DeleteOp("a"), client.CreateOp("a"), client.CreateOp("b")}},
			"write-after-delete": {client.ErrNotFound, []client.Op{
				client.TruncateOp("a", 0), client.DeleteOp("b"), client.WriteOp("b", 0, data, false)}},
			"append-past-limit": {client.ErrOutOfRange, []client.Op{
				client.WriteOp("a", 70000, data, false), client.TruncateOp("huge", 0),
				client.TruncateOp("huge", limits.BlobBytesMax), client.AppendOp("huge", data, false)}},
			"truncate-past-limit": {client.ErrOutOfRange, []client.Op{
				client.CreateOp("fresh"), client.WriteOp("a", 0, data, false),
				client.TruncateOp("a", limits.BlobBytesMax+1)}},
		} {
			t.Run(name, func(t *testing.T) { check(t, tc.want, commit(ks, tc.ops...)) })
		}
	})

	t.Run("MalformedOp", func(t *testing.T) {
		write := &tyrpb.Op{Key: []byte("a"), Kind: &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Offset: 0, Data: []byte("ZZZ")}}}
		for name, ops := range map[string][]*tyrpb.Op{
			"no-kind":           {{Key: []byte("a")}},
			"no-kind-no-key":    {{}},
			"no-kind-after-op":  {write, {Key: []byte("b")}},
			"no-kind-before-op": {{Key: []byte("b")}, write},
			"nil-op":            {write, nil},
		} {
			t.Run(name, func(t *testing.T) {
				checkCode(t, codes.InvalidArgument, func() error {
					_, err := raw.Commit(ctx, &tyrpb.CommitRequest{Keyspace: []byte(ks), Ops: ops})
					return err
				})
			})
		}
	})

	t.Run("EmptyCommit", func(t *testing.T) {
		check(t, client.ErrInvalidArgument, commit(ks))
		checkCode(t, codes.InvalidArgument, func() error {
			_, err := raw.Commit(ctx, &tyrpb.CommitRequest{Keyspace: []byte(ks)})
			return err
		})
	})

	// After all this the server still serves.
	if _, err := c.Append(ctx, ks, "b", data); err != nil {
		t.Fatalf("append after the bad requests: %v", err)
	}
	if got, err := c.Read(ctx, ks, "a", 0, uint64(len(aData))+1); err != nil || !bytes.Equal(got, aData) {
		t.Fatalf("blob a after the bad requests: %v, %s", err, describeDiff(got, aData))
	}
}

// rawFrame is a request or response as protobuf bytes; rawCodec sends and
// receives it unchanged, so a test can send what the generated code refuses
// to marshal.
type rawFrame struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return v.(*rawFrame).b, nil }
func (rawCodec) Unmarshal(b []byte, v any) error { v.(*rawFrame).b = slices.Clone(b); return nil }
func (rawCodec) Name() string                    { return "proto" }
func appendField(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func TestBadInputInvalidUTF8(t *testing.T) {
	srv := testserver.Start(t)
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ks = "utf8"
	if _, err := c.CreateKeyspace(ctx, ks, client.KeyspaceConfig{ChunkSize: modelChunk, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteCreate(ctx, ks, "a", 0, []byte("data")); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send := func(method string, req []byte) func() error {
		return func() error {
			return conn.Invoke(ctx, method, &rawFrame{req}, &rawFrame{}, grpc.ForceCodec(rawCodec{}))
		}
	}
	// The raw path works for a valid key, so refusals below are about the
	// key alone.
	if err := send(tyrpb.Tyr_Stat_FullMethodName,
		appendField(appendField(nil, 1, []byte(ks)), 2, []byte("a")))(); err != nil {
		t.Fatalf("raw stat of a valid key: %v", err)
	}
	check := func(t *testing.T, do func() error, ok func(error) bool, want string) {
		t.Helper()
		before := captureState(t, c)
		if err := do(); !ok(err) {
			t.Errorf("got error %v (code %v), want %s", err, status.Code(err), want)
		}
		if d := describeStateDiff(before, captureState(t, c)); d != "" {
			t.Errorf("state changed by a refused request:\n  %s", d)
		}
	}
	bads := []string{"a\xffb", "caf\xc3"}

	// The Go client must answer ErrInvalidArgument, as for any other bad key
	// or name, whether it checks itself or the server does.
	t.Run("client", func(t *testing.T) {
		isInvalid := func(err error) bool { return errors.Is(err, client.ErrInvalidArgument) }
		for _, bad := range bads {
			for name, do := range map[string]func() error{
				"stat":        func() error { _, err := c.Stat(ctx, ks, bad); return err },
				"read":        func() error { _, err := c.Read(ctx, ks, bad, 0, 1); return err },
				"create":      func() error { return c.Create(ctx, ks, bad) },
				"writecreate": func() error { _, err := c.WriteCreate(ctx, ks, bad, 0, []byte("x")); return err },
				"commit": func() error {
					_, err := c.Commit(ctx, ks, client.WriteOp("a", 0, []byte("X"), false), client.CreateOp(bad))
					return err
				},
				"list-prefix": func() error { _, _, err := c.List(ctx, ks, bad, "", 0); return err },
				"create-keyspace": func() error {
					_, err := c.CreateKeyspace(ctx, "ks"+bad, client.KeyspaceConfig{})
					return err
				},
			} {
				t.Run(fmt.Sprintf("%s/%q", name, bad), func(t *testing.T) {
					check(t, do, isInvalid, "ErrInvalidArgument")
				})
			}
		}
	})

	// A client that sends such bytes anyway (the protobuf runtime of another
	// language may not check) must get InvalidArgument from the server.
	t.Run("wire", func(t *testing.T) {
		isInvalidCode := func(err error) bool { return status.Code(err) == codes.InvalidArgument }
		for _, bad := range bads {
			key := []byte(bad)
			stat := appendField(appendField(nil, 1, []byte(ks)), 2, key) // {keyspace, key}
			op := appendField(appendField(nil, 1, key), 2, nil)          // Op{key, create: {}}
			commitReq := appendField(appendField(nil, 1, []byte(ks)), 2, op)
			for name, do := range map[string]func() error{
				"stat":   send(tyrpb.Tyr_Stat_FullMethodName, stat),
				"read":   send(tyrpb.Tyr_Read_FullMethodName, stat),
				"commit": send(tyrpb.Tyr_Commit_FullMethodName, commitReq),
			} {
				t.Run(fmt.Sprintf("%s/%q", name, bad), func(t *testing.T) {
					check(t, do, isInvalidCode, "code InvalidArgument")
				})
			}
		}
	})
}
