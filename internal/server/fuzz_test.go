// Fuzz targets for the server's input handling. They prove:
//
//   - FuzzDecodeCommit: any bytes, decoded as a wire CommitRequest and then
//     by DecodeOps, never panic; every op DecodeOps accepts passes
//     txn.Op.Validate; a rejection is a classified error (never an Internal
//     status); and encoding the accepted ops and decoding them again gives
//     the same ops (the wire mapping is stable).
//   - FuzzRequests: any Commit, Read, Stat, List, CreateKeyspace,
//     GetKeyspace, DropKeyspace or ListKeyspaces request with fuzz-chosen
//     names, keys, offsets, lengths, data, prefixes and limits, served by the
//     real Service over a real storage.Engine, never panics, and every error
//     is a gRPC status with a classified code (not Internal or Unknown): bad
//     input always gets a clear answer. Successful answers are checked for
//     basic consistency (read lengths, list order and bounds, stat after
//     commit).
//
// The seed corpus runs with the unit tests. The Makefile fuzzes each target
// for 10s:
//
//	go test ./internal/server -run '^$' -fuzz '^FuzzDecodeCommit$' -fuzztime 10s
//	go test ./internal/server -run '^$' -fuzz '^FuzzRequests$' -fuzztime 10s
//
// A failing input is saved under testdata/fuzz/<target>/ and from then on
// runs as a regression test; reproduce it with
//
//	go test ./internal/server -run '^FuzzRequests/<file name>$' -v
package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/server"
	"github.com/tyrstore/tyr/internal/storage"
	"github.com/tyrstore/tyr/internal/txn"
)

// fuzzEncodeOps is the inverse of DecodeOps.
func fuzzEncodeOps(ops []txn.Op) []*tyrpb.Op {
	out := make([]*tyrpb.Op, len(ops))
	for i, op := range ops {
		o := &tyrpb.Op{Key: []byte(op.Key)}
		switch op.Kind {
		case txn.OpCreate:
			o.Kind = &tyrpb.Op_Create{Create: &tyrpb.CreateOp{}}
		case txn.OpWrite:
			o.Kind = &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Offset: op.Offset, Data: op.Data, Create: op.Create}}
		case txn.OpAppend:
			o.Kind = &tyrpb.Op_Append{Append: &tyrpb.AppendOp{Data: op.Data, Create: op.Create}}
		case txn.OpTruncate:
			o.Kind = &tyrpb.Op_Truncate{Truncate: &tyrpb.TruncateOp{Size: op.Size}}
		case txn.OpDelete:
			o.Kind = &tyrpb.Op_Delete{Delete: &tyrpb.DeleteOp{}}
		case txn.OpAtomic:
			o.Kind = &tyrpb.Op_Atomic{Atomic: &tyrpb.AtomicOp{Offset: op.Offset, Width: uint32(op.Width),
				Func: tyrpb.AtomicFunc(op.Func), Operand: op.Operand}}
		case txn.OpCompareAndSwap:
			o.Kind = &tyrpb.Op_Cas{Cas: &tyrpb.CasOp{Offset: op.Offset, Expected: op.Expected, Data: op.Data}}
		}
		out[i] = o
	}
	return out
}

func fuzzSameOps(a, b []txn.Op) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Key != y.Key || x.Kind != y.Kind || x.Offset != y.Offset || x.Size != y.Size ||
			x.Create != y.Create || !bytes.Equal(x.Data, y.Data) || x.Width != y.Width || x.Func != y.Func ||
			x.Operand != y.Operand || !bytes.Equal(x.Expected, y.Expected) || x.Version != y.Version {
			return false
		}
	}
	return true
}

func fuzzMarshal(tb testing.TB, m proto.Message) []byte {
	tb.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// classified reports whether err carries one of the error classes of
// package errs.
func fuzzClassified(err error) bool {
	for _, c := range []error{errs.ErrNotFound, errs.ErrExists, errs.ErrInvalidArgument, errs.ErrOutOfRange,
		errs.ErrTooLarge, errs.ErrUnavailable, errs.ErrConflict, errs.ErrCorruption} {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

func fuzzCommitSeeds(tb testing.TB) [][]byte {
	req := func(ops ...*tyrpb.Op) []byte {
		return fuzzMarshal(tb, &tyrpb.CommitRequest{Keyspace: []byte("ks-1"), Ops: ops})
	}
	create := &tyrpb.Op{Key: []byte("a"), Kind: &tyrpb.Op_Create{Create: &tyrpb.CreateOp{}}}
	write := &tyrpb.Op{Key: []byte("a/b"), Kind: &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Offset: 65535, Data: []byte("xyz"), Create: true}}}
	appendOp := &tyrpb.Op{Key: []byte("ü"), Kind: &tyrpb.Op_Append{Append: &tyrpb.AppendOp{Data: []byte("tail")}}}
	truncate := &tyrpb.Op{Key: []byte("a"), Kind: &tyrpb.Op_Truncate{Truncate: &tyrpb.TruncateOp{Size: 1 << 20}}}
	del := &tyrpb.Op{Key: []byte("a"), Kind: &tyrpb.Op_Delete{Delete: &tyrpb.DeleteOp{}}}
	atomic := func(offset uint64, width uint32, fn tyrpb.AtomicFunc) *tyrpb.Op {
		return &tyrpb.Op{Key: []byte("c"), Kind: &tyrpb.Op_Atomic{Atomic: &tyrpb.AtomicOp{Offset: offset, Width: width, Func: fn, Operand: 7}}}
	}
	cas := func(expected, data []byte) *tyrpb.Op {
		return &tyrpb.Op{Key: []byte("c"), Kind: &tyrpb.Op_Cas{Cas: &tyrpb.CasOp{Offset: 3, Expected: expected, Data: data}}}
	}
	withReads := fuzzMarshal(tb, &tyrpb.CommitRequest{Keyspace: []byte("ks-1"), Ops: []*tyrpb.Op{atomic(0, 8, tyrpb.AtomicFunc_ATOMIC_FUNC_ADD)},
		Reads: []*tyrpb.ReadCheck{{Key: []byte("c"), Version: 42}, {Key: []byte("d")}}})
	return [][]byte{
		req(create), req(write), req(appendOp), req(truncate), req(del),
		req(atomic(0, 8, tyrpb.AtomicFunc_ATOMIC_FUNC_ADD)), req(atomic(65533, 4, tyrpb.AtomicFunc_ATOMIC_FUNC_MIN_SIGNED)),
		req(cas([]byte("ab"), []byte("cd"))), req(create, atomic(1, 1, tyrpb.AtomicFunc_ATOMIC_FUNC_SET), cas([]byte{0}, []byte{1})),
		withReads,
		// Rejected atomics and CAS: width 3, width 0, unknown and unset
		// function, past the blob limit, length mismatch, empty, too long.
		req(atomic(0, 3, tyrpb.AtomicFunc_ATOMIC_FUNC_ADD)), req(atomic(0, 0, tyrpb.AtomicFunc_ATOMIC_FUNC_ADD)),
		req(atomic(0, 8, 99)), req(atomic(0, 8, 0)), req(atomic(limits.BlobBytesMax-4, 8, tyrpb.AtomicFunc_ATOMIC_FUNC_OR)),
		req(cas([]byte("ab"), []byte("c"))), req(cas(nil, nil)), req(cas(make([]byte, limits.CASBytesMax+1), make([]byte, limits.CASBytesMax+1))),
		req(create, write, appendOp, truncate, del),
		req(write, write, write),
		// Rejected: no kind, empty key, no ops, offset past the blob limit,
		// truncate past the blob limit.
		req(&tyrpb.Op{Key: []byte("a")}),
		req(&tyrpb.Op{Kind: &tyrpb.Op_Create{Create: &tyrpb.CreateOp{}}}),
		req(),
		req(&tyrpb.Op{Key: []byte("a"), Kind: &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Offset: limits.BlobBytesMax, Data: []byte("x")}}}),
		req(&tyrpb.Op{Key: []byte("a"), Kind: &tyrpb.Op_Truncate{Truncate: &tyrpb.TruncateOp{Size: ^uint64(0)}}}),
		// Garbage.
		{},
		{0xff},
		{0x12, 0x00},
		{0x12, 0x02, 0x1a, 0x00},
		{0x0a, 0x03, 0xff, 0xfe, 0xfd},
		[]byte("\x12\x80\x80\x80\x80\x10"),
		bytes.Repeat([]byte{0x12, 0x03, 0x0a, 0x01, 0x61}, 10),
	}
}

func FuzzDecodeCommit(f *testing.F) {
	for _, seed := range fuzzCommitSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req tyrpb.CommitRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			return
		}
		ops, err := server.DecodeOps(req.GetOps())
		if err != nil {
			if ops != nil {
				t.Fatalf("DecodeOps returned ops with error %v", err)
			}
			if !fuzzClassified(err) {
				t.Fatalf("unclassified DecodeOps error: %v", err)
			}
			return
		}
		if len(ops) != len(req.GetOps()) {
			t.Fatalf("%d wire ops decoded to %d", len(req.GetOps()), len(ops))
		}
		for i, op := range ops {
			if err := op.Validate(); err != nil {
				t.Fatalf("op %d accepted by DecodeOps fails Validate: %v", i, err)
			}
		}
		if err := txn.Validate(ops); err != nil {
			t.Fatalf("ops accepted by DecodeOps fail txn.Validate: %v", err)
		}
		// Encoding and decoding again gives the same ops and the same bytes.
		wire := fuzzMarshal(t, &tyrpb.CommitRequest{Keyspace: req.GetKeyspace(), Ops: fuzzEncodeOps(ops)})
		var again tyrpb.CommitRequest
		if err := proto.Unmarshal(wire, &again); err != nil {
			t.Fatalf("re-encoded request does not decode: %v", err)
		}
		ops2, err := server.DecodeOps(again.GetOps())
		if err != nil {
			t.Fatalf("re-encoded ops rejected: %v", err)
		}
		if !fuzzSameOps(ops, ops2) {
			t.Fatalf("ops changed through re-encoding:\n%+v\n%+v", ops, ops2)
		}
		if wire2 := fuzzMarshal(t, &tyrpb.CommitRequest{Keyspace: again.GetKeyspace(), Ops: fuzzEncodeOps(ops2)}); !bytes.Equal(wire, wire2) {
			t.Fatalf("encoding not stable:\n%x\n%x", wire, wire2)
		}
	})
}

// Keyspaces every FuzzRequests process creates at start; fuzz-created ones
// come and go beside them.
const (
	fuzzKeyspaceMVCC  = "fuzz-mvcc"
	fuzzKeyspacePlain = "fuzz-plain"
	// fuzzKeyspacesMax bounds the open keyspaces (each is a Pebble
	// database); a create beyond it is dropped again at once.
	fuzzKeyspacesMax = 6
	// fuzzDataMax bounds a fuzz write's data so a run stays fast.
	fuzzDataMax = 3*mvcc.PageBytes + 100
)

// fuzzService opens one Engine for the fuzz process, in a directory removed
// when the process's fuzzing ends.
func fuzzService(f *testing.F) *server.Service {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := storage.Open(storage.Options{Dir: f.TempDir(), CacheBytes: 8 << 20, MemTableBytes: 1 << 20,
		Retention: 50 * time.Millisecond, GCInterval: 20 * time.Millisecond, Logger: log})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		if err := engine.Close(); err != nil {
			f.Error(err)
		}
	})
	svc := server.NewService(engine, log)
	for _, ks := range []struct {
		name string
		mvcc bool
	}{{fuzzKeyspaceMVCC, true}, {fuzzKeyspacePlain, false}} {
		_, err := svc.CreateKeyspace(context.Background(), &tyrpb.CreateKeyspaceRequest{Name: []byte(ks.name),
			Config: &tyrpb.KeyspaceConfig{ChunkSize: 4096, Mvcc: ks.mvcc}})
		if err != nil {
			f.Fatal(err)
		}
	}
	return svc
}

// Request kinds of FuzzRequests, chosen by kind%8.
const (
	fuzzReqCommit = iota
	fuzzReqCommitMulti
	fuzzReqRead
	fuzzReqStat
	fuzzReqList
	fuzzReqCreateKeyspace
	fuzzReqGetKeyspace
	fuzzReqDropKeyspace
)

func FuzzRequests(f *testing.F) {
	svc := fuzzService(f)
	// kind: low 3 bits the request, bits 3-5 the op kind (of 6, 0 = none),
	// bits 6-7 the keyspace (0: MVCC, 1: in place, else the name given).
	// limit: the list limit; also bit 0 the create flag of writes and
	// appends (MVCC of a created keyspace), bit 1 grows data to length%
	// fuzzDataMax bytes (Sync of a created keyspace), bit 2 omits a created
	// keyspace's config, bit 3 adds a nil op to a commit, and limit%5 is the
	// number of extra ops of a multi-op commit. offset is also a truncate's
	// size and a created keyspace's chunk size; length its replication.
	P := uint64(mvcc.PageBytes)
	mvccKS, plainKS, named := uint8(0<<6), uint8(1<<6), uint8(2<<6)
	op := func(k uint8) uint8 { return k << 3 }
	f.Add(uint8(fuzzReqCommit)|op(2)|mvccKS, "", "a/b", P-1, uint64(0), []byte("across"), "", uint32(1))
	f.Add(uint8(fuzzReqCommit)|op(2)|plainKS, "", "ü/日本", 2*P-5, 3*P, []byte("0123456789"), "", uint32(3))
	f.Add(uint8(fuzzReqCommit)|op(1)|mvccKS, "", "k", uint64(0), uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqCommit)|op(3)|mvccKS, "", "k", uint64(0), P+1, []byte("ab"), "", uint32(3))
	f.Add(uint8(fuzzReqCommit)|op(4)|mvccKS, "", "k", P/2, uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqCommit)|op(4)|plainKS, "", "k", limits.BlobBytesMax, uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqCommit)|op(5)|mvccKS, "", "k", uint64(0), uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqCommit)|op(0)|mvccKS, "", "k", uint64(0), uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqCommit)|op(2)|mvccKS, "", "k", limits.BlobBytesMax, uint64(0), []byte("x"), "", uint32(1))
	f.Add(uint8(fuzzReqCommit)|op(2)|mvccKS, "", "bad\x00key", uint64(0), uint64(0), []byte("x"), "", uint32(1))
	f.Add(uint8(fuzzReqCommit)|op(2)|mvccKS, "", "\xff", uint64(0), uint64(0), []byte("x"), "", uint32(1))
	f.Add(uint8(fuzzReqCommit)|op(2)|named, "no-such-ks", "k", uint64(0), uint64(0), []byte("x"), "", uint32(1))
	f.Add(uint8(fuzzReqCommitMulti)|op(2)|mvccKS, "", "m", P-2, uint64(100), []byte("xy"), "", uint32(7))
	f.Add(uint8(fuzzReqCommitMulti)|op(5)|plainKS, "", "m", uint64(0), uint64(0), []byte("xy"), "", uint32(5))
	f.Add(uint8(fuzzReqRead)|mvccKS, "", "a/b", P-3, uint64(10), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqRead)|plainKS, "", "k", uint64(0), uint64(limits.PayloadBytesMax+1), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqRead)|mvccKS, "", "", uint64(0), uint64(1), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqRead)|mvccKS, "", "k", ^uint64(0), ^uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqStat)|mvccKS, "", "a/b", uint64(0), uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqStat)|named, "", "a/b", uint64(0), uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqList)|mvccKS, "", "", uint64(0), uint64(0), []byte(nil), "a", uint32(0))
	f.Add(uint8(fuzzReqList)|plainKS, "", "a/", uint64(0), uint64(0), []byte(nil), "", uint32(2))
	f.Add(uint8(fuzzReqList)|mvccKS, "", "zzz", uint64(0), uint64(0), []byte(nil), "a", uint32(1))
	f.Add(uint8(fuzzReqList)|mvccKS, "", "", uint64(0), uint64(0), []byte(nil), "\xff", uint32(limits.ListLimitMax+1))
	f.Add(uint8(fuzzReqList)|mvccKS, "", strings.Repeat("k", limits.KeyBytesMax+1), uint64(0), uint64(0), []byte(nil), "", uint32(1))
	f.Add(uint8(fuzzReqCreateKeyspace)|named, "new-ks", "", uint64(8192), uint64(1), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqCreateKeyspace)|named, "new-ks", "", uint64(0), uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqCreateKeyspace)|named, "Bad_Name", "", uint64(4096), uint64(1), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqCreateKeyspace)|named, "ok-name", "", uint64(5000), uint64(9), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqCreateKeyspace)|named, fuzzKeyspaceMVCC, "", uint64(4096), uint64(1), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqGetKeyspace)|mvccKS, "", "", uint64(0), uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqGetKeyspace)|named, "a..b", "", uint64(0), uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqDropKeyspace)|named, "new-ks", "", uint64(0), uint64(0), []byte(nil), "", uint32(0))
	f.Add(uint8(fuzzReqDropKeyspace)|named, "", "", uint64(0), uint64(0), []byte(nil), "", uint32(0))

	f.Fuzz(func(t *testing.T, kind uint8, ksName, key string, offset, length uint64, data []byte, prefix string, limit uint32) {
		ctx := context.Background()
		ks := ksName
		switch kind >> 6 {
		case 0:
			ks = fuzzKeyspaceMVCC
		case 1:
			ks = fuzzKeyspacePlain
		}
		if len(data) > fuzzDataMax {
			data = data[:fuzzDataMax]
		}
		if n := int(length % fuzzDataMax); limit&2 != 0 && len(data) > 0 && n > len(data) {
			data = bytes.Repeat(data, n/len(data)+1)[:n]
		}
		create := limit&1 != 0
		mkOp := func(k uint8, key string, offset uint64, data []byte) *tyrpb.Op {
			o := &tyrpb.Op{Key: []byte(key)}
			switch k % 6 {
			case 1:
				o.Kind = &tyrpb.Op_Create{Create: &tyrpb.CreateOp{}}
			case 2:
				o.Kind = &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Offset: offset, Data: data, Create: create}}
			case 3:
				o.Kind = &tyrpb.Op_Append{Append: &tyrpb.AppendOp{Data: data, Create: create}}
			case 4:
				o.Kind = &tyrpb.Op_Truncate{Truncate: &tyrpb.TruncateOp{Size: offset}}
			case 5:
				o.Kind = &tyrpb.Op_Delete{Delete: &tyrpb.DeleteOp{}}
			}
			return o
		}
		opKind := (kind >> 3) & 7

		var err error
		switch kind & 7 {
		case fuzzReqCommit, fuzzReqCommitMulti:
			ops := []*tyrpb.Op{mkOp(opKind, key, offset, data)}
			if kind&7 == fuzzReqCommitMulti {
				// Up to 5 ops on this blob and a neighbour, walking the
				// kinds and the pages.
				for i := uint32(1); i <= limit%5; i++ {
					k := key
					if i%2 == 1 {
						k = key + "/n"
					}
					ops = append(ops, mkOp(opKind+uint8(i), k, offset+uint64(i)*P-1, data))
				}
			}
			if limit&8 != 0 {
				ops = append(ops, nil) // a nil op must be rejected, not crash
			}
			req := &tyrpb.CommitRequest{Keyspace: []byte(ks), Ops: ops}
			var resp *tyrpb.CommitResponse
			resp, err = svc.Commit(ctx, req)
			if err == nil {
				fuzzCheckCommit(t, svc, req, resp)
			}
		case fuzzReqRead:
			var resp *tyrpb.ReadResponse
			resp, err = svc.Read(ctx, &tyrpb.ReadRequest{Keyspace: []byte(ks), Key: []byte(key), Offset: offset, Length: length})
			if err == nil {
				want := uint64(0)
				if offset < resp.GetSize() {
					want = min(length, resp.GetSize()-offset)
				}
				if uint64(len(resp.GetData())) != want {
					t.Fatalf("read [%d,+%d) of a %d-byte blob returned %d bytes", offset, length, resp.GetSize(), len(resp.GetData()))
				}
			}
		case fuzzReqStat:
			var info *tyrpb.BlobInfo
			info, err = svc.Stat(ctx, &tyrpb.StatRequest{Keyspace: []byte(ks), Key: []byte(key)})
			if err == nil && (info.GetKey() != key || info.GetVersion() == 0) {
				t.Fatalf("stat %q = %v", key, info)
			}
		case fuzzReqList:
			var resp *tyrpb.ListResponse
			req := &tyrpb.ListRequest{Keyspace: []byte(ks), Prefix: []byte(prefix), StartAfter: []byte(key), Limit: limit}
			resp, err = svc.List(ctx, req)
			if err == nil {
				fuzzCheckList(t, req, resp)
			}
		case fuzzReqCreateKeyspace:
			req := &tyrpb.CreateKeyspaceRequest{Name: []byte(ksName), Config: &tyrpb.KeyspaceConfig{ChunkSize: offset,
				Replication: uint32(length), Mvcc: limit&1 != 0, Sync: limit&2 != 0}}
			if limit&4 != 0 {
				req.Config = nil
			}
			var info *tyrpb.KeyspaceInfo
			info, err = svc.CreateKeyspace(ctx, req)
			if err == nil {
				fuzzCheckCreated(t, svc, req, info)
			}
		case fuzzReqGetKeyspace:
			var info *tyrpb.KeyspaceInfo
			info, err = svc.GetKeyspace(ctx, &tyrpb.GetKeyspaceRequest{Name: []byte(ks)})
			if err == nil && info.GetName() != ks {
				t.Fatalf("GetKeyspace(%q) = %v", ks, info)
			}
		case fuzzReqDropKeyspace:
			if ks == fuzzKeyspaceMVCC || ks == fuzzKeyspacePlain {
				_, err = svc.ListKeyspaces(ctx, &tyrpb.ListKeyspacesRequest{})
				break
			}
			_, err = svc.DropKeyspace(ctx, &tyrpb.DropKeyspaceRequest{Name: []byte(ks)})
			if err == nil {
				if _, err := svc.GetKeyspace(ctx, &tyrpb.GetKeyspaceRequest{Name: []byte(ks)}); status.Code(err) != codes.NotFound {
					t.Fatalf("keyspace %q still there after drop: %v", ks, err)
				}
			}
		}
		t.Logf("request kind %d on keyspace %q: error %v", kind&7, ks, err)
		if err != nil {
			fuzzCheckStatus(t, err)
		}
	})
}

// fuzzCheckStatus fails unless err is a gRPC status with a classified code.
func fuzzCheckStatus(t *testing.T, err error) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error is not a gRPC status: %v", err)
	}
	switch st.Code() {
	case codes.OK, codes.Internal, codes.Unknown:
		t.Fatalf("error with code %v: %v", st.Code(), err)
	}
	if st.Message() == "" {
		t.Fatalf("status %v without a message", st.Code())
	}
}

func fuzzCheckCommit(t *testing.T, svc *server.Service, req *tyrpb.CommitRequest, resp *tyrpb.CommitResponse) {
	t.Helper()
	if len(resp.GetResults()) != len(req.GetOps()) {
		t.Fatalf("%d results for %d ops", len(resp.GetResults()), len(req.GetOps()))
	}
	// The last op's result describes its blob after the commit.
	last := len(req.GetOps()) - 1
	key, r := req.GetOps()[last].GetKey(), resp.GetResults()[last]
	info, err := svc.Stat(context.Background(), &tyrpb.StatRequest{Keyspace: req.GetKeyspace(), Key: key})
	if r.GetVersion() == 0 {
		if status.Code(err) != codes.NotFound {
			t.Fatalf("blob %q deleted by the commit: stat says %v, %v", key, info, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("stat %q after commit: %v", key, err)
	}
	if info.GetSize() != r.GetSize() || info.GetVersion() != r.GetVersion() {
		t.Fatalf("blob %q: commit says size %d version %d, stat says %v", key, r.GetSize(), r.GetVersion(), info)
	}
}

func fuzzCheckList(t *testing.T, req *tyrpb.ListRequest, resp *tyrpb.ListResponse) {
	t.Helper()
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = limits.ListLimitDefault
	}
	blobs := resp.GetBlobs()
	if len(blobs) > limit {
		t.Fatalf("list with limit %d returned %d", limit, len(blobs))
	}
	prev := string(req.GetStartAfter())
	for _, b := range blobs {
		if !strings.HasPrefix(b.GetKey(), string(req.GetPrefix())) || b.GetKey() <= prev {
			t.Fatalf("list %q after %q: key %q out of place (previous %q)", req.GetPrefix(), req.GetStartAfter(), b.GetKey(), prev)
		}
		prev = b.GetKey()
	}
	if next := resp.GetNextStartAfter(); next != "" && (len(blobs) == 0 || next != blobs[len(blobs)-1].GetKey()) {
		t.Fatalf("next_start_after %q is not the last key listed", next)
	}
}

func fuzzCheckCreated(t *testing.T, svc *server.Service, req *tyrpb.CreateKeyspaceRequest, info *tyrpb.KeyspaceInfo) {
	t.Helper()
	ctx := context.Background()
	got, err := svc.GetKeyspace(ctx, &tyrpb.GetKeyspaceRequest{Name: req.GetName()})
	if err != nil {
		t.Fatalf("created keyspace %q: %v", req.GetName(), err)
	}
	if !proto.Equal(got.GetConfig(), info.GetConfig()) || got.GetName() != string(req.GetName()) {
		t.Fatalf("created %v, get says %v", info, got)
	}
	c := info.GetConfig()
	if want := req.GetConfig().GetChunkSize(); want != 0 && c.GetChunkSize() != want {
		t.Fatalf("created with chunk size %d, got %d", want, c.GetChunkSize())
	}
	if c.GetChunkSize() == 0 || c.GetReplication() == 0 {
		t.Fatalf("created keyspace without defaults: %v", c)
	}
	// Keep the number of open keyspaces bounded.
	list, err := svc.ListKeyspaces(ctx, &tyrpb.ListKeyspacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetKeyspaces()) > fuzzKeyspacesMax {
		if _, err := svc.DropKeyspace(ctx, &tyrpb.DropKeyspaceRequest{Name: req.GetName()}); err != nil {
			t.Fatalf("drop %q: %v", req.GetName(), err)
		}
	}
}
