// Package testserver builds the tyr binary once per test binary and runs real
// tyr server processes for end-to-end tests: start, kill -9, restart on the
// same data directory.
package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
)

var (
	buildMu sync.Mutex
	builds  = map[string]buildResult{} // by build tags
)

type buildResult struct {
	path string
	err  error
}

// Binary returns the path of a freshly built tyr binary, built once per test
// process (see build).
func Binary(t testing.TB) string { return BinaryWithTags(t, "") }

// BinaryWithTags is Binary built with the given build tags (comma-separated),
// once per distinct tags per test process.
func BinaryWithTags(t testing.TB, tags string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if b, ok := builds[tags]; ok {
		if b.err != nil {
			t.Fatal(b.err)
		}
		return b.path
	}
	b := build(tags)
	builds[tags] = b
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// build builds the tyr binary with tags into build/testbin/KIND/tyr under
// the project's root, one file per kind (race detector or not, tags), which
// the test processes share: each builds it anew from the sources (cheap,
// from Go's build cache) into a file of its own, then renames that over
// the shared one. A process still running the old file keeps it, and the
// directory holds one binary per kind, not one per test process that
// ever ran (a temporary directory each, never removed, filled the disk).
func build(tags string) buildResult {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	// A directory per kind, the binary named tyr in each, as commands
	// that find it on PATH (the README's tour) call it.
	kind := "plain"
	if raceEnabled {
		kind = "race"
	}
	if tags != "" {
		kind += "-" + strings.ReplaceAll(tags, ",", "-")
	}
	dir := filepath.Join(root, "build", "testbin", kind)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return buildResult{err: err}
	}
	const name = "tyr"
	removeStaleBuilds(dir)
	tmp, err := os.CreateTemp(dir, name+".*"+buildingSuffix)
	if err != nil {
		return buildResult{err: err}
	}
	_ = tmp.Close()
	args := []string{"build", "-o", tmp.Name()}
	if raceEnabled {
		args = append(args, "-race")
	}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, "./cmd/tyr")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp.Name())
		return buildResult{err: fmt.Errorf("go build %v: %v\n%s", args, err, out)}
	}
	path := filepath.Join(dir, name)
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return buildResult{err: err}
	}
	return buildResult{path: path}
}

// buildingSuffix ends the names of binaries being built.
const buildingSuffix = ".building"

// removeStaleBuilds removes the files of builds in dir that a test
// process left when it died building (older than staleBuildAge).
func removeStaleBuilds(dir string) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range es {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), buildingSuffix) && time.Since(info.ModTime()) > staleBuildAge {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// staleBuildAge is far above the time one build takes.
const staleBuildAge = time.Hour

// Server is one running tyr server process.
type Server struct {
	t        testing.TB
	DataDir  string
	Endpoint string
	Args     []string // extra server flags
	Tags     string   // build tags of the binary to run; "" for the real one
	cmd      *exec.Cmd
	logPath  string
}

// Start runs a server on a fresh data directory and a free loopback port.
// It is stopped (SIGKILL) when the test ends.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return StartTagged(t, "", args...)
}

// StartTagged is Start with a binary built with the given build tags.
func StartTagged(t testing.TB, tags string, args ...string) *Server {
	t.Helper()
	s := &Server{t: t, DataDir: t.TempDir(), Args: args, Tags: tags}
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// Restart starts the server process again on the same data directory and
// port (a fresh port the first time). The previous process must be stopped.
func (s *Server) Restart() {
	s.t.Helper()
	dir := s.t.TempDir()
	ready := filepath.Join(dir, "ready")
	s.logPath = filepath.Join(dir, "server.log")
	logFile, err := os.Create(s.logPath)
	if err != nil {
		s.t.Fatal(err)
	}
	defer logFile.Close()
	listen := "127.0.0.1:0"
	if s.Endpoint != "" {
		listen = s.Endpoint
	}
	args := append([]string{"server", "--data", s.DataDir, "--listen", listen, "--ready-file", ready,
		"--log-level", "debug"}, s.Args...)
	var lastErr error
	for attempt := 0; attempt < 50; attempt++ {
		cmd := exec.Command(BinaryWithTags(s.t, s.Tags), args...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := StartTied(cmd); err != nil {
			s.t.Fatal(err)
		}
		s.cmd = cmd
		if addr, err := waitReady(cmd, ready); err == nil {
			s.Endpoint = addr
			return
		} else {
			lastErr = err
		}
		// The port may still be held by the killed process: retry.
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("server did not start: %v\n%s", lastErr, s.Log())
}

// waitReady waits until the server is ready, that is serves reads: it
// wrote its ready file, and its health service says it serves
// (client.Client.Ready). It returns the address from the ready file.
func waitReady(cmd *exec.Cmd, ready string) (string, error) {
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	addr := ""
	var c *client.Client
	defer func() {
		if c != nil {
			_ = c.Close()
		}
	}()
	last := "no ready file"
	for time.Now().Before(deadline) {
		if addr == "" {
			if b, err := os.ReadFile(ready); err == nil && len(b) > 0 {
				_ = os.Remove(ready)
				addr = strings.TrimSpace(string(b))
				if c, err = client.Dial(addr, client.WithoutRouting()); err != nil {
					_ = cmd.Process.Kill()
					return "", err
				}
			}
		}
		if c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := c.Ready(ctx)
			cancel()
			if err == nil {
				go func() { <-exited }()
				return addr, nil
			}
			last = fmt.Sprintf("ready file written, but health: %v", err)
		}
		select {
		case err := <-exited:
			return "", fmt.Errorf("server exited: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	_ = cmd.Process.Kill()
	return "", fmt.Errorf("server not ready after 30s: %s", last)
}

// Kill stops the server with SIGKILL, as a crash would. It is a no-op if the
// server is not running.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	for i := 0; i < 500; i++ {
		if err := s.cmd.Process.Signal(syscall.Signal(0)); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd = nil
}

// Stop stops the server with SIGTERM and waits for it to exit.
func (s *Server) Stop() error {
	if s.cmd == nil {
		return nil
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	for i := 0; i < 1000; i++ {
		if err := s.cmd.Process.Signal(syscall.Signal(0)); err != nil {
			s.cmd = nil
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("server did not exit 10s after SIGTERM")
}

// Log returns what the server printed so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// Client dials the server; the client is closed when the test ends.
func (s *Server) Client() *client.Client {
	s.t.Helper()
	c, err := client.Dial(s.Endpoint)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}
