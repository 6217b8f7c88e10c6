package fusefs

// TestClusterFailover kills -9 the node a mount talks to, on a 3-node
// cluster, with the mount's client failing over (client.WithFailover, as
// `tyr mount` does by default). At replication 1, where the killed node
// keeps the only copy of some files: the files whose blobs, and the
// blobs of the directories on their path, are on the surviving nodes
// read and write correctly throughout, and new ones can be made beside
// them; files kept by the dead node, or under a directory it keeps, fail
// with EIO, never with wrong data; once the node is back, every file reads
// back as last written. At replication 2, where the killed node keeps a
// copy of about two files in three: every file reads and writes correctly
// through the kill. The placement of each blob is computed from the ring,
// and the counts of files on and off the dead node are checked, so that
// both kinds are exercised. Reproduce with
// `go test -race -run TestClusterFailover ./internal/fusefs`.

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/testserver"
)

// killed is the node the tests kill: the mounts' endpoint.
const killed = 1

// outage is how long the node stays down at replication 1.
const outage = 8 * time.Second

// At replication 2, calls the dead node led may fail until the survivors
// find it dead (about 6 s here: membership's probes, then its suspicion
// timeout): detectMax bounds that, and the node stays down until
// recoveredFor passed without a failure.
const (
	detectMax    = 20 * time.Second
	recoveredFor = 5 * time.Second
)

func TestClusterFailover(t *testing.T) {
	needFUSE(t)
	cl := testserver.UpCluster(t, 3)
	cl.Settled(1)
	p := cl.Placer()
	t.Run("rf1", func(t *testing.T) { failoverRF1(t, cl, p) })
	t.Run("rf2", func(t *testing.T) { failoverRF2(t, cl, p) })
}

// pathKeys are the blobs a lookup, read or write of the existing file at p
// reads: the file's, the root directory's, and for each directory on the
// way its file key (a lookup tries a file first) and its directory key.
func pathKeys(p string) []string {
	keys := []string{fslayout.FileKey(p), fslayout.DirKey("/")}
	for dir, _ := fslayout.Split(p); dir != "/"; dir, _ = fslayout.Split(dir) {
		keys = append(keys, fslayout.FileKey(dir), fslayout.DirKey(dir))
	}
	return keys
}

// failoverMount mounts ks through a client of node 1 that fails over, as
// `tyr mount` does.
func failoverMount(t *testing.T, cl *testserver.LocalCluster, ks string, rf uint32) string {
	t.Helper()
	c, err := client.Dial(cl.Endpoints[killed-1], client.WithFailover())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	newKeyspace(t, c, ks, rf, true)
	return mount(t, c, ks)
}

// pickKeyspace returns the first name prefix-N whose keyspace keeps its
// root directory off the killed node, so that files can survive it.
func pickKeyspace(t *testing.T, p testserver.Placer, prefix string, rf int) string {
	for i := range 100 {
		ks := fmt.Sprintf("%s-%d", prefix, i)
		if !p.On(ks, fslayout.DirKey("/"), rf, killed) {
			return ks
		}
	}
	t.Fatalf("no keyspace %s-N keeps its root off node %d", prefix, killed)
	return ""
}

// files is what a test wrote: path (in the file system) to contents.
type files map[string]string

func (fs files) write(t *testing.T, mnt, p, data string) error {
	t.Helper()
	err := os.WriteFile(filepath.Join(mnt, p), []byte(data), 0o644)
	if err == nil {
		fs[p] = data
	}
	return err
}

// read reads p through the mount and fails the test if it returns other
// bytes than fs holds; it returns the read's errno.
func (fs files) read(t *testing.T, mnt, p, phase string) syscall.Errno {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(mnt, p))
	if err != nil {
		return errnoOf(err)
	}
	if string(got) != fs[p] {
		t.Fatalf("%s: %s holds %d bytes %.40q..., want %d bytes %.40q...", phase, p, len(got), got, len(fs[p]), fs[p])
	}
	return 0
}

// waitAll waits, after node 1 restarted, until every file reads back as
// last written and a new file can be written, and fails the test after 2
// minutes.
func waitAll(t *testing.T, mnt string, want files) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		failed := 0
		for p := range want {
			if want.read(t, mnt, p, "node back") != 0 {
				failed++
			}
		}
		err := os.WriteFile(filepath.Join(mnt, "after"), []byte("after"), 0o644)
		if failed == 0 && err == nil {
			return time.Since(start)
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("2 minutes after node %d restarted: %d of %d files unreadable, write: %v", killed, failed, len(want), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func failoverRF1(t *testing.T, cl *testserver.LocalCluster, p testserver.Placer) {
	const rf = 1
	ks := pickKeyspace(t, p, "failover-rf1", rf)
	mnt := failoverMount(t, cl, ks, rf)
	onDead := func(key string) bool { return p.On(ks, key, rf, killed) }
	anyDead := func(keys []string) bool { return slices.ContainsFunc(keys, onDead) }

	// Two directories the dead node keeps nothing of the way to, and one
	// whose directory blob it keeps (its file key, which a lookup tries
	// first, elsewhere).
	var liveDirs []string
	deadDir := ""
	for i := 0; len(liveDirs) < 2 || deadDir == ""; i++ {
		if i == 200 {
			t.Fatalf("no directories of the wanted placement among 200 names")
		}
		d := fmt.Sprintf("/dir%d", i)
		switch {
		case !anyDead([]string{fslayout.FileKey(d), fslayout.DirKey(d)}):
			if len(liveDirs) < 2 {
				liveDirs = append(liveDirs, d)
			}
		case !onDead(fslayout.FileKey(d)) && deadDir == "":
			deadDir = d
		}
	}
	for _, d := range append(slices.Clone(liveDirs), deadDir) {
		if err := os.Mkdir(filepath.Join(mnt, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Files in the root and the live directories, live or dead by their
	// own blob; and files under the dead directory whose own blob lives.
	want := files{}
	var live, dead, underDead []string
	for _, d := range append([]string{""}, liveDirs...) {
		for i := range 20 {
			f := fmt.Sprintf("%s/f%02d", d, i)
			if err := want.write(t, mnt, f, strings.Repeat(f+" ", 10*(i+1))); err != nil {
				t.Fatal(err)
			}
			if anyDead(pathKeys(f)) {
				dead = append(dead, f)
			} else {
				live = append(live, f)
			}
		}
	}
	for i := 0; len(underDead) < 5; i++ {
		f := fmt.Sprintf("%s/f%02d", deadDir, i)
		if onDead(fslayout.FileKey(f)) {
			continue
		}
		if err := want.write(t, mnt, f, strings.Repeat(f+" ", 10*(i+1))); err != nil {
			t.Fatal(err)
		}
		underDead = append(underDead, f)
	}
	t.Logf("keyspace %s: %d files node %d keeps nothing of the way to, %d it keeps the blob of, %d under %s whose blob it keeps",
		ks, len(live), killed, len(dead), len(underDead), deadDir)
	if len(live) < 10 || len(dead) < 5 {
		t.Fatalf("%d live and %d dead files, want 10 and 5 at least: the placement does not exercise both", len(live), len(dead))
	}
	// New names to make while the node is down.
	var newLive, newDead []string
	for i := 0; len(newLive) < 5 || len(newDead) < 2; i++ {
		f := fmt.Sprintf("%s/new%02d", liveDirs[i%2], i)
		switch {
		case !anyDead(append(pathKeys(f), fslayout.DirKey(f))):
			newLive = append(newLive, f)
		case onDead(fslayout.FileKey(f)):
			newDead = append(newDead, f)
		}
	}

	cl.Signal(killed, syscall.SIGKILL)
	testserver.WaitRefused(t, cl.Endpoints[killed-1])
	start := time.Now()
	var reads, writes, eio int
	for round := 0; round == 0 || time.Since(start) < outage; round++ {
		phase := fmt.Sprintf("node %d down, round %d", killed, round)
		for _, f := range live {
			if e := want.read(t, mnt, f, phase); e != 0 {
				t.Fatalf("%s: live file %s: %v, want its bytes", phase, f, e)
			}
			reads++
		}
		for i, f := range live {
			if i%3 != round%3 {
				continue
			}
			if err := want.write(t, mnt, f, fmt.Sprintf("%s rewritten in round %d\n", f, round)); err != nil {
				t.Fatalf("%s: write of live file %s: %v", phase, f, err)
			}
			writes++
		}
		for _, f := range append(slices.Clone(dead), underDead...) {
			if e := want.read(t, mnt, f, phase); e != syscall.EIO {
				t.Fatalf("%s: %s, kept by the dead node: errno %v, want EIO", phase, f, e)
			}
			eio++
		}
		if round == 0 {
			for _, f := range newLive {
				if err := want.write(t, mnt, f, f+" made while node 1 was down\n"); err != nil {
					t.Fatalf("%s: create %s: %v", phase, f, err)
				}
				writes++
			}
			for _, f := range newDead {
				err := os.WriteFile(filepath.Join(mnt, f), []byte("x"), 0o644)
				if e := errnoOf(err); e != syscall.EIO {
					t.Fatalf("%s: create %s, kept by the dead node: %v, want EIO", phase, f, err)
				}
				eio++
			}
			if err := os.WriteFile(filepath.Join(mnt, dead[0]), []byte("lost"), 0o644); errnoOf(err) != syscall.EIO {
				t.Fatalf("%s: write of %s, kept by the dead node: %v, want EIO", phase, dead[0], err)
			}
		}
	}
	t.Logf("node %d down %v: %d reads and %d writes of live files, all correct; %d calls on its files EIO",
		killed, time.Since(start).Round(time.Millisecond), reads, writes, eio)
	cl.Start(killed)
	d := waitAll(t, mnt, want)
	for _, f := range newDead {
		if _, err := os.Lstat(filepath.Join(mnt, f)); errnoOf(err) != syscall.ENOENT {
			t.Fatalf("%s, whose creation failed, after the restart: %v, want ENOENT", f, err)
		}
	}
	t.Logf("node back: all %d files read back as last written after %v", len(want), d.Round(time.Millisecond))
}

func failoverRF2(t *testing.T, cl *testserver.LocalCluster, p testserver.Placer) {
	const rf = 2
	// Node 1 is back from rf1: wait until it serves, so that the new
	// keyspace and mount start on the whole cluster.
	c1, err := client.Dial(cl.Endpoints[killed-1])
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	testserver.Eventually(t, time.Minute, "node 1 ready", func() (bool, string) {
		err := c1.Ready(t.Context())
		return err == nil, fmt.Sprint(err)
	})
	ks := "failover-rf2"
	mnt := failoverMount(t, cl, ks, rf)
	want := files{}
	var onKilled, offKilled int
	for _, d := range []string{"", "/a", "/b"} {
		if d != "" {
			if err := os.Mkdir(filepath.Join(mnt, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 15 {
			f := fmt.Sprintf("%s/f%02d", d, i)
			if err := want.write(t, mnt, f, strings.Repeat(f+" ", 10*(i+1))); err != nil {
				t.Fatal(err)
			}
			if p.On(ks, fslayout.FileKey(f), rf, killed) {
				onKilled++
			} else {
				offKilled++
			}
		}
	}
	t.Logf("node %d keeps a copy of %d of %d files", killed, onKilled, len(want))
	if onKilled < 5 || offKilled < 3 {
		t.Fatalf("node %d keeps a copy of %d files and not of %d: want 5 and 3 at least", killed, onKilled, offKilled)
	}

	cl.Signal(killed, syscall.SIGKILL)
	testserver.WaitRefused(t, cl.Endpoints[killed-1])
	start := time.Now()
	paths := slices.Sorted(maps.Keys(want))
	// Until the survivors find the node dead, they still send it the
	// reads and commits it leads, and those fail with EIO; from then on,
	// every call succeeds. Rounds run until recoveredFor passed without a
	// failure.
	var reads, writes, failed int
	var lastFailure time.Duration // since the kill; 0: none
	var recovered time.Time       // start of the first round after the last failure
	fail := func(what string, err error) {
		t.Helper()
		if e := errnoOf(err); e != syscall.EIO {
			t.Fatalf("%s: %v, want success or, until the node is found dead, EIO", what, err)
		}
		failed++
		lastFailure = time.Since(start)
		recovered = time.Time{}
	}
	for round := 0; recovered.IsZero() || time.Since(recovered) < recoveredFor; round++ {
		if time.Since(start) > detectMax+recoveredFor {
			t.Fatalf("node %d down %v: calls still fail (%d in all, the last %v after the kill), want none after %v",
				killed, time.Since(start).Round(time.Millisecond), failed, lastFailure.Round(time.Millisecond), detectMax)
		}
		if recovered.IsZero() {
			recovered = time.Now()
		}
		phase := fmt.Sprintf("node %d down, round %d", killed, round)
		for _, f := range paths {
			if e := want.read(t, mnt, f, phase); e != 0 {
				fail(phase+": read "+f, e)
			}
			reads++
		}
		for i, f := range paths {
			if i%4 != round%4 {
				continue
			}
			if err := want.write(t, mnt, f, fmt.Sprintf("%s rewritten in round %d\n", f, round)); err != nil {
				fail(phase+": write "+f, err)
			}
			writes++
		}
		f := fmt.Sprintf("/a/new%02d", round)
		if err := want.write(t, mnt, f, f+" made while node 1 was down\n"); err != nil {
			fail(phase+": create "+f, err)
		}
		writes++
	}
	if lastFailure > detectMax {
		t.Fatalf("the last call failed %v after the kill, want none after %v", lastFailure, detectMax)
	}
	t.Logf("node %d down %v: %d reads and %d writes; %d failed with EIO, the last %v after the kill; none after that, for %v",
		killed, time.Since(start).Round(time.Millisecond), reads, writes, failed, lastFailure.Round(time.Millisecond), recoveredFor)
	cl.Start(killed)
	d := waitAll(t, mnt, want)
	t.Logf("node back: all %d files read back as last written after %v", len(want), d.Round(time.Millisecond))
}
