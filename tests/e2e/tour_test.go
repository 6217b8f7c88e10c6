package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/internal/testserver"
)

// tourScript returns the shell code block between the tour markers of the
// README, so the documented commands are exactly the ones tested.
func tourScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- tour:begin -->")
	if !ok {
		t.Fatal("README.md has no tour:begin marker")
	}
	rest, _, ok = strings.Cut(rest, "<!-- tour:end -->")
	if !ok {
		t.Fatal("README.md has no tour:end marker")
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatal("README.md tour has no ```sh code block")
	}
	script, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README.md tour: code block is not closed")
	}
	return script
}

// TestTour runs the CLI tour verbatim against a fresh server, with the built
// tyr first on PATH, and checks that every command prints what a reader of
// the tour would expect.
func TestTour(t *testing.T) {
	srv := testserver.Start(t)
	bin := testserver.Binary(t)
	cmd := exec.Command("bash", "-euo", "pipefail")
	cmd.Stdin = strings.NewReader(tourScript(t))
	cmd.Dir = t.TempDir()
	cmd.Env = append(cliEnv(srv.Endpoint),
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tour failed: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("tour wrote to stderr:\n%s", stderr.String())
	}
	// Versions, times and disk usage differ from run to run; the rest of
	// the output is exactly what the tour shows.
	got := tourPadding.ReplaceAllString(stdout.String(), "$1: ")
	got = tourVolatile.ReplaceAllString(got, "$1: *")
	const want = `hello, tyr
11
key: greetings/hello.txt
size: 25
version: *
created: *
modified: *
HELLO, tyr
appended line
appended line
greetings/hello.txt	25
greetings/second.txt	7
HELLO, tyr
greetings/hello.txt	11
name: demo
chunk size: 4KiB
replication: 1
mvcc: true
sync: true
blobs: 1
logical bytes: 11
disk bytes: *
reclaim bytes: *
created: *
`
	if got != want {
		t.Fatalf("tour output:\n%s\nwant (spacing after colons ignored):\n%s", got, want)
	}
	if ks, err := srv.Client().ListKeyspaces(context.Background()); err != nil || len(ks) != 0 {
		t.Fatalf("after the tour: keyspaces %+v, %v; want none", ks, err)
	}
}

var (
	// tourPadding matches the aligned "field:   value" lines of stat and
	// keyspace info, whose padding is presentation, not content.
	tourPadding = regexp.MustCompile(`(?m)^([a-z][a-z ]*):[ \t]+`)
	// tourVolatile matches the fields that change from run to run.
	tourVolatile = regexp.MustCompile(`(?m)^(version|created|modified|disk bytes|reclaim bytes): .*$`)
)
