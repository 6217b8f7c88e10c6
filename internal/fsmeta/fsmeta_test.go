package fsmeta

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/testseed"
)

// TestTopKBounds checks Space-Saving's guarantees against exact counts on
// skewed random streams: every monitored item's true count lies in
// [count-err, count], and every item more frequent than n/k is monitored.
func TestTopKBounds(t *testing.T) {
	seed := testseed.FromEnv(t, "TYR_SEED")
	for _, k := range []int{1, 4, 32} {
		rng := rand.New(rand.NewPCG(seed, uint64(k)))
		tk := NewTopK(k)
		exact := map[string]uint64{}
		for range 20000 {
			// Zipf-like: item i with weight about 1/(i+1).
			item := fmt.Sprintf("/d%d/", int(float64(200)*rng.Float64()*rng.Float64()*rng.Float64()))
			tk.Add(item)
			exact[item]++
		}
		if tk.N() != 20000 {
			t.Fatalf("k=%d: N %d, want 20000", k, tk.N())
		}
		monitored := 0
		for item, n := range exact {
			c, e := tk.Count(item)
			if c == 0 {
				if n > tk.N()/uint64(k) {
					t.Fatalf("k=%d: %s seen %d times (> n/k = %d) is not monitored", k, item, n, tk.N()/uint64(k))
				}
				if n > tk.Min() {
					t.Fatalf("k=%d: %s seen %d times, above the least monitored count %d", k, item, n, tk.Min())
				}
				continue
			}
			monitored++
			if c-e > n || n > c {
				t.Fatalf("k=%d: %s seen %d times, estimate %d with error %d", k, item, n, c, e)
			}
		}
		if monitored != min(k, len(exact)) {
			t.Fatalf("k=%d: %d items monitored, want %d", k, monitored, min(k, len(exact)))
		}
	}
}

func TestAllowed(t *testing.T) {
	dir := func(mode, uid, gid uint32) Perm { return Perm{Kind: fslayout.KindDir, Mode: mode, UID: uid, GID: gid} }
	file := func(mode, uid, gid uint32) Perm { return Perm{Kind: fslayout.KindFile, Mode: mode, UID: uid, GID: gid} }
	alice := Cred{UID: 1000, GIDs: []uint32{100}}
	root := Cred{UID: 0}
	for _, c := range []struct {
		p    Perm
		c    Cred
		want uint32
		ok   bool
	}{
		{dir(0o755, 0, 0), alice, MayExec, true},
		{dir(0o700, 0, 0), alice, MayExec, false},
		{dir(0o750, 0, 100), alice, MayExec, true},     // group
		{dir(0o507, 2000, 100), alice, MayExec, false}, // the group triplet decides, though others may
		{dir(0o070, 0, 100), alice, MayExec, true},
		{dir(0o077, 1000, 100), alice, MayExec, false}, // owner without rights
		{dir(0o000, 0, 0), root, MayExec, true},        // root searches any directory
		{file(0o644, 1000, 100), alice, MayRead, true},
		{file(0o244, 1000, 100), alice, MayRead, false},
		{file(0o604, 2000, 100), alice, MayRead, false}, // group 0
		{file(0o000, 2000, 100), root, MayRead | MayWrite, true},
		{file(0o644, 0, 0), root, MayExec, false}, // root executes only what someone may
		{file(0o645, 0, 0), root, MayExec, true},
		{file(0o666, 1000, 100), alice, MayRead | MayExec, false},
	} {
		if got := Allowed(c.p, c.c, c.want); got != c.ok {
			t.Errorf("Allowed(%+v, %+v, %o) = %v, want %v", c.p, c.c, c.want, got, c.ok)
		}
	}
}

func TestAncestors(t *testing.T) {
	for p, want := range map[string][]string{
		"/":       nil,
		"/a":      {"/"},
		"/a/b/cd": {"/", "/a/", "/a/b/"},
	} {
		if got := fslayout.Ancestors(p); !slices.Equal(got, want) {
			t.Errorf("Ancestors(%q) = %q, want %q", p, got, want)
		}
	}
}

// TestResolverPopularity: a directory asked about fewer than PopularMin
// times is not kept; from PopularMin on it is, until its lease ends
// (invariant 1), and it stops being popular two windows after its
// requests stop.
func TestResolverPopularity(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := NewResolver(t0)
	p := Perm{Kind: fslayout.KindDir, Mode: 0o755}
	for i := range PopularMin {
		_, tk, ok := r.Lookup("ks", "/d/", t0)
		if ok {
			t.Fatalf("request %d: a copy before any was installed", i)
		}
		kept := r.Install("ks", "/d/", p, tk)
		if kept != (i == PopularMin-1) {
			t.Fatalf("request %d: kept %v, want %v (popular from %d requests)", i, kept, i == PopularMin-1, PopularMin)
		}
	}
	if got, _, ok := r.Lookup("ks", "/d/", t0.Add(Lease-time.Millisecond)); !ok || got != p {
		t.Fatalf("within the lease: copy %v %+v, want %+v", ok, got, p)
	}
	if _, _, ok := r.Lookup("other", "/d/", t0); ok {
		t.Fatal("another keyspace's directory of the same key has the copy")
	}
	if _, _, ok := r.Lookup("ks", "/d/", t0.Add(Lease)); ok {
		t.Fatal("a copy used at its lease's end")
	}
	if r.Copies() != 0 {
		t.Fatalf("%d copies after the lease ended, want 0", r.Copies())
	}
	// Still popular in the next window (the previous one counts)...
	_, tk, _ := r.Lookup("ks", "/d/", t0.Add(Window+time.Second))
	if !r.Install("ks", "/d/", p, tk) {
		t.Fatal("not kept one window later")
	}
	// ...but not two windows after the last requests.
	_, tk, _ = r.Lookup("ks", "/d/", t0.Add(4*Window))
	if r.Install("ks", "/d/", p, tk) {
		t.Fatal("kept after two quiet windows, with one request")
	}
}

// TestResolverInvalidation: invalidation drops the copies under a prefix
// and no others, and a fetch begun before an invalidation cannot install
// what it read (invariant 2), while one begun after can.
func TestResolverInvalidation(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := NewResolver(t0)
	old := Perm{Kind: fslayout.KindDir, Mode: 0o755}
	warm := func(key string) {
		for range PopularMin {
			_, tk, ok := r.Lookup("ks", key, t0)
			if !ok {
				r.Install("ks", key, old, tk)
			}
		}
		if _, _, ok := r.Lookup("ks", key, t0); !ok {
			t.Fatalf("%s not kept after %d requests", key, PopularMin)
		}
	}
	for _, k := range []string{"/a/", "/a/b/", "/ab/", "/"} {
		warm(k)
	}
	_, inflight, _ := r.Lookup("ks", "/x/", t0) // a fetch that read before the change
	if n := r.Invalidate("ks", "/a/"); n != 2 {
		t.Fatalf("invalidating /a/ dropped %d copies, want 2 (/a/ and /a/b/)", n)
	}
	for k, want := range map[string]bool{"/a/": false, "/a/b/": false, "/ab/": true, "/": true} {
		if _, _, ok := r.Lookup("ks", k, t0); ok != want {
			t.Errorf("after invalidating /a/: copy of %s %v, want %v", k, ok, want)
		}
	}
	for range PopularMin {
		r.Lookup("ks", "/x/", t0)
	}
	if r.Install("ks", "/x/", old, inflight) {
		t.Fatal("a fetch begun before an invalidation installed its copy")
	}
	_, after, _ := r.Lookup("ks", "/a/", t0)
	if !r.Install("ks", "/a/", Perm{Kind: fslayout.KindDir, Mode: 0o700}, after) {
		t.Fatal("a fetch begun after the invalidation could not install")
	}
	if got, _, _ := r.Lookup("ks", "/a/", t0); got.Mode != 0o700 {
		t.Fatalf("copy after the change has mode %o, want 700", got.Mode)
	}
}

// TestResolverBound: copies never pass CopiesMax.
func TestResolverBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := NewResolver(t0)
	for i := range CopiesMax + 50 {
		key := fmt.Sprintf("/d%d/", i)
		for range PopularMin {
			if _, tk, ok := r.Lookup("ks", key, t0); !ok {
				r.Install("ks", key, Perm{Kind: fslayout.KindDir}, tk)
			}
		}
		if r.Copies() > CopiesMax {
			t.Fatalf("%d copies, above %d", r.Copies(), CopiesMax)
		}
	}
	if r.Copies() == 0 {
		t.Fatal("no copies kept")
	}
}
