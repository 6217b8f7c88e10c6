package tyrfs

// Fetch and the server's metadata service (internal/fsmeta): permission
// checks on one server, then popularity-based copies of directories'
// permissions and their synchronous invalidation on a 3-node cluster at
// replication 1, where files and their directories sit on different
// nodes. Reproduce with `go test -race -run TestFetch ./tyrfs`.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fsmeta"
	"github.com/tyrstore/tyr/internal/testserver"
)

func ptr[T any](v T) *T { return &v }

// TestFetchPermissions: Fetch refuses, for the credentials it acts as,
// what POSIX would: search on every ancestor, read on the file.
func TestFetchPermissions(t *testing.T) {
	ctx, _, f := newFS(t)
	alice, bob, carol := Cred{UID: 1000, GIDs: []uint32{100}}, Cred{UID: 2000, GIDs: []uint32{100}}, Cred{UID: 3000, GIDs: []uint32{300}}
	must[Attr](t)(f.Mkdir(ctx, "/d", Owner{Mode: 0o755}))
	must[Attr](t)(f.Mkdir(ctx, "/d/s", Owner{UID: 1000, GID: 100, Mode: 0o700}))
	must[Attr](t)(f.Create(ctx, "/d/f", Owner{UID: 1000, GID: 100, Mode: 0o640}))
	must[Attr](t)(f.Create(ctx, "/d/s/g", Owner{UID: 1000, GID: 100, Mode: 0o644}))
	if err := f.WriteAt(ctx, "/d/f", 0, []byte("data")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		who  Cred
		p    string
		want syscall.Errno
	}{
		{alice, "/d/f", 0},
		{bob, "/d/f", 0},                // group read
		{carol, "/d/f", syscall.EACCES}, // others: none
		{Cred{}, "/d/f", 0},             // root
		{alice, "/d/s/g", 0},
		{bob, "/d/s/g", syscall.EACCES}, // no search on /d/s
		{Cred{}, "/d/s/g", 0},
		{alice, "/d/none", syscall.ENOENT},
		{alice, "/d/none/x", syscall.ENOENT},
		{alice, "/d/f/x", syscall.ENOTDIR},
		{alice, "/d", syscall.EISDIR},
		{alice, "/", syscall.EISDIR},
		{alice, "d/f", syscall.EINVAL},
	} {
		a, data, err := f.As(c.who).Fetch(ctx, c.p)
		if got := Errno(err); got != c.want {
			t.Fatalf("uid %d fetch %s: %v (errno %v), want errno %v", c.who.UID, c.p, err, got, c.want)
		}
		if c.want == 0 && c.p == "/d/f" && (string(data) != "data" || a.Size != 4 || a.Mode != 0o640) {
			t.Fatalf("uid %d fetch %s: %q, %+v", c.who.UID, c.p, data, a)
		}
	}
	// A change to a directory's permissions applies to the next fetch.
	must[Attr](t)(f.Setattr(ctx, "/d", KindDir, SetAttr{Mode: ptr[uint32](0o700)}))
	if _, _, err := f.As(bob).Fetch(ctx, "/d/f"); Errno(err) != syscall.EACCES {
		t.Fatalf("after chmod 700 /d: %v, want EACCES", err)
	}
}

// TestFetchCluster: on 3 nodes at replication 1, fetches of many files
// under one directory, by a user the directories let in, are answered
// by the files' nodes with copies of the directories' permissions after
// the first few (the directories are popular), not a read of their
// headers each. A chmod of the directory through another node then
// refuses every next fetch at once (synchronous invalidation); with one
// node paused, the chmod waits the lease out, and the paused node, once
// resumed, does not use its old copy.
func TestFetchCluster(t *testing.T) {
	lc := testserver.UpCluster(t, 3, "--metrics")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	clients := make([]*client.Client, 3)
	for i := range clients {
		c, err := client.Dial(lc.Endpoints[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	cfg := client.DefaultKeyspaceConfig()
	cfg.Replication = 1
	if _, err := clients[0].CreateKeyspace(ctx, "tfs", cfg); err != nil {
		t.Fatal(err)
	}
	testserver.WaitKeyspace(t, "tfs", clients...)
	fss := make([]*FS, 3)
	for i, c := range clients {
		fss[i] = must[*FS](t)(New(ctx, c, "tfs"))
	}
	const files = 60
	must[Attr](t)(fss[0].Mkdir(ctx, "/data", Owner{Mode: 0o755}))
	for i := range files {
		p := fmt.Sprintf("/data/f%d", i)
		must[Attr](t)(fss[0].Create(ctx, p, Owner{UID: 1000, Mode: 0o644}))
		if err := fss[0].WriteAt(ctx, p, 0, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	bob := Cred{UID: 2000, GIDs: []uint32{200}}
	fetchAll := func(fs *FS, want syscall.Errno) {
		t.Helper()
		for i := range files {
			p := fmt.Sprintf("/data/f%d", i)
			_, data, err := fs.As(bob).Fetch(ctx, p)
			if got := Errno(err); got != want {
				t.Fatalf("fetch %s: %v (errno %v), want errno %v", p, err, got, want)
			}
			if want == 0 && string(data) != p {
				t.Fatalf("fetch %s: %q", p, data)
			}
		}
	}
	before := make([]map[string]float64, 3)
	for k := range before {
		before[k] = lookups(t, lc.MetricsAddr(k+1))
	}
	const rounds = 5
	for range rounds {
		fetchAll(fss[0], 0)
	}
	// Every fetch checks "/" and "/data/"; the files are spread, so
	// each node serving some checks both; copies answer all but the first
	// PopularMin remote lookups of each directory on each node.
	serving, total := 0, map[string]float64{}
	for k := range before {
		after := lookups(t, lc.MetricsAddr(k+1))
		n := map[string]float64{}
		for src := range after {
			n[src] = after[src] - before[k][src]
			total[src] += n[src]
		}
		t.Logf("node%d permission lookups: %v", k+1, n)
		if n["local"]+n["copy"]+n["remote"] > 0 {
			serving++
		}
		if n["remote"] > 2*fsmeta.PopularMin {
			t.Errorf("node%d read directory headers remotely %v times, want at most %d (2 directories, popular from %d requests)",
				k+1, n["remote"], 2*fsmeta.PopularMin, fsmeta.PopularMin)
		}
	}
	if serving < 2 {
		t.Fatalf("%d nodes answered fetches, want the files spread over 2 or more", serving)
	}
	if got := total["local"] + total["copy"] + total["remote"]; got != 2*files*rounds {
		t.Fatalf("%v permission lookups, want %d (2 per fetch)", got, 2*files*rounds)
	}
	if total["copy"] == 0 {
		t.Fatal("no lookup answered by a copy")
	}

	// chmod through another node: every next fetch, through any node, is
	// refused; after chmod back, allowed.
	must[Attr](t)(fss[1].Setattr(ctx, "/data", KindDir, SetAttr{Mode: ptr[uint32](0o700)}))
	fetchAll(fss[2], syscall.EACCES)
	must[Attr](t)(fss[1].Setattr(ctx, "/data", KindDir, SetAttr{Mode: ptr[uint32](0o755)}))
	fetchAll(fss[0], 0)
	fetchAll(fss[0], 0) // copies again

	// A paused member cannot be told: the chmod waits its copies' lease
	// out, and once resumed it refuses too. The paused node holds neither
	// directory (so the chmod can commit) and answered fetches with copies.
	paused, place := 0, lc.Placer()
	for k := 1; k <= 3 && paused == 0; k++ {
		if !place.On("tfs", "/", 1, k) && !place.On("tfs", "/data/", 1, k) {
			paused = k
		}
	}
	if n := lookups(t, lc.MetricsAddr(paused)); paused == 0 || n["copy"] == 0 {
		t.Fatalf("node%d holds neither directory, with lookups %v: want one that used copies", paused, n)
	}
	other := fss[paused%3] // an FS whose endpoint is another node
	fetchAll(other, 0)     // copies within their lease on every node
	lc.Signal(paused, syscall.SIGSTOP)
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			lc.Signal(paused, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume) // before the cluster is taken down
	start := time.Now()
	must[Attr](t)(other.Setattr(ctx, "/data", KindDir, SetAttr{Mode: ptr[uint32](0o700)}))
	if took := time.Since(start); took < time.Second {
		t.Fatalf("chmod with node%d paused took %v, want it to wait for the member or its lease", paused, took)
	}
	resume()
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < files; {
		p := fmt.Sprintf("/data/f%d", i)
		_, data, err := other.As(bob).Fetch(ctx, p)
		switch Errno(err) {
		case syscall.EACCES:
			i++
		case syscall.EIO, syscall.EAGAIN: // the resumed node rejoining
			if time.Now().After(deadline) {
				t.Fatalf("fetch %s: still failing after a minute: %v", p, err)
			}
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("fetch %s after chmod 700 with node%d paused: %q, %v; want EACCES", p, paused, data, err)
		}
	}
}

// TestWriteFile: WriteFile makes a file with its bytes in one
// transaction, beyond WriteFileBytesMax in parts, and refuses a name that
// is taken or a missing parent.
func TestWriteFile(t *testing.T) {
	ctx, _, f := newFS(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), (WriteFileBytesMax+100)/16)
	for p, data := range map[string][]byte{"/empty": nil, "/small": []byte("hi"), "/big": big} {
		a, err := f.WriteFile(ctx, p, Owner{UID: 7, Mode: 0o600}, data)
		if err != nil {
			t.Fatal(err)
		}
		if a.Size != uint64(len(data)) || a.UID != 7 || a.Mode != 0o600 || a.Kind != KindFile {
			t.Fatalf("%s: %+v", p, a)
		}
		_, got, err := f.Fetch(ctx, p)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: read back %d bytes, %v; want %d", p, len(got), err, len(data))
		}
	}
	if _, err := f.WriteFile(ctx, "/small", Owner{Mode: 0o644}, []byte("x")); Errno(err) != syscall.EEXIST {
		t.Fatalf("over an existing file: %v, want EEXIST", err)
	}
	if _, err := f.WriteFile(ctx, "/none/x", Owner{Mode: 0o644}, []byte("x")); Errno(err) != syscall.ENOENT {
		t.Fatalf("in a missing directory: %v, want ENOENT", err)
	}
	if got := names(t, ctx, f, "/"); !slices.Equal(got, []string{"big:file", "empty:file", "small:file"}) {
		t.Fatalf("root lists %v", got)
	}
}

// TestLookupGuess: whatever the guess, LookupGuess finds what is there.
func TestLookupGuess(t *testing.T) {
	ctx, _, f := newFS(t)
	must[Attr](t)(f.Mkdir(ctx, "/d", Owner{Mode: 0o755}))
	must[Attr](t)(f.Create(ctx, "/f", Owner{Mode: 0o644}))
	for _, c := range []struct {
		p     string
		guess Kind
		want  Kind
	}{
		{"/d", KindDir, KindDir}, {"/d", KindFile, KindDir},
		{"/f", KindDir, KindFile}, {"/f", KindFile, KindFile},
		{"/", KindDir, KindDir}, {"/", KindFile, KindDir},
		{"/none", KindDir, 0}, {"/none", KindFile, 0},
	} {
		a, err := f.LookupGuess(ctx, c.p, c.guess)
		if c.want == 0 {
			if Errno(err) != syscall.ENOENT {
				t.Fatalf("%s guessing %s: %v, want ENOENT", c.p, c.guess, err)
			}
			continue
		}
		if err != nil || a.Kind != c.want {
			t.Fatalf("%s guessing %s: %v, %v; want a %s", c.p, c.guess, a.Kind, err, c.want)
		}
	}
}

// lookups returns tyr_fs_permission_lookups_total by source from the
// metrics at addr.
func lookups(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	out := testserver.Metric(t, addr, "tyr_fs_permission_lookups_total")
	if len(out) != 3 {
		t.Fatalf("metrics at %s: permission lookups by source %v, want local, copy and remote", addr, out)
	}
	return out
}

// TestFetchMany: on 3 nodes at replication 1, a batch of fetches spread
// over the nodes answers each path as Fetch does, refusals and a file
// past the first read's bound among them; a batch above FetchManyMax is
// refused whole. With a node killed, the batch gives the bytes of every
// file on the live nodes and an error, never data, for those on the dead
// one; once it is back, every file again.
func TestFetchMany(t *testing.T) {
	lc := testserver.UpCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The node to kill holds neither the root nor the batch's directory,
	// and is not the client's endpoint.
	place := lc.Placer()
	root := place.Holders("tfs", "/", 1)[0]
	killed := root%3 + 1
	dir := ""
	for i := 0; dir == ""; i++ {
		if d := fmt.Sprintf("/m%d", i); !place.On("tfs", d+"/", 1, killed) {
			dir = d
		}
	}
	cfg := client.DefaultKeyspaceConfig()
	cfg.Replication = 1
	admin := must[*client.Client](t)(client.Dial(lc.Endpoints[root-1]))
	t.Cleanup(func() { _ = admin.Close() })
	if _, err := admin.CreateKeyspace(ctx, "tfs", cfg); err != nil {
		t.Fatal(err)
	}
	f := must[*FS](t)(New(ctx, admin, "tfs"))
	must[Attr](t)(f.Mkdir(ctx, dir, Owner{Mode: 0o755}))
	const files = 40
	var paths []string
	byNode := map[int][]string{}
	for i := range files {
		p := fmt.Sprintf("%s/f%d", dir, i)
		if _, err := f.WriteFile(ctx, p, Owner{UID: 1000, Mode: 0o644}, []byte(p)); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		k := place.Holders("tfs", p, 1)[0]
		byNode[k] = append(byNode[k], p)
	}
	if len(byNode) < 2 {
		t.Fatalf("files on nodes %v: want 2 or more", byNode)
	}
	must[Attr](t)(f.WriteFile(ctx, dir+"/secret", Owner{UID: 1000, Mode: 0o600}, []byte("s")))
	big := bytes.Repeat([]byte("big."), (client.PayloadBytesMax+1000)/4)
	must[Attr](t)(f.WriteFile(ctx, dir+"/big", Owner{Mode: 0o644}, big))

	bob := f.As(Cred{UID: 2000, GIDs: []uint32{200}})
	batch := append(slices.Clone(paths), dir+"/secret", dir+"/big", dir, dir+"/none", dir+"/f1/x", "rel", paths[3])
	got, err := bob.FetchMany(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(batch) {
		t.Fatalf("%d answers for %d paths", len(got), len(batch))
	}
	for i, p := range batch {
		a, data, err := bob.Fetch(ctx, p)
		r := got[i]
		if Errno(r.Err) != Errno(err) || (err == nil) != (r.Err == nil) || !bytes.Equal(r.Data, data) || r.Attr != a {
			t.Fatalf("%s: FetchMany gave %d bytes, %+v, %v; Fetch %d bytes, %+v, %v", p, len(r.Data), r.Attr, r.Err, len(data), a, err)
		}
	}
	for i, want := range []syscall.Errno{syscall.EACCES, 0, syscall.EISDIR, syscall.ENOENT, syscall.ENOTDIR, syscall.EINVAL} {
		if e := Errno(got[files+i].Err); e != want {
			t.Fatalf("%s: errno %v, want %v", batch[files+i], e, want)
		}
	}
	if !bytes.Equal(got[files+1].Data, big) {
		t.Fatalf("%s/big: %d bytes, want %d", dir, len(got[files+1].Data), len(big))
	}
	if _, err := f.FetchMany(ctx, make([]string, FetchManyMax+1)); Errno(err) != syscall.EINVAL {
		t.Fatalf("%d paths: %v, want EINVAL", FetchManyMax+1, err)
	}

	if len(byNode[killed]) == 0 {
		t.Fatalf("no file on node%d: %v", killed, byNode)
	}
	lc.Signal(killed, syscall.SIGKILL)
	testserver.WaitRefused(t, lc.Endpoints[killed-1])
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	start := time.Now()
	got, err = f.FetchMany(dctx, paths)
	dcancel()
	t.Logf("with node%d down: the batch took %v", killed, time.Since(start))
	if err != nil {
		t.Fatal(err)
	}
	var failed int
	for i, p := range paths {
		onDead := slices.Contains(byNode[killed], p)
		switch r := got[i]; {
		case r.Err == nil && string(r.Data) != p:
			t.Fatalf("%s with node%d down: wrong data %q", p, killed, r.Data)
		case r.Err != nil && !onDead:
			t.Fatalf("%s, on a live node, with node%d down: %v", p, killed, r.Err)
		case r.Err == nil && onDead:
			t.Fatalf("%s, on the dead node%d: data", p, killed)
		case r.Err != nil:
			failed++
		}
	}
	if failed != len(byNode[killed]) {
		t.Fatalf("%d fetches failed, want the %d on node%d", failed, len(byNode[killed]), killed)
	}
	lc.Start(killed)
	restart := time.Now()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got, err = f.FetchMany(ctx, paths)
		if err != nil {
			t.Fatal(err)
		}
		failed = 0
		for i, p := range paths {
			if got[i].Err != nil {
				failed++
			} else if string(got[i].Data) != p {
				t.Fatalf("%s after the restart: wrong data %q", p, got[i].Data)
			}
		}
		if failed == 0 {
			t.Logf("every fetch answered %v after node%d started again", time.Since(restart), killed)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d fetches still failing a minute after node%d restarted", failed, killed)
		}
	}
}

// TestFetchInto: on 3 nodes at replication 1, FetchManyInto and FetchInto
// give what Fetch gives, each file read into its own buffer when it fits
// there with its header (a file past the first read's bound too) and into
// new memory when it does not; buffers reused for other files, shorter
// ones among them, show nothing of what they held; a batch with a buffer
// too many or too few is refused whole.
func TestFetchInto(t *testing.T) {
	lc := testserver.UpCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := clusterFS(ctx, t, lc)
	place := lc.Placer()
	nodes := map[int]bool{}
	var paths []string
	want := map[string][]byte{}
	for i := range 24 {
		p := fmt.Sprintf("/f%02d", i)
		data := bytes.Repeat([]byte{byte('a' + i)}, 1000+i*997)
		if i == 0 {
			data = nil
		}
		if i == 1 {
			data = bytes.Repeat([]byte("big."), (client.PayloadBytesMax+5000)/4)
		}
		must[Attr](t)(f.WriteFile(ctx, p, Owner{Mode: 0o644}, data))
		paths, want[p] = append(paths, p), data
		nodes[place.Holders("tfs", p, 1)[0]] = true
	}
	if len(nodes) < 2 {
		t.Fatalf("files on nodes %v: want 2 or more", nodes)
	}
	// inBuf reports whether data lies in buf, after the header.
	inBuf := func(data, buf []byte) bool {
		return len(data) > 0 && cap(buf) > HeaderBytes && &buf[:HeaderBytes+1][HeaderBytes] == &data[0]
	}
	bufs := make([][]byte, len(paths))
	for i, p := range paths {
		n := HeaderBytes + len(want[p])
		if i == 5 {
			n-- // one byte short: read into new memory
		}
		bufs[i] = bytes.Repeat([]byte{0xa5}, n)
	}
	check := func(round string, batch []string) {
		t.Helper()
		got, err := f.FetchManyInto(ctx, batch, bufs)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range batch {
			r := got[i]
			if r.Err != nil || !bytes.Equal(r.Data, want[p]) || r.Attr.Size != uint64(len(want[p])) {
				t.Fatalf("%s: %s into buffer %d: %d bytes, %+v, %v; want %d bytes", round, p, i, len(r.Data), r.Attr, r.Err, len(want[p]))
			}
			fits := cap(bufs[i]) >= HeaderBytes+len(want[p])
			if len(want[p]) > 0 && inBuf(r.Data, bufs[i]) != fits {
				t.Fatalf("%s: %s in buffer %d of %d bytes: %v, want %v", round, p, i, cap(bufs[i]), inBuf(r.Data, bufs[i]), fits)
			}
		}
	}
	check("own buffers", paths)
	// The buffers again, each for another file: the small files in
	// reverse, so the later buffers hold shorter files than before and
	// the earlier ones are too short.
	others := slices.Clone(paths)
	slices.Reverse(others[2:])
	check("other files", others)
	if _, err := f.FetchManyInto(ctx, paths, bufs[1:]); Errno(err) != syscall.EINVAL {
		t.Fatalf("%d paths into %d buffers: %v, want EINVAL", len(paths), len(bufs)-1, err)
	}
	for _, p := range []string{"/f01", "/f07"} {
		buf := make([]byte, HeaderBytes+len(want[p]))
		a, data, err := f.FetchInto(ctx, p, buf)
		if err != nil || !bytes.Equal(data, want[p]) || a.Size != uint64(len(want[p])) || !inBuf(data, buf) {
			t.Fatalf("FetchInto %s: %d bytes, %+v, %v, in the buffer %v", p, len(data), a, err, inBuf(data, buf))
		}
	}
	if _, _, err := f.FetchInto(ctx, "/none", make([]byte, 100)); Errno(err) != syscall.ENOENT {
		t.Fatalf("FetchInto /none: %v, want ENOENT", err)
	}
}

// TestFetchManySizes: a batch of files of every size class, around the
// bounds where the client reads an answer through its buffer or straight
// from the socket (and the next answer's header alone), in mixed order and
// twice over, into buffers and into new memory, gives every file's bytes.
func TestFetchManySizes(t *testing.T) {
	ctx, _, f := newFS(t)
	must[Attr](t)(f.Mkdir(ctx, "/s", Owner{Mode: 0o755}))
	sizes := []int{0, 1, 100, 8<<10 - HeaderBytes - 1, 8<<10 - HeaderBytes, 8 << 10, 12 << 10, 32 << 10, 40<<10 + 3,
		200 << 10, 1 << 20, client.PayloadBytesMax - HeaderBytes, client.PayloadBytesMax + 5}
	want := map[string][]byte{}
	var paths []string
	for i, n := range sizes {
		p := fmt.Sprintf("/s/f%d", i)
		want[p] = pattern(byte(i), n)
		must[Attr](t)(f.WriteFile(ctx, p, Owner{Mode: 0o644}, want[p]))
		paths = append(paths, p)
	}
	r := rand.New(rand.NewPCG(7, 7))
	for round := range 6 {
		batch := slices.Concat(paths, paths)
		r.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		var bufs [][]byte
		if round%2 == 1 {
			for range batch {
				bufs = append(bufs, make([]byte, r.IntN(64<<10)))
			}
		}
		got := must[[]FetchResult](t)(f.FetchManyInto(ctx, batch, bufs))
		for i, p := range batch {
			if got[i].Err != nil || !bytes.Equal(got[i].Data, want[p]) {
				t.Fatalf("round %d, %s (%d bytes): %d bytes, %v", round, p, len(want[p]), len(got[i].Data), got[i].Err)
			}
		}
	}
}
