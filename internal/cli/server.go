package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/balance"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/mvcc"
	chainnode "github.com/tyrstore/tyr/internal/node"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/server"
	"github.com/tyrstore/tyr/internal/storage"
)

type serverFlags struct {
	data          string
	moveRate      float64
	reweight      time.Duration
	perWeight     string
	listen        string
	metricsListen string
	logLevel      string
	readyFile     string
	retention     time.Duration
	linger        time.Duration
	lingerSet     bool // --version-linger given
	minFree       string
	reclaimRate   string
	fsHomeBytes   string
	fsSweepGrace  time.Duration
	gcPercent     int
	memoryLimit   string
	blockCache    string
	cluster       clusterFlags
	s3            s3Flags
}

func newServerCommand(e *env) *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a tyr server on an embedded store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.lingerSet = cmd.Flags().Changed("version-linger")
			return runServer(cmd.Context(), e, f)
		},
	}
	cmd.Flags().StringVar(&f.data, "data", "./data", "data directory (created if missing)")
	cmd.Flags().Float64Var(&f.moveRate, "move-rate", 32,
		"MiB/s cap on copying the ranges this node gains in a ring change (tyr cluster add/remove), so client traffic keeps priority")
	cmd.Flags().DurationVar(&f.reweight, "reweight-interval", chainnode.ReweightIntervalDefault,
		"how long a ring epoch stays settled before the ring coordinator weighs the ring against the members' capacity and bytes stored, and may move data to even them out, e.g. 1m; set, the first ring change and joining nodes also take capacity weights; 0 (the default) turns both off: advertised --weight")
	cmd.Flags().StringVar(&f.perWeight, "capacity-per-weight", "8GiB",
		"capacity per unit of ring weight: a node's capacity weight is its capacity over this (at least 1); every node of a cluster must use the same value")
	cmd.Flags().StringVar(&f.listen, "listen", "127.0.0.1:7420", "address for the client API; port 0 picks a free one")
	cmd.Flags().StringVar(&f.metricsListen, "metrics-listen", "", "address for Prometheus metrics at /metrics and Go profiles at /debug/pprof/ (off if empty)")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(&f.readyFile, "ready-file", "", "write the client API address to this file once serving")
	cmd.Flags().DurationVar(&f.retention, "version-retention", 5*time.Minute,
		"read timeout: how long a superseded version stays readable in MVCC keyspaces while a running transaction uses it")
	cmd.Flags().DurationVar(&f.linger, "version-linger", mvcc.LingerDefault,
		"how long a superseded version no transaction uses stays readable in MVCC keyspaces (at most --version-retention)")
	cmd.Flags().StringVar(&f.minFree, "min-free", "256MiB",
		"free-space floor: while the file system holding --data has less free, writes are refused with a \"no space\" error (deletes and truncates are not, and free space); 0 turns it off")
	cmd.Flags().StringVar(&f.reclaimRate, "reclaim-rate", "64MiB",
		"bytes per second, on average, that compactions reclaiming the space of removed data may rewrite (at least 1MiB)")
	cmd.Flags().StringVar(&f.fsHomeBytes, "fs-home-bytes", "12MiB",
		"largest TýrFS file whose data this node moves home to its new path in the background after a rename (one commit each; at most 12MiB); 0 turns it off")
	cmd.Flags().DurationVar(&f.fsSweepGrace, "fs-sweep-grace", server.HiddenGraceDefault,
		"how long a TýrFS hidden copy of a file's data stays unchanged before this node checks whether it is an orphan "+
			"(a client died between the copy and the commit pointing to it) and reclaims it; at least 1s")
	cmd.Flags().IntVar(&f.gcPercent, "gc-percent", gcPercentDefault,
		"the Go garbage collector's goal (GOGC): heap growth over live data, in percent, before a collection; higher trades memory for less collection work, within --memory-limit (the GOGC environment variable, if set, wins)")
	cmd.Flags().StringVar(&f.blockCache, "block-cache", "auto",
		"bytes of the block cache all keyspaces share (Pebble's, outside the Go heap and --memory-limit): recently read data and index blocks, uncompressed; reads it misses go to the operating system's page cache or the disk (at least 8MiB); auto: a quarter of the machine's memory, or of the server's cgroup limit if lower, and at least 128MiB; the cache takes memory as it fills, not at start")
	cmd.Flags().StringVar(&f.memoryLimit, "memory-limit", "512MiB",
		"soft limit on the Go runtime's memory (GOMEMLIMIT): the collector works harder as the heap nears it, so --gc-percent costs memory only while live data is small; 0 turns it off; Pebble's block cache and memtables are outside it (the GOMEMLIMIT environment variable, if set, wins)")
	addClusterFlags(cmd, &f.cluster)
	addS3Flags(cmd, &f.s3, "s3-listen", "", "address of an S3 API served beside the client API, once the server is ready (off if empty; see tyr s3)")
	return cmd
}

// parseHomeBytes reads --fs-home-bytes: a size up to
// fslayout.HomeBytesLimit, 0 for off.
func parseHomeBytes(s string) (uint64, error) {
	if s == "0" {
		return 0, nil
	}
	n, err := parseSize("--fs-home-bytes", s)
	if err != nil {
		return 0, err
	}
	if n > fslayout.HomeBytesLimit {
		return 0, fmt.Errorf("invalid --fs-home-bytes %q: above %d bytes (12MiB), what one commit carries", s, fslayout.HomeBytesLimit)
	}
	return n, nil
}

// checkSweepGrace checks --fs-sweep-grace: at least a second, so that
// the sweep cannot take a copy still being made for an orphan.
func checkSweepGrace(d time.Duration) error {
	if d < time.Second {
		return fmt.Errorf("invalid --fs-sweep-grace %v: must be at least 1s", d)
	}
	return nil
}

// gcPercentDefault is --gc-percent's default. A server's live heap is
// small and its allocations are per request, so the Go default of 100
// collected often: servers at 400 read 32 KiB files 42-54 % and created
// TýrFS files 19-25 % faster (tyr bench fs, 1 client, one server). The
// other commands, clients, keep Go's default: a bench client at 400 read
// small files no faster, and 32 MiB files with 16 readers 21-27 % slower,
// its larger heap spread over memory faulted in anew.
const gcPercentDefault = 400

// blockCacheMin is --block-cache's least value.
const blockCacheMin = 8 << 20

// blockCacheAutoMin is the least block cache --block-cache auto gives,
// whatever the machine's memory.
const blockCacheAutoMin = 128 << 20

// parseBlockCache reads --block-cache: a size, or auto for
// autoBlockCache.
func parseBlockCache(s string) (uint64, error) {
	if s == "auto" {
		return autoBlockCache(memoryBytes()), nil
	}
	return parseSize("--block-cache", s)
}

// autoBlockCache is the block cache of --block-cache auto on a machine
// (or cgroup) of memory bytes (0: not known): a quarter of it, and at
// least blockCacheAutoMin. A node's reads of files and blobs that fit in
// it do not go through the operating system; the pages' values are the
// most of it, and the page cache keeps them too, so a quarter leaves the
// rest of the memory to it, to the memtables and to the Go heap.
func autoBlockCache(memory uint64) uint64 {
	return max(memory/4, blockCacheAutoMin)
}

// memoryBytes is the memory the server may use: the machine's, or its
// cgroup's limit (cgroup v2's memory.max) if lower; 0 if neither is
// known.
func memoryBytes() uint64 {
	var total uint64
	var info syscall.Sysinfo_t
	if syscall.Sysinfo(&info) == nil {
		total = uint64(info.Totalram) * uint64(info.Unit)
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if limit, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && (total == 0 || limit < total) {
			total = limit
		}
	}
	return total
}

// parseMemoryLimit reads --memory-limit: a size, 0 for none.
func parseMemoryLimit(s string) (int64, error) {
	limit, err := parseSize("--memory-limit", s)
	if err != nil {
		return 0, err
	}
	if limit > math.MaxInt64 {
		return 0, fmt.Errorf("invalid --memory-limit %q: too large", s)
	}
	return int64(limit), nil
}

// tuneGC applies --gc-percent and --memory-limit, each unless its
// environment variable is set.
func tuneGC(gcPercent int, memoryLimit int64) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" && memoryLimit > 0 {
		debug.SetMemoryLimit(memoryLimit)
	}
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("invalid --log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func runServer(ctx context.Context, e *env, f serverFlags) error {
	level, err := parseLevel(f.logLevel)
	if err != nil {
		return err
	}
	if f.retention <= 0 {
		return fmt.Errorf("invalid --version-retention %s: must be positive", f.retention)
	}
	if !f.lingerSet {
		f.linger = min(f.linger, f.retention) // the default follows a shorter read timeout
	}
	if f.linger <= 0 || f.linger > f.retention {
		return fmt.Errorf("invalid --version-linger %s: must be positive and at most --version-retention (%s)", f.linger, f.retention)
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	if err := f.cluster.validate(); err != nil {
		return err
	}
	if !(f.moveRate > 0 && f.moveRate <= 1<<20) {
		return fmt.Errorf("invalid --move-rate %v: must be in (0, %d] MiB/s", f.moveRate, 1<<20)
	}
	capacity, err := parseCapacity("--capacity", f.cluster.capacity)
	if err != nil {
		return err
	}
	if f.reweight < 0 || (f.reweight > 0 && f.reweight < reweightIntervalMin) || f.reweight > reweightIntervalMax {
		return fmt.Errorf("invalid --reweight-interval %s: must be 0 (off) or in [%s, %s]", f.reweight, reweightIntervalMin, reweightIntervalMax)
	}
	if f.gcPercent < 1 {
		return fmt.Errorf("invalid --gc-percent %d: must be at least 1", f.gcPercent)
	}
	memoryLimit, err := parseMemoryLimit(f.memoryLimit)
	if err != nil {
		return err
	}
	blockCache, err := parseBlockCache(f.blockCache)
	if err != nil {
		return err
	}
	if blockCache < blockCacheMin || blockCache > math.MaxInt64 {
		return fmt.Errorf("invalid --block-cache %q: must be at least 8MiB, and at most %d bytes", f.blockCache, int64(math.MaxInt64))
	}
	homeBytes, err := parseHomeBytes(f.fsHomeBytes)
	if err != nil {
		return err
	}
	if err := checkSweepGrace(f.fsSweepGrace); err != nil {
		return err
	}
	perWeight, err := parseCapacity("--capacity-per-weight", f.perWeight)
	if err != nil {
		return err
	}
	balanceCfg := balance.Config{CapacityBytesPerWeight: perWeight}
	if err := balanceCfg.WithDefaults().Validate(); err != nil {
		return fmt.Errorf("invalid --capacity-per-weight %q: %w", f.perWeight, err)
	}
	minFree, err := parseSize("--min-free", f.minFree)
	if err != nil {
		return err
	}
	reclaimRate, err := parseSize("--reclaim-rate", f.reclaimRate)
	if err != nil {
		return err
	}
	if reclaimRate < 1<<20 || reclaimRate > 1<<40 {
		return fmt.Errorf("invalid --reclaim-rate %q: must be in [1MiB, 1TiB] per second", f.reclaimRate)
	}
	storedID, err := readNodeID(f.data)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tuneMalloc()
	tuneGC(f.gcPercent, memoryLimit)

	// Listen and join before touching the data directory, so that a
	// refused join leaves the disk as it was.
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	node, err := startMembership(f.cluster, storedID, lis.Addr().String(), log)
	if err != nil {
		_ = lis.Close()
		return err
	}
	defer shutdownMembership(node, log)
	engine, err := storage.Open(storage.Options{Dir: f.data, Retention: f.retention, Linger: f.linger, Logger: log,
		MinFreeBytes: minFree, ReclaimRate: int64(reclaimRate), CacheBytes: int64(blockCache)})
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("open data directory %s: %w", f.data, err)
	}
	defer func() {
		if err := engine.Close(); err != nil {
			log.Error("closing storage", "err", err)
		}
	}()
	if storedID == "" {
		if err := writeNodeID(f.data, node.ID()); err != nil {
			_ = lis.Close()
			return err
		}
	}
	cluster, err := server.NewCluster(node, engine, log)
	if err != nil {
		_ = lis.Close()
		return err
	}
	defer cluster.Close()
	cluster.DefaultSync = f.cluster.defaultSync
	metrics := server.NewMetrics()
	// The node asks members for their usage through the service, which
	// needs the node: it is set once both exist.
	var service atomic.Pointer[server.Service]
	// Weighted tokens (capacity weights, reweighting) come with
	// --reweight-interval; without it the ring takes advertised weights.
	var usage chainnode.UsageFunc
	if f.reweight > 0 {
		usage = func(ctx context.Context, id ring.NodeID) (balance.NodeReport, error) {
			svc := service.Load()
			if svc == nil {
				return balance.NodeReport{}, fmt.Errorf("%w: node %s is starting", errs.ErrUnavailable, id)
			}
			return svc.MemberUsage(ctx, id)
		}
	}
	chainNode, err := chainnode.Start(chainnode.Config{Cluster: cluster, Engine: engine, Dial: server.DialPeer, Log: log,
		FirstRun: storedID == "", RingFile: filepath.Join(f.data, "ring.json"),
		MoveBytesPerSecond: int64(f.moveRate * (1 << 20)), ReweightInterval: f.reweight, Balance: balanceCfg,
		Usage: usage})
	if err != nil {
		_ = lis.Close()
		return err
	}
	defer chainNode.Close()
	metrics.RegisterNode(chainNode)
	svc := server.NewService(engine, log).WithCluster(cluster).WithNode(chainNode).WithCapacity(capacity)
	grpcServer := svc.Register(metrics)
	metrics.RegisterSpace(svc)
	// Stopped before the node and the engine close (defers run in reverse).
	defer svc.StartDirCompaction(homeBytes, f.fsSweepGrace)()
	service.Store(svc)
	if f.metricsListen != "" {
		mlis, err := net.Listen("tcp", f.metricsListen)
		if err != nil {
			_ = lis.Close()
			return fmt.Errorf("listen on %s: %w", f.metricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler())
		mux.Handle("/healthz", server.HealthHandler(svc.Ready))
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(mlis) }()
		defer hs.Close()
		log.Info("serving metrics", "addr", mlis.Addr().String())
	}
	served := make(chan error, 1)
	go func() { served <- grpcServer.Serve(svc.Listen(lis)) }()
	log.Info("tyr server serving", "addr", lis.Addr().String(), "data", f.data,
		"node_id", string(node.ID()), "gossip_addr", node.GossipAddr())
	if f.cluster.gossipReadyFile != "" {
		if err := writeFileAtomic(f.cluster.gossipReadyFile, node.GossipAddr()); err != nil {
			grpcServer.Stop()
			return err
		}
	}
	// A node may have missed commits while it was down: it reports ready
	// (the ready file; its health service and /healthz say so meanwhile)
	// only once it serves reads (server.Service.Ready).
	ready, err := awaitReady(ctx, svc, served, log)
	if err != nil {
		return err
	}
	if ready {
		log.Info("tyr server ready", "addr", lis.Addr().String(), "node_id", string(node.ID()))
		if f.readyFile != "" {
			if err := writeFileAtomic(f.readyFile, lis.Addr().String()); err != nil {
				grpcServer.Stop()
				return err
			}
		}
		gw := make(chan error, 1)
		if f.s3.listen != "" {
			c, err := client.Dial(lis.Addr().String())
			if err != nil {
				grpcServer.Stop()
				return err
			}
			defer c.Close()
			go func() { gw <- runS3(ctx, c, f.s3, metrics.Registry, log) }()
		}
		select {
		case err := <-served:
			return err
		case err := <-gw:
			if ctx.Err() == nil {
				grpcServer.Stop()
				return fmt.Errorf("S3 gateway: %w", err)
			}
		case <-ctx.Done():
		}
	}
	log.Info("shutting down")
	leaveCluster(node, log)
	stopped := make(chan struct{})
	go func() { grpcServer.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		log.Warn("requests still running after 10s; stopping them")
		grpcServer.Stop()
	}
	if err := <-served; err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// Bounds of --reweight-interval when not 0.
const (
	reweightIntervalMin = 100 * time.Millisecond
	reweightIntervalMax = 24 * time.Hour
)

// Timing of a starting server's wait to be ready.
const (
	// readyPoll is how often it checks whether it serves reads.
	readyPoll = 10 * time.Millisecond
	// notReadyLogEvery is how often it logs why it is not ready yet.
	notReadyLogEvery = 30 * time.Second
)

// awaitReady waits until svc serves reads (Service.Ready), logging why
// not every notReadyLogEvery. It returns false, and no error, if ctx ends
// first, and the server's error if it stops serving first.
func awaitReady(ctx context.Context, svc *server.Service, served <-chan error, log *slog.Logger) (bool, error) {
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	began, logged := time.Now(), time.Now()
	for {
		err := svc.Ready()
		if err == nil {
			return true, nil
		}
		if time.Since(logged) >= notReadyLogEvery {
			log.Warn("not ready yet: reads go to other replicas, or are refused", "why", errs.Text(err),
				"waited", time.Since(began).Round(time.Second))
			logged = time.Now()
		}
		select {
		case err := <-served:
			if err == nil {
				err = errors.New("the client API stopped serving")
			}
			return false, err
		case <-ctx.Done():
			return false, nil
		case <-tick.C:
		}
	}
}

func writeFileAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
