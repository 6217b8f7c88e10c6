package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/testserver"
)

// TestCLIErrors runs the tyr binary on bad input and checks the promise of
// the command line: exit non-zero, nothing on stdout, and exactly one line
// "tyr: ..." on stderr that says what went wrong.
func TestCLIErrors(t *testing.T) {
	srv := testserver.Start(t)
	c := srv.Client()
	ctx := context.Background()
	if _, err := c.CreateKeyspace(ctx, "cli", client.KeyspaceConfig{ChunkSize: 4096, MVCC: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "cli", "blob", strings.NewReader("contents")); err != nil {
		t.Fatal(err)
	}
	bin := testserver.Binary(t)
	tooBig := strings.Repeat("x", client.PayloadBytesMax+1)
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  string // a part of the error line
	}{
		{"unknown keyspace", []string{"cat", "nope/blob"}, "", `not found: keyspace "nope"; retrying cannot help`},
		{"unknown keyspace put", []string{"put", "nope/blob"}, "data", `not found: keyspace "nope"`},
		{"unknown keyspace info", []string{"keyspace", "info", "nope"}, "", "not found"},
		{"unknown keyspace drop", []string{"keyspace", "drop", "nope"}, "", "not found"},
		{"missing blob cat", []string{"cat", "cli/missing"}, "", `not found: blob "missing"`},
		{"missing blob get", []string{"get", "cli/missing"}, "", "not found"},
		{"missing blob stat", []string{"stat", "cli/missing"}, "", "not found"},
		{"missing blob rm", []string{"rm", "cli/missing"}, "", "not found"},
		{"missing blob write", []string{"write", "cli/missing", "--offset", "0"}, "data", "not found"},
		{"missing blob append", []string{"append", "cli/missing"}, "data", "not found"},
		{"missing blob truncate", []string{"truncate", "cli/missing", "10"}, "", "not found"},
		{"negative offset cat", []string{"cat", "cli/blob", "--offset", "-1"}, "", "must not be negative"},
		{"negative offset get", []string{"get", "cli/blob", "--offset=-1"}, "", "must not be negative"},
		{"negative length", []string{"cat", "cli/blob", "--length", "-5"}, "", "must not be negative"},
		{"negative offset write", []string{"write", "cli/blob", "--offset", "-3"}, "data", "must not be negative"},
		{"negative size truncate", []string{"truncate", "cli/blob", "-5"}, "", "must not be negative"},
		{"negative chunk size", []string{"keyspace", "create", "neg", "--chunk-size", "-4KiB"}, "", "must not be negative"},
		{"negative limit", []string{"ls", "cli", "--limit", "-1"}, "", "--limit -1"},
		{"bad size", []string{"truncate", "cli/blob", "ten"}, "", `invalid size "ten"`},
		{"no key", []string{"cat", "cli"}, "", "want KEYSPACE/KEY"},
		{"empty key", []string{"stat", "cli/"}, "", "want KEYSPACE/KEY"},
		{"empty keyspace", []string{"put", "/blob"}, "data", "want KEYSPACE/KEY"},
		{"create existing", []string{"create", "cli/blob"}, "", "already exists"},
		{"create existing keyspace", []string{"keyspace", "create", "cli"}, "", "already exists"},
		{"append too large", []string{"append", "cli/blob"}, tooBig, "append of more than"},
		{"write without offset", []string{"write", "cli/blob"}, "data", `"offset"`},
		{"missing argument", []string{"put"}, "", "usage: tyr put"},
		{"extra argument", []string{"stat", "cli/blob", "more"}, "", "usage: tyr stat"},
		{"unknown command", []string{"frobnicate"}, "", "unknown command"},
		{"unknown keyspace command", []string{"keyspace", "frobnicate"}, "", "unknown command"},
		{"bare keyspace", []string{"keyspace"}, "", "missing command"},
		{"unknown flag", []string{"cat", "cli/blob", "--frob"}, "", "unknown flag"},
		{"missing input file", []string{"put", "cli/blob", "/nonexistent/input"}, "", "no such file"},
		{"no server", []string{"--endpoint", "127.0.0.1:1", "stat", "cli/blob"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = cliEnv(srv.Endpoint)
			cmd.Stdin = strings.NewReader(tc.stdin)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("tyr %s: %v, want a non-zero exit; stderr %q", strings.Join(tc.args, " "), err, stderr.String())
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout: %q, want nothing", stdout.String())
			}
			line, ok := strings.CutSuffix(stderr.String(), "\n")
			if !ok || strings.Contains(line, "\n") || !strings.HasPrefix(line, "tyr: ") {
				t.Fatalf("stderr %q: want exactly one line starting with \"tyr: \"", stderr.String())
			}
			if !strings.Contains(line, tc.want) {
				t.Errorf("stderr %q does not mention %q", line, tc.want)
			}
			if n := errs.ClassWordPrefixes(line); n > 1 {
				t.Errorf("stderr %q names %d error classes, want at most one", line, n)
			}
		})
	}
	// None of the failures may have changed the blob.
	if got, err := c.Read(ctx, "cli", "blob", 0, 100); err != nil || string(got) != "contents" {
		t.Fatalf("blob after the failures: %q, %v", got, err)
	}
}

// cliEnv is the environment for running tyr commands against endpoint. A
// race-enabled binary sleeps a second at exit by default, which would make
// every command of these tests take a second; GORACE turns that off while
// keeping any options already set.
func cliEnv(endpoint string) []string {
	race := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	return append(os.Environ(), "TYR_ENDPOINT="+endpoint, "GORACE="+race)
}
