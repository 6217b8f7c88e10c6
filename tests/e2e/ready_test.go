package e2e

// Ready means serving: a server says it is ready (its ready file, its gRPC
// health service, /healthz) only once it serves reads. These tests kill
// servers with SIGKILL, restart them, and read at once, as soon as they
// say they are ready: no read may be refused.
//
//	TYR_READY_ROUNDS=<n> go test -race -count=1 ./tests/e2e -run 'TestReady' -v
//
// TYR_READY_ROUNDS (default 20) sets the restarts of the single server,
// TYR_READY_CLUSTER_ROUNDS (default 4) those of the cluster node.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// readyBlobs writes n blobs of random sizes (up to four 4 KiB chunks) to
// ks through c and returns their contents by key.
func readyBlobs(t *testing.T, c *client.Client, ks, prefix string, n int, r *rand.Rand, into map[string][]byte) {
	t.Helper()
	for i := range n {
		key := fmt.Sprintf("%s%02d", prefix, i)
		data := randomBytes(r, 1+r.IntN(4*4096))
		if _, err := c.WriteCreate(context.Background(), ks, key, 0, data); err != nil {
			t.Fatalf("write %s/%s: %v", ks, key, err)
		}
		into[key] = data
	}
}

// readAllBlobs reads every blob of want through c, each once, and reports
// every refusal and every wrong content.
func readAllBlobs(t *testing.T, c *client.Client, ks string, want map[string][]byte, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	refused := 0
	for key, data := range want {
		got, err := c.Read(ctx, ks, key, 0, uint64(len(data))+1)
		switch {
		case err != nil:
			refused++
			t.Errorf("%s: read %s/%s refused: %v", when, ks, key, err)
		case !bytes.Equal(got, data):
			t.Errorf("%s: %s/%s holds %d bytes, want the %d written", when, ks, key, len(got), len(data))
		}
	}
	if refused > 0 {
		t.Fatalf("%s: %d of %d reads refused", when, refused, len(want))
	}
}

// A single server, killed with SIGKILL and restarted many times, serves
// every blob written before as soon as it says it is ready: its ready file
// and health service. A server with no peers has nothing to catch up on:
// it does not start a second catch-up round once it notes its read lease.
func TestReadyAfterKillSingleServer(t *testing.T) {
	rounds := intFromEnv(t, "TYR_READY_ROUNDS", 20)
	metricsAddr := testserver.FreeLoopbackAddr(t)
	srv := testserver.Start(t, "--metrics-listen", metricsAddr)
	c := srv.Client()
	const ks = "ready"
	if _, err := c.CreateKeyspace(context.Background(), ks, client.KeyspaceConfig{ChunkSize: 4096, MVCC: true, Sync: true}); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	blobs := map[string][]byte{}
	readyBlobs(t, c, ks, "k", 24, r, blobs)
	var took []time.Duration
	for round := 1; round <= rounds; round++ {
		srv.Kill()
		began := time.Now()
		srv.Restart() // returns once the ready file is written and health says SERVING
		took = append(took, time.Since(began))
		rc, err := client.Dial(srv.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		when := fmt.Sprintf("round %d", round)
		readAllBlobs(t, rc, ks, blobs, when)
		resp, err := http.Get("http://" + metricsAddr + "/healthz")
		if err != nil {
			t.Fatalf("%s: /healthz: %v", when, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "serving" {
			t.Errorf("%s: /healthz answered %d %q, want 200 serving", when, resp.StatusCode, body)
		}
		if log := srv.Log(); strings.Contains(log, "read lease granted") || strings.Contains(log, "catch-up round failed") {
			t.Errorf("%s: a server alone caught up more than once:\n%s", when, grepLines(log, "catch"))
		}
		// Written before the next kill.
		readyBlobs(t, rc, ks, fmt.Sprintf("r%02d-", round), 1, r, blobs)
		_ = rc.Close()
	}
	t.Logf("%d restarts, each ready after %v", rounds, took)
}

// grepLines returns the lines of text that contain substr.
func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// In a cluster of three, one node is killed with SIGKILL while the others
// take commits, and restarted (`tyr cluster start`, which returns once the
// node says it is ready). Reads sent to it at once all succeed and return
// what was acknowledged, also what the others committed while it was down:
// blobs of one replica it alone holds, and of two replicas, which it must
// have caught up on before it serves them.
func TestReadyAfterKillInCluster(t *testing.T) {
	rounds := intFromEnv(t, "TYR_READY_CLUSTER_ROUNDS", 4)
	lc := testserver.UpCluster(t, 3)
	clients := dialAll(t, lc)
	const ks1, ks2 = "ready-one", "ready-two"
	replicatedKeyspace(t, clients, ks1, client.KeyspaceConfig{ChunkSize: 4096, Replication: 1, MVCC: true, Sync: true})
	replicatedKeyspace(t, clients, ks2, client.KeyspaceConfig{ChunkSize: 4096, Replication: 2, MVCC: true, Sync: true})
	r := rand.New(rand.NewPCG(3, 4))
	one, two := map[string][]byte{}, map[string][]byte{}
	readyBlobs(t, clients[0], ks1, "k", 24, r, one)
	readyBlobs(t, clients[1], ks2, "k", 24, r, two)
	for round := 1; round <= rounds; round++ {
		k := 1 + round%3
		other := clients[k%3] // a node that stays up
		kill9(t, lc, k)
		waitDead(t, k, other)
		// Committed without node k: it must catch up on these before it
		// says it is ready.
		readyBlobs(t, other, ks2, fmt.Sprintf("r%02d-", round), 6, r, two)
		for key := range two {
			if r.IntN(4) == 0 {
				data := randomBytes(r, 1+r.IntN(4*4096))
				if _, err := other.Put(context.Background(), ks2, key, bytes.NewReader(data)); err != nil {
					t.Fatalf("round %d: rewrite %s/%s with node%d down: %v", round, ks2, key, k, err)
				}
				two[key] = data
			}
		}
		began := time.Now()
		lc.Start(k)
		took := time.Since(began)
		// Every read goes to node k, which serves it or forwards it.
		c, err := client.Dial(lc.Endpoints[k-1], client.WithoutRouting())
		if err != nil {
			t.Fatal(err)
		}
		when := fmt.Sprintf("round %d, node%d ready after %v", round, k, took.Round(time.Millisecond))
		readAllBlobs(t, c, ks1, one, when)
		readAllBlobs(t, c, ks2, two, when)
		if err := c.Ready(context.Background()); err != nil {
			t.Errorf("%s: health: %v", when, err)
		}
		_ = c.Close()
		t.Log(when)
	}
}
