package e2e

// These tests run the tyr binary's atomic, cas and txn commands against a
// real server and check what they print, their exit codes, and the blobs
// afterwards: that a refused command changes nothing, and that a
// transaction is applied whole or not at all. Run:
// go test -run 'CLIAtomic|CLICAS|CLITxn' ./tests/e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// cliKeyspace and cliKeyspace2 are the keyspaces of these tests.
const (
	cliKeyspace  = "clitxn"
	cliKeyspace2 = "clitxn2"
)

// cliSetup starts a server with the two keyspaces.
func cliSetup(t *testing.T) (*testserver.Server, *client.Client) {
	t.Helper()
	srv := testserver.Start(t)
	c := srv.Client()
	for _, ks := range []string{cliKeyspace, cliKeyspace2} {
		if _, err := c.CreateKeyspace(context.Background(), ks, client.KeyspaceConfig{ChunkSize: 4096, MVCC: true}); err != nil {
			t.Fatal(err)
		}
	}
	return srv, c
}

// cliRun runs tyr with args, and stdin as its input, against srv and returns
// what it printed and its exit code.
func cliRun(t *testing.T, srv *testserver.Server, stdin string, args ...string) (stdout, stderr string, exit int) {
	t.Helper()
	cmd := exec.Command(testserver.Binary(t), args...)
	cmd.Env = cliEnv(srv.Endpoint)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		exit = exitErr.ExitCode()
	default:
		t.Fatalf("tyr %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), exit
}

// cliPrints runs tyr and checks that it succeeds and prints want.
func cliPrints(t *testing.T, srv *testserver.Server, want string, args ...string) {
	t.Helper()
	stdout, stderr, exit := cliRun(t, srv, "", args...)
	if exit != 0 || stdout != want || stderr != "" {
		t.Fatalf("tyr %s: exit %d, stdout %q, stderr %q; want exit 0, stdout %q",
			strings.Join(args, " "), exit, stdout, stderr, want)
	}
}

// cliFails runs tyr and checks that it exits with code exit, prints nothing
// on stdout and one line "tyr: ..." on stderr that contains part.
func cliFails(t *testing.T, srv *testserver.Server, exit int, part string, args ...string) {
	t.Helper()
	stdout, stderr, got := cliRun(t, srv, "", args...)
	line, ok := strings.CutSuffix(stderr, "\n")
	if got != exit || stdout != "" || !ok || strings.Contains(line, "\n") ||
		!strings.HasPrefix(line, "tyr: ") || !strings.Contains(line, part) {
		t.Errorf("tyr %s: exit %d, stdout %q, stderr %q; want exit %d, one error line with %q",
			strings.Join(args, " "), got, stdout, stderr, exit, part)
	}
}

// blobBytes returns the whole blob ks/key.
func blobBytes(t *testing.T, c *client.Client, ks, key string) []byte {
	t.Helper()
	b, err := c.Read(context.Background(), ks, key, 0, client.PayloadBytesMax)
	if err != nil {
		t.Fatalf("read %s/%s: %v", ks, key, err)
	}
	return b
}

func TestCLIAtomic(t *testing.T) {
	srv, c := cliSetup(t)
	ctx := context.Background()
	for _, key := range []string{"counter", "small"} {
		if err := c.Create(ctx, cliKeyspace, key); err != nil {
			t.Fatal(err)
		}
	}
	counter := cliKeyspace + "/counter"
	cliPrints(t, srv, "5\n", "atomic", "add", counter, "5")
	cliPrints(t, srv, "8\n", "atomic", "add", counter, "3")
	if got := blobBytes(t, c, cliKeyspace, "counter"); !bytes.Equal(got, le64(8)) {
		t.Fatalf("counter after two adds: %x, want %x", got, le64(8))
	}

	// Signed functions take negative values and print signed ones; the
	// others print unsigned.
	small := cliKeyspace + "/small"
	cliPrints(t, srv, "0\n", "atomic", "max-signed", small, "--width", "2", "--offset", "2", "--", "-5")
	cliPrints(t, srv, "-5\n", "atomic", "min-signed", small, "--width", "2", "--offset", "2", "--", "-5")
	cliPrints(t, srv, "65531\n", "atomic", "or", small, "--width=2", "--offset=2", "0")
	cliPrints(t, srv, "255\n", "atomic", "add", small, "--width", "1", "0xff")
	cliPrints(t, srv, "254\n", "atomic", "add", small, "--width", "1", "--", "-1")
	if got, want := blobBytes(t, c, cliKeyspace, "small"), []byte{0xfe, 0, 0xfb, 0xff}; !bytes.Equal(got, want) {
		t.Fatalf("small: %x, want %x", got, want)
	}

	// Refused commands change nothing.
	for _, tc := range []struct {
		part string
		args []string
	}{
		{"invalid --width 3", []string{"--width", "3", "1"}},
		{"invalid --width 0", []string{"--width", "0", "1"}},
		{"invalid --width 16", []string{"--width", "16", "1"}},
		{"invalid --offset -1", []string{"--offset", "-1", "1"}},
		{"at most 255", []string{"--width", "1", "256"}},
		{"at most 2 hex digits", []string{"--width", "1", "0x100"}},
		{"at least -128", []string{"--width", "1", "--", "-129"}},
		{`invalid value "ten"`, []string{"ten"}},
		{"put -- before it", []string{"-3"}},
	} {
		cliFails(t, srv, 1, tc.part, append([]string{"atomic", "add", counter}, tc.args...)...)
	}
	cliFails(t, srv, 1, "and takes no negative value", "atomic", "and", counter, "--", "-1")
	cliFails(t, srv, 1, `unknown atomic function "min"`, "atomic", "min", counter, "1")
	cliFails(t, srv, 1, "want KEYSPACE/KEY", "atomic", "add", "counter", "1")
	cliFails(t, srv, 1, "usage: tyr atomic FN KS/KEY VALUE", "atomic", "add", counter)
	cliFails(t, srv, 1, "not found", "atomic", "add", cliKeyspace+"/missing", "1")
	if got := blobBytes(t, c, cliKeyspace, "counter"); !bytes.Equal(got, le64(8)) {
		t.Fatalf("counter after the refused commands: %x, want %x", got, le64(8))
	}
	if _, err := c.Stat(ctx, cliKeyspace, "missing"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("an atomic on a missing blob created it: %v", err)
	}
}

func TestCLICAS(t *testing.T) {
	srv, c := cliSetup(t)
	if _, err := c.Put(context.Background(), cliKeyspace, "text", strings.NewReader("hello world")); err != nil {
		t.Fatal(err)
	}
	text := cliKeyspace + "/text"
	check := func(want string) {
		t.Helper()
		if got := blobBytes(t, c, cliKeyspace, "text"); string(got) != want {
			t.Fatalf("text: %q, want %q", got, want)
		}
	}
	cliPrints(t, srv, "", "cas", text, "hello", "jello")
	check("jello world")
	cliPrints(t, srv, "", "cas", text, "--offset", "6", "0x776f", "0x574f")
	check("jello WOrld")

	// A mismatch exits 2 and changes nothing; so do bad arguments, with 1.
	cliFails(t, srv, 2, "differ from the expected", "cas", text, "hello", "HELLO")
	cliFails(t, srv, 2, "differ from the expected", "cas", text, "--offset", "6", "0x776f", "0x574f")
	cliFails(t, srv, 1, "want equal lengths", "cas", text, "jello", "hi")
	cliFails(t, srv, 1, "even number of hex digits", "cas", text, "0x6", "0x7")
	cliFails(t, srv, 1, "want 1 to 4096", "cas", text, "", "")
	cliFails(t, srv, 1, "invalid --offset -1", "cas", text, "--offset", "-1", "j", "J")
	cliFails(t, srv, 1, "not found", "cas", cliKeyspace+"/missing", "a", "b")
	check("jello WOrld")
}

// b64 is the base64 of s, as JSON carries bytes.
func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestCLITxn(t *testing.T) {
	srv, c := cliSetup(t)
	ctx := context.Background()
	if _, err := c.Put(ctx, cliKeyspace, "a", strings.NewReader("0123456789")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteCreate(ctx, cliKeyspace, "n", 0, le64(41)); err != nil {
		t.Fatal(err)
	}
	lines := []string{
		// 1: reads see the transaction's own write and append; a missing
		// blob reads as missing; an append creates its blob.
		fmt.Sprintf(`{"ops":[{"op":"write","key":"clitxn/a","offset":2,"data":%q},{"op":"read","key":"clitxn/a","offset":0,"length":-1},`+
			`{"op":"read","key":"clitxn/missing"},{"op":"append","key":"clitxn/log","data":%q},{"op":"append","key":"clitxn/a","data":%q},`+
			`{"op":"read","key":"clitxn/a","offset":9},{"op":"atomic","key":"clitxn/n","offset":0,"width":8,"fn":"add","value":1}]}`,
			b64("AB"), b64("first"), b64("!")),
		// 2: malformed.
		`{"ops":[{"op":"read","key":"clitxn/a"}`,
		// 3: two keyspaces: nothing runs.
		fmt.Sprintf(`{"ops":[{"op":"write","key":"clitxn/a","offset":0,"data":%q},{"op":"write","key":"clitxn2/b","offset":0,"data":%q}]}`,
			b64("XX"), b64("YY")),
		// 4: blank, skipped.
		"",
		// 5: a compare-and-swap that fails aborts the atomic before it.
		fmt.Sprintf(`{"ops":[{"op":"atomic","key":"clitxn/n","fn":"add","value":100},{"op":"cas","key":"clitxn/a","expected":%q,"data":%q}]}`,
			b64("zz"), b64("yy")),
		// 6: lines 3 and 5 changed nothing.
		`{"ops":[{"op":"read","key":"clitxn/a"},{"op":"read","key":"clitxn/n","length":8}]}`,
		`{"ops":[{"op":"read","key":"clitxn2/b"}]}`,
		// 8: the other ops.
		fmt.Sprintf(`{"ops":[{"op":"cas","key":"clitxn/a","expected":%q,"data":%q},{"op":"truncate","key":"clitxn/a","size":4},`+
			`{"op":"read","key":"clitxn/a"},{"op":"delete","key":"clitxn/log"},{"op":"read","key":"clitxn/log"},`+
			`{"op":"create","key":"clitxn/log"},{"op":"read","key":"clitxn/log"},{"op":"atomic","key":"clitxn/n","fn":"min-signed","value":"-2"}]}`,
			b64("01"), b64("ab")),
		// 9: an op the line does not describe well.
		`{"ops":[{"op":"atomic","key":"clitxn/n","fn":"add","value":1,"width":3}]}`,
	}
	stdout, stderr, exit := cliRun(t, srv, strings.Join(lines, "\n")+"\n", "txn")
	if exit != 0 || stderr != "" {
		t.Fatalf("tyr txn: exit %d, stderr %q", exit, stderr)
	}
	// The error text of line 5 comes from the server; the test checks
	// that it names the failed compare-and-swap, not its exact words.
	want := []string{
		fmt.Sprintf(`{"status":"committed","results":[{},{"data":%q},{"data":"","missing":true},{"offset":0},{"offset":10},{"data":%q},{"value":42}]}`,
			b64("01AB456789"), b64("9!")),
		`{"status":"aborted","error":"line 2: invalid argument: invalid JSON: unexpected EOF","class":"invalid argument","retryable":false}`,
		`{"status":"aborted","error":"line 3: invalid argument: ops[1]: keyspace \"clitxn2\", but ops[0] is on \"clitxn\": a transaction runs on one keyspace","class":"invalid argument","retryable":false}`,
		`{"status":"aborted","error":"line 5: conflict: * compare-and-swap * differ from the expected *","class":"conflict","retryable":true}`,
		fmt.Sprintf(`{"status":"committed","results":[{"data":%q},{"data":%q}]}`, b64("01AB456789!"), base64.StdEncoding.EncodeToString(le64(42))),
		`{"status":"committed","results":[{"data":"","missing":true}]}`,
		fmt.Sprintf(`{"status":"committed","results":[{},{},{"data":%q},{},{"data":"","missing":true},{},{"data":""},{"value":-2}]}`, b64("abAB")),
		`{"status":"aborted","error":"line 9: invalid argument: ops[0]: invalid width 3: want 1, 2, 4 or 8","class":"invalid argument","retryable":false}`,
	}
	got := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("tyr txn printed %d lines, want %d:\n%s", len(got), len(want), stdout)
	}
	for i := range want {
		if !matchStars(want[i], got[i]) {
			t.Errorf("output line %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
	}
	if got := blobBytes(t, c, cliKeyspace, "a"); string(got) != "abAB" {
		t.Errorf("a: %q, want %q", got, "abAB")
	}
	if got := blobBytes(t, c, cliKeyspace, "n"); !bytes.Equal(got, le64(1<<64-2)) {
		t.Errorf("n: %x, want %x", got, le64(1<<64-2))
	}
	if got := blobBytes(t, c, cliKeyspace, "log"); len(got) != 0 {
		t.Errorf("log: %q, want empty", got)
	}
	if _, err := c.Stat(ctx, cliKeyspace2, "b"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("clitxn2/b of the two-keyspace line: %v, want not found", err)
	}

	// With --retries a conflict is tried again, and still reported as
	// aborted; the other ops of the line never apply.
	line := fmt.Sprintf(`{"ops":[{"op":"append","key":"clitxn/log","data":%q},{"op":"cas","key":"clitxn/a","expected":%q,"data":%q}]}`,
		b64("x"), b64("zz"), b64("yy"))
	stdout, stderr, exit = cliRun(t, srv, line, "txn", "--retries", "2")
	if w := `{"status":"aborted","error":"line 1: conflict: gave up after 3 attempts: * differ from the expected *","class":"conflict","retryable":true}`; exit != 0 || stderr != "" ||
		!matchStars(w, strings.TrimSuffix(stdout, "\n")) {
		t.Errorf("tyr txn --retries 2: exit %d, stdout %q, stderr %q; want %s", exit, stdout, stderr, w)
	}
	if got := blobBytes(t, c, cliKeyspace, "log"); len(got) != 0 {
		t.Errorf("log after the retried conflict: %q, want empty", got)
	}
	cliFails(t, srv, 1, "invalid --retries -1", "txn", "--retries", "-1")

	// Reads larger than one request are read in parts; the reads of one
	// transaction return at most 16 MiB.
	big := bytes.Repeat([]byte("0123456789abcdef"), client.PayloadBytesMax/16+1)
	if _, err := c.Put(ctx, cliKeyspace, "big", bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	readBig := `{"op":"read","key":"clitxn/big","offset":1}`
	lines = []string{
		`{"ops":[` + readBig + `,{"op":"read","key":"clitxn/big","offset":4194303,"length":3}]}`,
		`{"ops":[` + strings.Repeat(readBig+",", 4) + readBig + `]}`,
	}
	stdout, stderr, exit = cliRun(t, srv, strings.Join(lines, "\n"), "txn")
	want = []string{
		fmt.Sprintf(`{"status":"committed","results":[{"data":%q},{"data":%q}]}`,
			b64(string(big[1:])), b64(string(big[client.PayloadBytesMax-1:client.PayloadBytesMax+2]))),
		`{"status":"aborted","error":"line 2: too large: the reads of the transaction return more than 16777216 bytes: read smaller ranges","class":"too large","retryable":false}`,
	}
	if got := strings.TrimSuffix(stdout, "\n"); exit != 0 || stderr != "" || got != strings.Join(want, "\n") {
		t.Errorf("tyr txn of large reads: exit %d, stderr %q, stdout (%d bytes) is not the blob's bytes, or not\n%s",
			exit, stderr, len(stdout), want[1])
	}
}

// matchStars reports whether s equals pattern, where each * of the pattern
// stands for any text.
func matchStars(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(s)
}
