// Package e2e tests a real tyr server process through the Go client.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// TestBlobLifecycle walks one blob through every operation on a real server
// and checks each answer.
func TestBlobLifecycle(t *testing.T) {
	srv := testserver.Start(t)
	c := srv.Client()
	ctx := context.Background()
	if _, err := c.CreateKeyspace(ctx, "smoke", client.KeyspaceConfig{ChunkSize: 4096, MVCC: true, Sync: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, "smoke", "a/b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, "smoke", "a/b"); !errors.Is(err, client.ErrExists) {
		t.Fatalf("second create: got %v, want ErrExists", err)
	}
	data := bytes.Repeat([]byte("0123456789"), 1000) // crosses two chunk boundaries
	if _, err := c.Write(ctx, "smoke", "a/b", 100, data); err != nil {
		t.Fatal(err)
	}
	off, err := c.Append(ctx, "smoke", "a/b", []byte("tail"))
	if err != nil || off != 10100 {
		t.Fatalf("append: offset %d, err %v; want 10100", off, err)
	}
	got, err := c.Read(ctx, "smoke", "a/b", 0, 20000)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(make([]byte, 100), data...), "tail"...)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d; equal=%v", len(got), len(want), bytes.Equal(got, want))
	}
	if err := c.Truncate(ctx, "smoke", "a/b", 50); err != nil {
		t.Fatal(err)
	}
	if err := c.Truncate(ctx, "smoke", "a/b", 9000); err != nil {
		t.Fatal(err)
	}
	got, err = c.Read(ctx, "smoke", "a/b", 0, 9000)
	if err != nil || !bytes.Equal(got, make([]byte, 9000)) {
		t.Fatalf("after shrink and extend: %d bytes, err %v; want 9000 zeros", len(got), err)
	}
	st, err := c.Stat(ctx, "smoke", "a/b")
	if err != nil || st.Size != 9000 || st.Version == 0 {
		t.Fatalf("stat: %+v, %v", st, err)
	}
	blobs, next, err := c.List(ctx, "smoke", "a/", "", 10)
	if err != nil || len(blobs) != 1 || blobs[0].Key != "a/b" || next != "" {
		t.Fatalf("list: %+v next %q err %v", blobs, next, err)
	}
	if err := c.Delete(ctx, "smoke", "a/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "smoke", "a/b"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("stat after delete: %v, want ErrNotFound", err)
	}
}
