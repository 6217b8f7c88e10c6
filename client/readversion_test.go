package client_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tyrstore/tyr/client"
)

// TestReadVersion: a read at a version gives that version's bytes after
// the blob changed, in several parts for a large range; a range past the
// version's end is ErrOutOfRange.
func TestReadVersion(t *testing.T) {
	c, ctx := setup(t)
	old := bytes.Repeat([]byte("old."), (client.PayloadBytesMax*2+100)/4)
	r, err := c.WriteCreate(ctx, "stream", "b", 0, old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(ctx, "stream", "b", 0, bytes.Repeat([]byte("new."), len(old)/4)); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(old)-10)
	if err := c.ReadVersion(ctx, "stream", "b", r.Version, 10, out); err != nil || !bytes.Equal(out, old[10:]) {
		t.Fatalf("read at version %d: %v, or not its bytes", r.Version, err)
	}
	if err := c.ReadVersion(ctx, "stream", "b", r.Version, uint64(len(old)-5), make([]byte, 10)); !errors.Is(err, client.ErrOutOfRange) {
		t.Fatalf("read past the end: %v, want ErrOutOfRange", err)
	}
}
