package client_test

import (
	"errors"
	"testing"

	"github.com/tyrstore/tyr/client"
)

// TestCommitIf: a commit applies only if its checks hold (a version, or
// absence), and changes nothing when one does not.
func TestCommitIf(t *testing.T) {
	c, ctx := setup(t)
	r, err := c.WriteCreate(ctx, "stream", "a", 0, []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	v := r.Version
	for _, tc := range []struct {
		name   string
		checks []client.Check
		ok     bool
	}{
		{"absent key absent", []client.Check{{Key: "none"}}, true},
		{"present key absent", []client.Check{{Key: "a"}}, false},
		{"stale version", []client.Check{{Key: "a", Version: v + 100}}, false},
		{"one of two fails", []client.Check{{Key: "none"}, {Key: "a"}}, false},
	} {
		_, err := c.CommitIf(ctx, "stream", tc.checks, client.AppendOp("log", []byte("x"), true))
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, client.ErrConflict)) {
			t.Fatalf("%s: %v, want ok %v (else ErrConflict)", tc.name, err, tc.ok)
		}
	}
	got, err := c.Read(ctx, "stream", "log", 0, 100)
	if err != nil || string(got) != "x" {
		t.Fatalf("log %q, %v: want one append, from the commit whose checks held", got, err)
	}
	// The current version passes, and a later commit makes it stale.
	info, err := c.Stat(ctx, "stream", "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CommitIf(ctx, "stream", []client.Check{{Key: "a", Version: info.Version}}, client.WriteOp("a", 0, []byte("2"), false)); err != nil {
		t.Fatalf("the current version: %v", err)
	}
	if _, err := c.CommitIf(ctx, "stream", []client.Check{{Key: "a", Version: info.Version}}, client.WriteOp("a", 0, []byte("3"), false)); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("a version superseded: %v, want ErrConflict", err)
	}
	if got, _ := c.Read(ctx, "stream", "a", 0, 10); string(got) != "2" {
		t.Fatalf("a holds %q, want 2", got)
	}
}
