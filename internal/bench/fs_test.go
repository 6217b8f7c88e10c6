package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/testserver"
	"github.com/tyrstore/tyr/tyrfs"
)

func fsTestConfig(endpoint, dir string) Config {
	cfg := DefaultConfig()
	cfg.Workload, cfg.Endpoint, cfg.Seed = FSWorkload, endpoint, 1
	cfg.Clients, cfg.Duration = []int{1, 3}, 200*time.Millisecond
	cfg.FSDataSet, cfg.FSLargeFile, cfg.FSSmallFile, cfg.FSMetaFiles = 1<<20, 256<<10, 8<<10, 300
	cfg.FSDirs = []FSDir{{Name: "local", Path: dir, Role: RoleFSPeer}, {Name: "other", Path: dir, Role: RoleFSDistributed}}
	return cfg
}

// checkCleanedUp fails t if the run left a keyspace or a file behind.
func checkCleanedUp(t *testing.T, srv *testserver.Server, dir string) {
	t.Helper()
	kss, err := srv.Client().ListKeyspaces(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ks := range kss {
		if strings.HasPrefix(ks.Name, "bench-") {
			t.Errorf("keyspace %s left behind", ks.Name)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		t.Errorf("%d entries left in %s, the first %s", len(left), dir, left[0].Name())
	}
}

// The fs workload runs on tyrfs-native and on two directories, produces
// every result with rates, reports them with the bars, and removes what
// it stored.
func TestFSWorkload(t *testing.T) {
	srv := testserver.Start(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := fsTestConfig(srv.Endpoint, dir)
	var results []Result
	if err := Run(ctx, cfg, func(r Result) error {
		results = append(results, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, r := range results {
		got[r.System+" "+r.Workload+" "+string(rune('0'+r.Clients))] = r
	}
	workloads := []string{"fs-read-256KiB", "fs-read-8KiB", "fs-create-empty", "fs-stat-empty", "fs-delete-empty",
		"fs-create-4KiB", "fs-stat-4KiB", "fs-read-4KiB", "fs-delete-4KiB", "fs-update-4KiB"}
	for _, sys := range []string{"tyrfs-native", "local", "other"} {
		for _, wl := range workloads {
			for _, n := range cfg.Clients {
				r, ok := got[sys+" "+wl+" "+string(rune('0'+n))]
				if !ok || r.Ops == 0 || r.OpsPerS <= 0 {
					t.Errorf("%s %s %d clients: %+v (found: %v)", sys, wl, n, r, ok)
				}
				if ok && strings.HasPrefix(wl, "fs-read-") && r.MBPerS <= 0 {
					t.Errorf("%s %s: no bytes read: %+v", sys, wl, r)
				}
			}
		}
	}
	// The batched reads: the data set's two workloads, files counted.
	batched := BatchSystem("tyrfs-native")
	for _, wl := range workloads[:2] {
		for _, n := range cfg.Clients {
			r, ok := got[batched+" "+wl+" "+string(rune('0'+n))]
			if !ok || r.Ops == 0 || r.OpsPerS <= 0 || r.MBPerS <= 0 || r.Role != RoleFSNative {
				t.Errorf("%s %s %d clients: %+v (found: %v)", batched, wl, n, r, ok)
			}
			// 8 KiB files go 128 a batch (1 MiB, the whole set), 256 KiB
			// files 4.
			if per := map[string]uint64{"fs-read-8KiB": 128, "fs-read-256KiB": 4}[wl]; r.Ops%per != 0 {
				t.Errorf("%s %s %d clients: %d files, want whole batches of %d", batched, wl, n, r.Ops, per)
			}
		}
	}
	// Storing the data set: every file written once, by fsFillWorkers
	// writers.
	for _, sys := range []string{"tyrfs-native", "local", "other"} {
		for _, size := range []int64{cfg.FSLargeFile, cfg.FSSmallFile} {
			wl, files := FSWriteWorkload(size), cfg.FSDataSet/size
			r, ok := got[sys+" "+wl+" "+string(rune('0'+min(fsFillWorkers, files)))]
			if !ok || r.Ops != uint64(files) || r.MBPerS <= 0 {
				t.Errorf("%s %s: %+v (found: %v), want %d files written", sys, wl, r, ok, files)
			}
		}
	}
	if want := (3*len(workloads)+2)*len(cfg.Clients) + 3*2; len(results) != want {
		t.Errorf("%d results, want %d", len(results), want)
	}
	var b strings.Builder
	if err := WriteFSReport(&b, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| fs-read-8KiB | 3 |", "tyrfs-native / other", "fs-read-8KiB / fs-read-256KiB",
		"tyrfs-native over other, files/s, 3 clients"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	ts := FSTargets(results)
	// Small over large for both native systems; the peer bars for the
	// per-file one only.
	if len(ts) != 2+2+2 {
		t.Errorf("%d bars, want 6: %+v", len(ts), ts)
	}
	for _, tg := range ts {
		if strings.HasPrefix(tg.Status, "not measured") {
			t.Errorf("bar %s: %s", tg.What, tg.Status)
		}
	}
	checkCleanedUp(t, srv, dir)
}

// A file whose content changed after it was written fails the run, on
// each kind of system, and the run still removes what it stored.
func TestFSWorkloadDetectsCorruption(t *testing.T) {
	srv := testserver.Start(t)
	for _, victim := range []string{"tyrfs-native", "local"} {
		t.Run(victim, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cfg := fsTestConfig(srv.Endpoint, dir)
			cfg.FSDirs = cfg.FSDirs[:1]
			cfg.FSSync = false // and the native keyspace is made so
			var corrupted string
			cfg.fsAfterFill = func(tg fsTarget, paths []string) error {
				if tg.Name() != victim || corrupted != "" {
					return nil
				}
				// The last file of the large set: read last by the
				// first reader's first pass.
				p := paths[len(paths)-1]
				corrupted = p
				switch tg := tg.(type) {
				case *dirTarget:
					f := filepath.Join(tg.root, filepath.FromSlash(p))
					b, err := os.ReadFile(f)
					if err != nil {
						return err
					}
					b[len(b)/2] ^= 0x40
					return os.WriteFile(f, b, 0o644)
				case *nativeTarget:
					if ki, err := tg.admin.Keyspace(ctx, tg.keyspace); err != nil || ki.Config.Sync {
						t.Errorf("the native keyspace with FSSync off: %+v, %v", ki.Config, err)
					}
					fs, err := tyrfs.New(ctx, tg.admin, tg.keyspace)
					if err != nil {
						return err
					}
					b, err := fs.ReadAt(ctx, nativePath(p), 100_000, 1)
					if err != nil {
						return err
					}
					return fs.WriteAt(ctx, nativePath(p), 100_000, []byte{b[0] ^ 1})
				}
				t.Fatalf("unknown target %T", tg)
				return nil
			}
			err := Run(ctx, cfg, func(Result) error { return nil })
			if err == nil || !strings.Contains(err.Error(), "wrong content") || !strings.Contains(err.Error(), corrupted) {
				t.Fatalf("run with %s's %s corrupted: %v", victim, corrupted, err)
			}
			checkCleanedUp(t, srv, dir)
		})
	}
}
