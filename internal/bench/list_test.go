package bench

import (
	"context"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/testserver"
)

// The list workload runs on tyr and on tyr's S3 gateway, its objects
// stored natively and by PutObject, checks every page, and removes what it
// stored.
func TestListWorkload(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s3Addr := l.Addr().String()
	l.Close()
	srv := testserver.Start(t, "--s3-listen", s3Addr, "--s3-access-key", "k", "--s3-secret-key", "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for deadline := time.Now().Add(time.Minute); ; {
		c, err := net.Dial("tcp", s3Addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway does not listen on %s: %v", s3Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	cfg := DefaultConfig()
	cfg.Workload, cfg.Endpoint, cfg.Seed = "list", srv.Endpoint, 1
	cfg.Clients, cfg.Duration, cfg.ListKeys = []int{2}, 300*time.Millisecond, 1500
	cfg.S3AccessKey, cfg.S3SecretKey = "k", "secret"
	url := "http://" + s3Addr
	cfg.S3 = []S3Peer{{Name: "s3-native", URL: url}, {Name: "s3-put", URL: url}}
	cfg.S3Fill = map[string]string{"s3-native": S3FillNative}
	got := map[string]Result{}
	if err := Run(ctx, cfg, func(r Result) error {
		got[r.System+" "+r.Workload] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, sys := range []string{"tyr", "s3-native", "s3-put"} {
		for _, w := range []string{ListWorkload(ListSmallKeys), ListWorkload(1500)} {
			r, ok := got[sys+" "+w]
			if !ok || r.Ops == 0 || r.Errors != 0 {
				t.Errorf("%s %s: %+v (found: %v)", sys, w, r, ok)
			}
		}
	}
	kss, err := srv.Client().ListKeyspaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ks := range kss {
		if strings.Contains(ks.Name, "bench-") {
			t.Errorf("keyspace %s left behind", ks.Name)
		}
	}
}

// fakeLister lists keys of a prefix of n keys, leaving out key skip.
type fakeLister struct{ n, skip int }

func (fakeLister) Ping(context.Context) error { return nil }

func (f fakeLister) ListPage(_ context.Context, prefix, after string, max int) ([]string, error) {
	var keys []string
	for i := range f.n {
		if k := listKey(prefix, i); k > after && i != f.skip && len(keys) < max {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func TestListPageChecksThePage(t *testing.T) {
	op := listPage("p/", 5000)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		if _, err := op(context.Background(), fakeLister{n: 5000, skip: -1}, 0, rng, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A listing that misses a key is caught whenever a page spans it.
	var caught int
	for range 200 {
		if _, err := op(context.Background(), fakeLister{n: 5000, skip: 2500}, 0, rng, nil); err != nil {
			caught++
		}
	}
	if caught == 0 {
		t.Fatal("pages missing a key passed")
	}
}
