package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// TestFailoverCluster kills -9 the endpoint of a client dialed
// WithFailover, on 3 nodes at replication 1: commits and reads of the blobs
// the other nodes keep go on through them, and come back right; a commit
// of a blob the dead node kept fails, and takes effect later only if its
// error said its outcome was unknown; a client without failover fails
// what goes to its endpoint.
func TestFailoverCluster(t *testing.T) {
	lc := testserver.UpCluster(t, 3)
	const ks = "failover"
	fo, err := client.Dial(lc.Endpoints[0], client.WithFailover())
	if err != nil {
		t.Fatal(err)
	}
	defer fo.Close()
	plain, err := client.Dial(lc.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cfg := client.DefaultKeyspaceConfig()
	cfg.Replication = 1
	if _, err := fo.CreateKeyspace(ctx, ks, cfg); err != nil {
		t.Fatal(err)
	}
	place := lc.Placer()
	onFirst := func(key string) bool { return place.On(ks, key, 1, 1) }
	var live, dead []string
	for i := range 40 {
		key := fmt.Sprintf("k%02d", i)
		if _, err := fo.WriteCreate(ctx, ks, key, 0, []byte(key+" before")); err != nil {
			t.Fatal(err)
		}
		if onFirst(key) {
			dead = append(dead, key)
		} else {
			live = append(live, key)
		}
	}
	if len(live) < 10 || len(dead) < 5 {
		t.Fatalf("%d keys off node 1 and %d on it, want 10 and 5 at least", len(live), len(dead))
	}
	// Both clients know the ring and have used their endpoint.
	for _, c := range []*client.Client{fo, plain} {
		if _, err := c.Read(ctx, ks, live[0], 0, 100); err != nil {
			t.Fatal(err)
		}
	}

	lc.Signal(1, syscall.SIGKILL)
	testserver.WaitRefused(t, lc.Endpoints[0])
	for _, key := range live {
		if _, err := fo.Write(ctx, ks, key, 0, []byte(key+" after!")); err != nil {
			t.Fatalf("commit of %s, kept by a live node, with the endpoint dead: %v", key, err)
		}
	}
	if got := fo.Endpoint(); got == lc.Endpoints[0] {
		t.Errorf("the client still names the dead node %s its endpoint", got)
	}
	for _, key := range live {
		b, err := fo.Read(ctx, ks, key, 0, 100)
		if err != nil || string(b) != key+" after!" {
			t.Fatalf("read of %s after the kill: %q, %v", key, b, err)
		}
	}
	// A listing merges every live node's: it fails until the survivors
	// found the dead node dead.
	took := testserver.Eventually(t, 30*time.Second, "list with the endpoint dead", func() (bool, string) {
		blobs, _, err := fo.List(ctx, ks, "", "", 0)
		if err != nil {
			return false, err.Error()
		}
		if len(blobs) != len(live) {
			t.Fatalf("list with the endpoint dead: %d blobs, want the %d the live nodes keep", len(blobs), len(live))
		}
		return true, ""
	})
	t.Logf("list with the endpoint dead: the live nodes' %d blobs, after %v", len(live), took.Round(time.Millisecond))
	// A commit of a blob only the dead node keeps cannot take effect now;
	// its error says whether it may still (unknown outcome, or the
	// caller's deadline passed first) or not (refused).
	deadErr := func() error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := fo.Write(ctx, ks, dead[0], 0, []byte("never!"))
		return err
	}()
	if deadErr == nil {
		t.Fatalf("commit of %s, kept by the dead node alone, succeeded", dead[0])
	}
	t.Logf("commit of %s, kept by the dead node: %v (refused %v)", dead[0], deadErr, client.Refused(deadErr))
	// Without failover, what goes to the endpoint fails.
	if _, _, err := plain.List(ctx, ks, "", "", 0); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("list without failover through the dead endpoint: %v, want ErrUnavailable", err)
	}

	lc.Start(1)
	testserver.Eventually(t, 2*time.Minute, "every key readable after the restart", func() (bool, string) {
		for _, key := range slices.Concat(live, dead) {
			b, err := fo.Read(ctx, ks, key, 0, 100)
			want := key + " after!"
			if slices.Contains(dead, key) {
				want = key + " before"
			}
			if err != nil {
				return false, fmt.Sprintf("%s: %v", key, err)
			}
			if key == dead[0] && string(b) == "never!" && (errors.Is(deadErr, client.ErrOutcomeUnknown) || errors.Is(deadErr, context.DeadlineExceeded)) {
				t.Logf("%s: the commit of unknown outcome took effect", key)
				continue
			}
			if string(b) != want {
				t.Fatalf("%s after the restart: %q, want %q", key, b, want)
			}
		}
		return true, ""
	})
}
