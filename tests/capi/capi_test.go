// Package capi tests libtyr, the C API of tyr, as a C program sees it:
// libtyr is built and installed with scripts/install-libtyr.sh into a
// temporary prefix, the C test (libtyr/test/tyr_test.c), the example and
// the MPI example are compiled against that install with pkg-config, and
// run against a 3-node cluster of real server processes.
//
// It needs a C compiler, pkg-config and MPICH (mpicc, mpiexec); when one
// is missing the test fails and says so: scripts/deps.sh installs them.
package capi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

const (
	// keyspace holds the C test's blobs: 2 replicas on 3 nodes, so a
	// blob's replicas are not every node and requests are routed.
	keyspace = "capi"
	// mpiKeyspace is created by mpi_blocks itself.
	mpiKeyspace = "capi-mpi"
	// mpiRanks is the number of MPI ranks, more than the nodes: two
	// ranks share one.
	mpiRanks = 4
	// installMax bounds building and installing libtyr and compiling the
	// programs; runMax bounds each program's run.
	installMax = 10 * time.Minute
	runMax     = 5 * time.Minute
)

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// requireTools fails the test, naming what is missing, unless every
// program the test runs is on PATH.
func requireTools(t *testing.T) {
	var missing []string
	for _, tool := range []string{"cc", "pkg-config", "mpicc", "mpiexec", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("missing on PATH: %s; the C API's tests need a C compiler, pkg-config and MPICH: "+
			"run scripts/deps.sh (make test does), or apt-get install gcc pkg-config mpich libmpich-dev",
			strings.Join(missing, ", "))
	}
}

// programs are the C programs built against the installed libtyr.
type programs struct {
	prefix                   string
	test, example, mpiBlocks string
	log                      strings.Builder
}

// run runs a command of the build in dir with env added, logging it and
// its output; a failure is returned with the output.
func (p *programs) run(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	fmt.Fprintf(&p.log, "$ %s %s\n%s", name, strings.Join(args, " "), out)
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// build installs libtyr into a prefix under dir with
// scripts/install-libtyr.sh, checks the install, and compiles the C
// programs with the flags pkg-config gives for it.
func build(ctx context.Context, root, dir string) (*programs, error) {
	ctx, cancel := context.WithTimeout(ctx, installMax)
	defer cancel()
	p := &programs{prefix: filepath.Join(dir, "prefix")}
	if _, err := p.run(ctx, root, nil, filepath.Join(root, "scripts", "install-libtyr.sh"), p.prefix); err != nil {
		return p, err
	}

	// The install: the library, the hand-written header (not cgo's), the
	// .pc file.
	header, err := os.ReadFile(filepath.Join(root, "libtyr", "tyr.h"))
	if err != nil {
		return p, err
	}
	installed, err := os.ReadFile(filepath.Join(p.prefix, "include", "tyr.h"))
	if err != nil {
		return p, err
	}
	if !bytes.Equal(installed, header) {
		return p, errors.New("the installed include/tyr.h differs from libtyr/tyr.h")
	}
	if _, err := os.Stat(filepath.Join(p.prefix, "include", "libtyr.h")); err == nil {
		return p, errors.New("cgo's generated libtyr.h was installed")
	}
	if fi, err := os.Stat(filepath.Join(p.prefix, "lib", "libtyr.so")); err != nil || fi.Size() == 0 {
		return p, fmt.Errorf("no lib/libtyr.so installed: %v", err)
	}

	// pkg-config finds it, with the header's version and the prefix.
	pcEnv := []string{"PKG_CONFIG_PATH=" + filepath.Join(p.prefix, "lib", "pkgconfig")}
	version := regexp.MustCompile(`(?m)^#define TYR_API_VERSION (\d+)`).FindSubmatch(header)
	if version == nil {
		return p, errors.New("no TYR_API_VERSION in tyr.h")
	}
	out, err := p.run(ctx, dir, pcEnv, "pkg-config", "--modversion", "tyr")
	if err != nil {
		return p, err
	}
	if got := strings.TrimSpace(out); got != string(version[1]) {
		return p, fmt.Errorf("pkg-config --modversion tyr: %q, want the header's TYR_API_VERSION %s", got, version[1])
	}
	out, err = p.run(ctx, dir, pcEnv, "pkg-config", "--variable=libdir", "tyr")
	if err != nil {
		return p, err
	}
	libdir := strings.TrimSpace(out)
	if libdir != filepath.Join(p.prefix, "lib") {
		return p, fmt.Errorf("pkg-config libdir %q, want %q", libdir, filepath.Join(p.prefix, "lib"))
	}
	out, err = p.run(ctx, dir, pcEnv, "pkg-config", "--cflags", "--libs", "tyr")
	if err != nil {
		return p, err
	}
	flags := strings.Fields(out)
	if !strings.Contains(out, "-I"+filepath.Join(p.prefix, "include")) || !strings.Contains(out, "-ltyr") {
		return p, fmt.Errorf("pkg-config --cflags --libs tyr: %q", out)
	}
	// The programs find the library where it was installed.
	flags = append(flags, "-Wl,-rpath,"+libdir)

	// The header on its own, strictly: C99, pedantic, every warning an
	// error.
	hdr := filepath.Join(dir, "header.c")
	if err := os.WriteFile(hdr, []byte("#include <tyr.h>\nint main(void) { return tyr_api_version() == TYR_API_VERSION ? 0 : 1; }\n"), 0o644); err != nil {
		return p, err
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return p, err
	}
	hdrBin := filepath.Join(bin, "header")
	if _, err := p.run(ctx, dir, nil, "cc", append([]string{"-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror",
		"-o", hdrBin, hdr}, flags...)...); err != nil {
		return p, err
	}
	// The library it loads says the header's version.
	if _, err := p.run(ctx, dir, nil, hdrBin); err != nil {
		return p, fmt.Errorf("tyr_api_version() is not the header's TYR_API_VERSION: %v", err)
	}

	p.test = filepath.Join(bin, "tyr_test")
	p.example = filepath.Join(bin, "example")
	p.mpiBlocks = filepath.Join(bin, "mpi_blocks")
	for _, c := range []struct{ cc, out, src string }{
		{"cc", p.test, "libtyr/test/tyr_test.c"},
		{"cc", p.example, "libtyr/examples/example.c"},
		{"mpicc", p.mpiBlocks, "libtyr/examples/mpi_blocks.c"},
	} {
		args := append([]string{"-O2", "-g", "-Wall", "-Wextra", "-pthread", "-o", c.out, filepath.Join(root, c.src)}, flags...)
		if _, err := p.run(ctx, dir, nil, c.cc, args...); err != nil {
			return p, err
		}
	}
	return p, nil
}

// execute runs a program (in a process group of its own, killed whole at
// runMax) and returns its combined output; the test fails if it does not
// exit 0.
func execute(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runMax)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	began := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(began).Round(time.Millisecond)
	cmdline := filepath.Base(name) + " " + strings.Join(args, " ")
	if ctx.Err() != nil {
		t.Fatalf("%s: still running after %v, killed\n%s", cmdline, runMax, out)
	}
	if err != nil {
		t.Fatalf("%s: %v after %v\n%s", cmdline, err, took, out)
	}
	t.Logf("%s: exit 0 in %v\n%s", cmdline, took, out)
	return string(out)
}

// waitKeyspace waits until every node has keyspace ks and sees every
// member alive.
func waitKeyspace(t *testing.T, clients []*client.Client, ks string) {
	t.Helper()
	testserver.WaitKeyspace(t, ks, clients...)
	for i, c := range clients {
		testserver.Eventually(t, testserver.CatalogSpreadMax, fmt.Sprintf("every member alive for node%d", i+1), func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := c.ClusterStatus(ctx)
			if err != nil {
				return false, err.Error()
			}
			if st.Alive() != len(clients) {
				return false, fmt.Sprintf("%d members alive", st.Alive())
			}
			return true, ""
		})
	}
}

// TestCAPI builds and installs libtyr, compiles the C test and the
// examples against the install, and runs them against a 3-node cluster:
// the C test of the whole API, the example, and mpi_blocks on 4 MPI
// ranks spread over the three nodes.
func TestCAPI(t *testing.T) {
	requireTools(t)
	root := repoRoot(t)
	dir := t.TempDir()

	// Build while the cluster starts.
	type built struct {
		p    *programs
		err  error
		took time.Duration
	}
	done := make(chan built, 1)
	finished := make(chan struct{})
	buildCtx, stopBuild := context.WithCancel(context.Background())
	go func() {
		defer close(finished)
		began := time.Now()
		p, err := build(buildCtx, root, dir)
		done <- built{p, err, time.Since(began)}
	}()
	// A test that ends early stops the build before its directory goes.
	t.Cleanup(func() {
		stopBuild()
		<-finished
	})

	testserver.Binary(t)
	began := time.Now()
	lc := testserver.UpCluster(t, 3)
	clients := make([]*client.Client, len(lc.Endpoints))
	for i, ep := range lc.Endpoints {
		c, err := client.Dial(ep)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := clients[0].CreateKeyspace(ctx, keyspace, client.KeyspaceConfig{
		ChunkSize: 64 << 10, Replication: 2, MVCC: true, Sync: false})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	waitKeyspace(t, clients, keyspace)
	t.Logf("3 nodes up, keyspace %s (2 replicas) on each, in %v: %s", keyspace,
		time.Since(began).Round(time.Millisecond), strings.Join(lc.Endpoints, " "))
	defer func() {
		if t.Failed() {
			t.Logf("node warnings and errors:\n%s%s", lc.LogLines("level=WARN", 20), lc.LogLines("level=ERROR", 20))
		}
	}()

	b := <-done
	if b.err != nil {
		t.Fatalf("building libtyr and the C programs: %v\nthe build's commands:\n%s", b.err, b.p.log.String())
	}
	t.Logf("libtyr built, installed in %s and the C programs compiled in %v", b.p.prefix, b.took.Round(time.Millisecond))
	p := b.p

	t.Run("tyr_test", func(t *testing.T) {
		out := execute(t, []string{"TYR_TEST_NODES=3"}, p.test, lc.Endpoints[1], keyspace)
		if !strings.Contains(out, "PASS: ") {
			t.Fatalf("tyr_test did not say PASS")
		}
	})
	t.Run("example", func(t *testing.T) {
		out := execute(t, nil, p.example, lc.Endpoints[2])
		for _, want := range []string{"get greetings/hello: hello from C", "bob has 36",
			"transfer of 1000 from bob: out of range", "accounts/alice", "code 1 (not found)", "dropped keyspace"} {
			if !strings.Contains(out, want) {
				t.Errorf("example's output lacks %q", want)
			}
		}
	})
	t.Run("mpi_blocks", func(t *testing.T) {
		out := execute(t, nil, "mpiexec", "-launcher", "fork", "-n", fmt.Sprint(mpiRanks),
			p.mpiBlocks, strings.Join(lc.Endpoints, ","), mpiKeyspace)
		if !strings.Contains(out, fmt.Sprintf("PASS: %d ranks", mpiRanks)) {
			t.Fatalf("mpi_blocks did not say PASS")
		}
		// Rank r used node r mod 3.
		for r := 0; r < mpiRanks; r++ {
			node := lc.Endpoints[r%len(lc.Endpoints)]
			used := regexp.MustCompile(fmt.Sprintf(`(?m)^rank %d/%d on \S+: node %s$`, r, mpiRanks, regexp.QuoteMeta(node)))
			if !used.MatchString(out) {
				t.Errorf("rank %d did not say it used node %s", r, node)
			}
		}
	})
}
