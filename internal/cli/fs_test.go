package cli

// TestFSImportExportCommand runs `tyr fs import` and `tyr fs export`
// against a real server and checks the tree comes back, and that a second
// import copies nothing. Run: go test -run TestFSImportExport ./internal/cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

func TestFSImportExportCommand(t *testing.T) {
	s := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Client().CreateKeyspace(ctx, "trees", client.DefaultKeyspaceConfig()); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "d"), 0o750); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"top": "top file", "d/inner": "inner file"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o604); err != nil {
			t.Fatal(err)
		}
	}
	r := testserver.Run(t, "fs", "import", "--endpoint", s.Endpoint, src, "trees/in/here")
	if r.Exit != 0 || !strings.Contains(r.Stdout, "2 files (18 bytes)") {
		t.Fatalf("import: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	r = testserver.Run(t, "fs", "import", "--endpoint", s.Endpoint, src, "trees/in/here")
	if r.Exit != 0 || !strings.Contains(r.Stdout, "0 files (0 bytes)") || !strings.Contains(r.Stdout, "2 unchanged") {
		t.Fatalf("second import: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	dst := filepath.Join(t.TempDir(), "out")
	r = testserver.Run(t, "fs", "export", "--endpoint", s.Endpoint, "trees/in/here", dst)
	if r.Exit != 0 {
		t.Fatalf("export: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	b, err := os.ReadFile(filepath.Join(dst, "d", "inner"))
	if err != nil || string(b) != "inner file" {
		t.Fatalf("exported d/inner: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "d")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("exported d: %v, %v", fi, err)
	}
	r = testserver.Run(t, "fs", "import", "--endpoint", s.Endpoint, src, "missing-keyspace")
	if r.Exit == 0 || !strings.Contains(r.Stderr, "not found") {
		t.Fatalf("import into a missing keyspace: exit %d, %q", r.Exit, r.Stderr)
	}
}
