package e2e

// TestModel proves that a real server stores blobs byte for byte like a plain
// in-memory []byte per blob: a long seeded random sequence of writes (at
// offsets crossing 4 KiB chunk and 64 KiB page boundaries, overlapping,
// sparse far past the end), appends, truncates (shrink and extend), multi-op
// commits, reads of random ranges (also past the end), stats and
// delete+recreate is run against the server and against the model, and every
// answer (bytes, sizes, versions, offsets, error classes) must agree. It runs
// once on an MVCC keyspace and once, shorter, on a keyspace with MVCC off.
//
// Each blob is driven by its own goroutine with its own rand derived from the
// seed, so a run is deterministic per blob. The seed is printed at the start
// and in every failure. Reproduce a failure with:
//
//	TYR_SEED=<seed> go test -race -count=1 ./tests/e2e -run 'TestModel' -v
//
// TYR_MODEL_OPS=<n> changes the number of ops per blob (default 1700).

import (
	"github.com/tyrstore/tyr/internal/testseed"

	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/testserver"
)

// seedFromEnv returns TYR_SEED, or a seed from the clock, and logs it.
func seedFromEnv(t *testing.T) uint64 { return testseed.FromEnv(t, "TYR_SEED") }

// intFromEnv returns the integer in env var name, or def.
func intFromEnv(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, s)
	}
	return v
}

// randomBytes returns n bytes from r.
func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := i; j < i+8 && j < n; j++ {
			b[j] = byte(v)
			v >>= 8
		}
	}
	return b
}

// describeDiff says where got and want first differ.
func describeDiff(got, want []byte) string {
	n := min(len(got), len(want))
	for i := 0; i < n; i++ {
		if got[i] != want[i] {
			return fmt.Sprintf("got %d bytes, want %d; first difference at byte %d: got %#x, want %#x",
				len(got), len(want), i, got[i], want[i])
		}
	}
	return fmt.Sprintf("got %d bytes, want %d; equal up to %d", len(got), len(want), n)
}

const (
	modelChunk    = 4096
	modelPage     = mvcc.PageBytes
	modelSizeSoft = 1 << 20 // blobs above this are truncated back
	modelSparse   = 8 << 20 // sparse writes land up to here
)

// modelOp is one op of a commit, in a form the model can apply.
type modelOp struct {
	kind   string // create, write, append, truncate, delete
	offset int    // write
	size   int    // truncate
	data   []byte // write, append
	create bool   // write, append
}

func (o modelOp) String() string {
	create := ""
	if o.create {
		create = "+create"
	}
	switch o.kind {
	case "write":
		return fmt.Sprintf("write[%d,+%d)%s", o.offset, len(o.data), create)
	case "append":
		return fmt.Sprintf("append(+%d)%s", len(o.data), create)
	case "truncate":
		return fmt.Sprintf("truncate(%d)", o.size)
	}
	return o.kind
}

func (o modelOp) clientOp(key string) client.Op {
	switch o.kind {
	case "create":
		return client.CreateOp(key)
	case "write":
		return client.WriteOp(key, uint64(o.offset), o.data, o.create)
	case "append":
		return client.AppendOp(key, o.data, o.create)
	case "truncate":
		return client.TruncateOp(key, uint64(o.size))
	case "delete":
		return client.DeleteOp(key)
	}
	panic("unknown model op " + o.kind)
}

// modelBlob is the expected state of one blob.
type modelBlob struct {
	data    []byte
	exists  bool
	version uint64 // of the last commit that changed it; 0 when never
}

// apply applies op to a copy-on-write view of b and returns the op's
// expected offset, or an error class when the op must fail.
func (b *modelBlob) apply(o modelOp) (offset int, err error) {
	if !b.exists && o.kind != "create" && !((o.kind == "write" || o.kind == "append") && o.create) {
		return 0, client.ErrNotFound
	}
	if b.exists && o.kind == "create" {
		return 0, client.ErrExists
	}
	if !b.exists {
		b.exists, b.data = true, nil
	}
	switch o.kind {
	case "write":
		if end := o.offset + len(o.data); end > len(b.data) {
			b.data = append(b.data, make([]byte, end-len(b.data))...)
		}
		copy(b.data[o.offset:], o.data)
		return o.offset, nil
	case "append":
		offset = len(b.data)
		b.data = append(b.data, o.data...)
		return offset, nil
	case "truncate":
		if o.size <= len(b.data) {
			b.data = b.data[:o.size:o.size]
		} else {
			b.data = append(b.data, make([]byte, o.size-len(b.data))...)
		}
	case "delete":
		b.exists, b.data = false, nil
	}
	return 0, nil
}

func TestModel(t *testing.T) {
	seed := seedFromEnv(t)
	ops := intFromEnv(t, "TYR_MODEL_OPS", 1700)
	// A short version retention makes the collector delete superseded page
	// versions while the test runs: it must never delete a visible one.
	srv := testserver.Start(t, "--version-retention", "1s")
	c := srv.Client()
	for _, pass := range []struct {
		name  string
		mvcc  bool
		blobs int
		ops   int
	}{
		{"mvcc", true, 6, ops},
		{"nomvcc", false, 3, max(ops/3, 1)},
	} {
		t.Run(pass.name, func(t *testing.T) {
			ks := "model-" + pass.name
			if _, err := c.CreateKeyspace(context.Background(), ks,
				client.KeyspaceConfig{ChunkSize: modelChunk, MVCC: pass.mvcc, Sync: false}); err != nil {
				t.Fatal(err)
			}
			runModel(t, []*client.Client{c}, ks, seed, pass.mvcc, pass.blobs, pass.ops)
		})
	}
}

// runModel drives blobs blobs of keyspace ks concurrently, ops ops each,
// blob i through clients[i % len(clients)], and checks each against its
// model after every op.
func runModel(t *testing.T, clients []*client.Client, ks string, seed uint64, mvcc bool, blobs, ops int) {
	var wg sync.WaitGroup
	total := make([]int, blobs)
	for i := 0; i < blobs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := uint64(i) << 1
			if mvcc {
				stream |= 1
			}
			m := &modelRun{t: t, c: clients[i%len(clients)], ks: ks, key: fmt.Sprintf("blob/%d", i), seed: seed, blob: i,
				r: rand.New(rand.NewPCG(seed, stream))}
			total[i] = m.run(ops)
		}()
	}
	wg.Wait()
	n := 0
	for _, v := range total {
		n += v
	}
	t.Logf("seed %d: %d ops on %d blobs (MVCC %v)", seed, n, blobs, mvcc)
}

// modelRun drives one blob.
type modelRun struct {
	t       *testing.T
	c       *client.Client
	ks, key string
	seed    uint64
	blob    int
	r       *rand.Rand
	m       modelBlob
	step    int
	history []string // recent ops, for failure messages
}

var errModelFailed = errors.New("model mismatch")

func (m *modelRun) fail(format string, args ...any) error {
	m.t.Helper()
	m.t.Errorf("seed %d (TYR_SEED=%d) keyspace %s blob %d (%s) op #%d: %s\nrecent ops, oldest first:\n  %s",
		m.seed, m.seed, m.ks, m.blob, m.key, m.step, fmt.Sprintf(format, args...), strings.Join(m.history, "\n  "))
	return errModelFailed
}

func (m *modelRun) note(format string, args ...any) {
	m.history = append(m.history, fmt.Sprintf("#%d ", m.step)+fmt.Sprintf(format, args...))
	if len(m.history) > 25 {
		m.history = m.history[1:]
	}
}

// run performs n random ops (after a create, before a final full read)
// and returns how many it performed.
func (m *modelRun) run(n int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	done := 0
	if err := m.commit(ctx, modelOp{kind: "create"}); err != nil {
		return done
	}
	sparse := 0 // ops left before a sparse blob is truncated back
	for m.step = 1; m.step <= n; m.step++ {
		done++
		var err error
		size := len(m.m.data)
		switch p := m.r.IntN(100); {
		case sparse == 1 || (sparse == 0 && size > modelSizeSoft && p < 60):
			sparse = 0
			err = m.commit(ctx, modelOp{kind: "truncate", size: m.r.IntN(modelSizeSoft)})
		case sparse == 0 && p < 1 && m.m.exists:
			sparse = 4
			err = m.commit(ctx, modelOp{kind: "write", offset: modelSparse/4 + m.r.IntN(modelSparse*3/4),
				data: randomBytes(m.r, 1+m.r.IntN(3*modelChunk))})
		case p < 2:
			err = m.deleteRecreate(ctx)
		case p < 38:
			err = m.commit(ctx, m.genWrite())
		case p < 46:
			err = m.commit(ctx, modelOp{kind: "append", data: randomBytes(m.r, m.genLength())})
		case p < 54:
			err = m.commit(ctx, m.genTruncate())
		case p < 60:
			err = m.multiCommit(ctx)
		case p < 65:
			err = m.stat(ctx)
		case p < 66:
			err = m.readAll(ctx)
		default:
			err = m.readRange(ctx)
		}
		if sparse > 1 {
			sparse--
		}
		if err != nil {
			return done
		}
	}
	m.step = n + 1
	_ = m.readAll(ctx)
	return done
}

// genOffset picks an offset for a write of a blob of size bytes: often near
// a chunk or page boundary, sometimes past the end.
func (m *modelRun) genOffset(size int) int {
	r := m.r
	switch p := r.IntN(10); {
	case p < 3:
		return max(0, r.IntN(size/modelChunk+3)*modelChunk+r.IntN(64)-48)
	case p < 5:
		return max(0, r.IntN(size/modelPage+2)*modelPage+r.IntN(512)-384)
	case p < 9:
		return r.IntN(size + 1)
	default:
		return size + r.IntN(3*modelPage)
	}
}

// genLength picks a data length: small, around a chunk, or spanning pages.
func (m *modelRun) genLength() int {
	r := m.r
	switch p := r.IntN(40); {
	case p < 14:
		return 1 + r.IntN(64)
	case p < 32:
		return 1 + r.IntN(3*modelChunk)
	case p < 39:
		return 1 + r.IntN(modelPage+modelChunk)
	default:
		return modelPage + r.IntN(2*modelPage)
	}
}

func (m *modelRun) genWrite() modelOp {
	return modelOp{kind: "write", offset: m.genOffset(len(m.m.data)), data: randomBytes(m.r, m.genLength()),
		create: m.r.IntN(4) == 0}
}

func (m *modelRun) genTruncate() modelOp {
	size := len(m.m.data)
	r := m.r
	switch p := r.IntN(10); {
	case p < 4: // shrink
		return modelOp{kind: "truncate", size: r.IntN(size + 1)}
	case p < 6: // to a chunk or page boundary, or just off it
		unit := []int{modelChunk, modelPage}[r.IntN(2)]
		return modelOp{kind: "truncate", size: max(0, r.IntN(size/unit+2)*unit+r.IntN(3)-1)}
	case p < 7: // same size
		return modelOp{kind: "truncate", size: size}
	default: // extend
		return modelOp{kind: "truncate", size: size + 1 + r.IntN(2*modelPage)}
	}
}

// commit runs one single-op commit and checks its answer.
func (m *modelRun) commit(ctx context.Context, o modelOp) error {
	return m.commitOps(ctx, []modelOp{o})
}

// commitOps runs one commit of ops on the blob and checks it against the
// model: either every op applies, or the first failing op's error class is
// returned and nothing changes.
func (m *modelRun) commitOps(ctx context.Context, ops []modelOp) error {
	names := make([]string, len(ops))
	cops := make([]client.Op, len(ops))
	for i, o := range ops {
		names[i] = o.String()
		cops[i] = o.clientOp(m.key)
	}
	m.note("commit %s", strings.Join(names, ", "))
	next := modelBlob{data: bytes.Clone(m.m.data), exists: m.m.exists, version: m.m.version}
	offsets := make([]int, len(ops))
	var wantErr error
	for i, o := range ops {
		off, err := next.apply(o)
		if err != nil {
			wantErr = err
			break
		}
		offsets[i] = off
	}
	res, err := m.c.Commit(ctx, m.ks, cops...)
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			return m.fail("commit %v: got error %v, want %v", names, err, wantErr)
		}
		return m.stat(ctx) // nothing changed
	}
	if err != nil {
		return m.fail("commit %v: %v", names, err)
	}
	for i, o := range ops {
		r := res[i]
		if (o.kind == "write" || o.kind == "append") && r.Offset != uint64(offsets[i]) {
			return m.fail("commit %v: op %d landed at %d, want %d", names, i, r.Offset, offsets[i])
		}
		wantSize := uint64(len(next.data))
		if r.Size != wantSize {
			return m.fail("commit %v: op %d reports size %d, want %d", names, i, r.Size, wantSize)
		}
		if next.exists && r.Version <= m.m.version {
			return m.fail("commit %v: op %d reports version %d, not above the previous %d",
				names, i, r.Version, m.m.version)
		}
		if !next.exists && r.Version != 0 {
			return m.fail("commit %v: op %d reports version %d after a delete, want 0", names, i, r.Version)
		}
		if r.Version != res[0].Version {
			return m.fail("commit %v: op %d reports version %d, op 0 %d", names, i, r.Version, res[0].Version)
		}
	}
	if next.exists {
		next.version = res[0].Version
	}
	m.m = next
	return nil
}

// multiCommit commits 2 to 5 ops on the blob at once, sometimes with a
// delete and re-create in the middle, sometimes with an op that must fail.
func (m *modelRun) multiCommit(ctx context.Context) error {
	r := m.r
	n := 2 + r.IntN(4)
	ops := make([]modelOp, 0, n)
	for len(ops) < n {
		switch p := r.IntN(20); {
		case p < 7:
			o := m.genWrite()
			o.create = false
			ops = append(ops, o)
		case p < 10:
			ops = append(ops, modelOp{kind: "append", data: randomBytes(r, m.genLength())})
		case p < 16:
			ops = append(ops, m.genTruncate())
		case p < 18:
			ops = append(ops, modelOp{kind: "delete"}, modelOp{kind: "create"})
		case p < 19:
			ops = append(ops, modelOp{kind: "delete"},
				modelOp{kind: []string{"write", "append"}[r.IntN(2)], data: randomBytes(r, m.genLength()),
					offset: r.IntN(3 * modelPage), create: true})
		default:
			ops = append(ops, modelOp{kind: "create"}) // fails: the blob exists (unless deleted before)
		}
	}
	return m.commitOps(ctx, ops)
}

// deleteRecreate deletes the blob, checks it is gone, and creates it again
// in one of three ways.
func (m *modelRun) deleteRecreate(ctx context.Context) error {
	if !m.m.exists {
		return m.commit(ctx, modelOp{kind: "create"})
	}
	if err := m.commit(ctx, modelOp{kind: "delete"}); err != nil {
		return err
	}
	// m.m.version still holds the deleted blob's version: the re-created
	// blob's versions must be above it.
	if _, err := m.c.Stat(ctx, m.ks, m.key); !errors.Is(err, client.ErrNotFound) {
		return m.fail("stat after delete: %v, want ErrNotFound", err)
	}
	if _, _, err := m.c.ReadPart(ctx, m.ks, m.key, 0, 10); !errors.Is(err, client.ErrNotFound) {
		return m.fail("read after delete: %v, want ErrNotFound", err)
	}
	switch m.r.IntN(4) {
	case 0:
		return m.commit(ctx, modelOp{kind: "create"})
	case 1:
		return m.commit(ctx, modelOp{kind: "write", create: true, offset: m.r.IntN(2 * modelPage),
			data: randomBytes(m.r, m.genLength())})
	case 2:
		return m.commit(ctx, modelOp{kind: "append", create: true, data: randomBytes(m.r, m.genLength())})
	default:
		return m.commit(ctx, modelOp{kind: "write", offset: 10}) // fails: ErrNotFound
	}
}

func (m *modelRun) stat(ctx context.Context) error {
	m.note("stat")
	st, err := m.c.Stat(ctx, m.ks, m.key)
	if !m.m.exists {
		if !errors.Is(err, client.ErrNotFound) {
			return m.fail("stat of a missing blob: %+v, %v; want ErrNotFound", st, err)
		}
		return nil
	}
	if err != nil {
		return m.fail("stat: %v", err)
	}
	if st.Key != m.key || st.Size != uint64(len(m.m.data)) || st.Version != m.m.version {
		return m.fail("stat: key %q size %d version %d; want %q, %d, %d",
			st.Key, st.Size, st.Version, m.key, len(m.m.data), m.m.version)
	}
	return nil
}

// readRange reads a random range, often crossing boundaries or the end, in
// one request, and checks bytes, size and version.
func (m *modelRun) readRange(ctx context.Context) error {
	size := len(m.m.data)
	r := m.r
	var off int
	switch p := r.IntN(10); {
	case p < 6:
		off = r.IntN(size + 1)
	case p < 8:
		off = max(0, r.IntN(size/modelPage+2)*modelPage+r.IntN(256)-200)
	case p < 9:
		off = max(0, size-r.IntN(2*modelChunk))
	default:
		off = size + r.IntN(modelPage)
	}
	length := 0
	switch p := r.IntN(20); {
	case p < 1:
		length = 0
	case p < 9:
		length = 1 + r.IntN(100)
	case p < 15:
		length = 1 + r.IntN(3*modelChunk)
	case p < 19:
		length = 1 + r.IntN(2*modelPage)
	default:
		length = 1 + r.IntN(modelSizeSoft)
	}
	m.note("read [%d,+%d)", off, length)
	got, info, err := m.c.ReadPart(ctx, m.ks, m.key, uint64(off), uint64(length))
	if !m.m.exists {
		if !errors.Is(err, client.ErrNotFound) {
			return m.fail("read of a missing blob: %v, want ErrNotFound", err)
		}
		return nil
	}
	if err != nil {
		return m.fail("read [%d,+%d): %v", off, length, err)
	}
	want := []byte{}
	if off < size {
		want = m.m.data[off:min(size, off+length)]
	}
	if !bytes.Equal(got, want) {
		return m.fail("read [%d,+%d) of a %d-byte blob: %s", off, length, size, describeDiff(got, want))
	}
	if info.Size != uint64(size) || info.Version != m.m.version {
		return m.fail("read [%d,+%d): size %d version %d, want %d, %d", off, length, info.Size, info.Version,
			size, m.m.version)
	}
	return nil
}

// readAll reads the whole blob (in parts when large) and a little past it.
func (m *modelRun) readAll(ctx context.Context) error {
	m.note("read all")
	got, err := m.c.Read(ctx, m.ks, m.key, 0, uint64(len(m.m.data))+100)
	if !m.m.exists {
		if !errors.Is(err, client.ErrNotFound) {
			return m.fail("read of a missing blob: %v, want ErrNotFound", err)
		}
		return nil
	}
	if err != nil {
		return m.fail("read all: %v", err)
	}
	if !bytes.Equal(got, m.m.data) {
		return m.fail("read all: %s", describeDiff(got, m.m.data))
	}
	return nil
}
