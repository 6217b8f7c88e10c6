// Package bench measures tyr under simple workloads and, for comparison,
// peer systems (Redis, PostgreSQL, etcd, Redis locked by ZooKeeper) under
// the same logical workloads in the same run, and the limits of the machine
// they run on. Only ratios between systems measured side by side are
// meaningful: absolute numbers depend on the machine and on whatever else
// runs on it.
package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tyrstore/tyr/internal/limits"
)

// maxValueBytes bounds --value-size: one value is one request, so that a
// write or read is a single operation on every system.
const maxValueBytes = limits.PayloadBytesMax

// Workloads is every workload Run knows, in the order help lists them.
var Workloads = []string{"write", "read", "object", "list", "isolation", "stream", "counter", "monalisa", "bank", "fs", "limits"}

// AggModes are the ways tyr updates counters and aggregates: atomic ops
// applied on the server, or transactional read-modify-write.
var AggModes = []string{"atomic", "rmw"}

// Config describes one run.
type Config struct {
	Workload  string
	Endpoint  string
	Clients   []int
	Duration  time.Duration
	ValueSize int
	Seed      uint64

	// System names tyr's results ("tyr" by default), so that runs against
	// different deployments can be reported side by side.
	System string
	// Replication is the replication factor of the bench keyspace.
	Replication int
	// Direct sends each read and write to the node that serves its blob
	// (its first live replica in node-ID order, by the ring of the
	// endpoint's cluster status) instead of to Endpoint.
	Direct bool
	// MetricsAddrs are the Prometheus endpoints (host:port) of every node
	// of the cluster; when set, each tyr result carries the peer messages,
	// Deliver calls and served requests the nodes counted during its
	// measurement.
	MetricsAddrs []string

	// Peer is "" or "redis"; PeerAddrs lists the servers of the peer, each
	// measured as a system of its own.
	Peer      string
	PeerAddrs []string
	// Postgres is the connection URL of a PostgreSQL server, Etcd the
	// client address of an etcd member, and ZooKeeper with ZKRedis the
	// addresses of a ZooKeeper server and of the Redis it locks; each one
	// set is measured as a peer.
	Postgres  string
	Etcd      string
	ZooKeeper string
	ZKRedis   string
	// S3 lists S3 servers measured as peers under the object workload,
	// signed with S3AccessKey and S3SecretKey.
	S3          []S3Peer
	S3AccessKey string
	S3SecretKey string
	// S3Fill says, by S3 peer name, how the list workload stores its
	// objects there when not by PutObject: S3FillNative (the bucket is a
	// keyspace of the tyr cluster at Endpoint, written through the native
	// API as the gateway writes it) or a directory (versitygw's POSIX
	// back-end serving it: the bucket is a subdirectory and each object a
	// file). The bench data is then removed the same way.
	S3Fill map[string]string

	// Agg lists how tyr updates counters and aggregates (AggModes), each
	// measured as a system of its own: "tyr" and "tyr-rmw".
	Agg []string
	// Generators, ReadRatio: the monalisa workload's event generators and
	// the fraction of its operations that read aggregates.
	Generators int
	ReadRatio  float64
	// Accounts and AccountsPerBlob: the bank workload's accounts, and how
	// many of them tyr keeps side by side in one blob.
	Accounts        int
	AccountsPerBlob int

	// Dir is where the limits workload measures the fsync rate: a
	// directory on the disk the systems under test keep their data on.
	Dir string

	// KeysPerClient is how many blobs each write client spreads its writes
	// over; ReadKeys is how many keys the read workload preloads.
	KeysPerClient int
	ReadKeys      int
	// ReadSkew is the exponent of the power law the read and isolation
	// workloads pick keys by: key k is read in proportion to 1/(k+1)^skew,
	// so 0 reads every key alike and 1 (the default) makes a few keys hot.
	ReadSkew float64
	// ReaderShares are the isolation workload's mixes: the percentage of
	// the clients that read, the others writing, each measured in turn.
	ReaderShares []int

	StreamSize     int64
	StreamInFlight int
	// ObjectSizes are the object workload's sizes, each put then got.
	ObjectSizes []int64
	// ListKeys is the keys of the list workload's large prefix.
	ListKeys int

	// The fs workload's systems: FSNative names the tyrfs package's
	// system over Endpoint ("" for none), FSDirs the directories; its data
	// set of FSDataSet bytes is stored as files of FSLargeFile bytes and
	// as files of FSSmallFile bytes, and each create phase makes at most
	// FSMetaFiles files.
	FSNative    string
	FSDirs      []FSDir
	FSDataSet   int64
	FSLargeFile int64
	FSSmallFile int64
	FSMetaFiles int
	// FSCreateTrunc has directories' creates open files with
	// O_CREAT|O_TRUNC, as fopen(path, "w") does, instead of
	// O_CREAT|O_EXCL.
	FSCreateTrunc bool
	// FSSync is the sync setting of the native system's keyspace: on,
	// each commit is on disk before it is acknowledged.
	FSSync bool
	// fsAfterFill, when set, is called after each system stored each of
	// the fs data sets, with the paths of its files.
	fsAfterFill func(t fsTarget, paths []string) error

	// MaxErrors stops a measurement once that many operations failed, so a
	// broken server ends the run instead of spinning.
	MaxErrors int
	// OpTimeout bounds each operation, so a stuck request cannot outlive
	// the run by more than this.
	OpTimeout time.Duration

	// Progress receives one line per step; nil discards them.
	Progress io.Writer
}

// DefaultConfig holds the defaults of the command line.
func DefaultConfig() Config {
	return Config{
		Clients:         []int{1},
		Duration:        10 * time.Second,
		ValueSize:       4096,
		System:          BaseSystem,
		Replication:     1,
		KeysPerClient:   1000,
		ReadKeys:        10000,
		ReadSkew:        1,
		ReaderShares:    slices.Clone(IsolationShares),
		Agg:             slices.Clone(AggModes),
		Generators:      1000,
		ReadRatio:       0.65,
		Accounts:        100,
		AccountsPerBlob: 10,
		Dir:             os.TempDir(),
		StreamSize:      1 << 30,
		StreamInFlight:  4,
		ObjectSizes:     slices.Clone(ObjectSizes),
		ListKeys:        1_000_000,
		FSNative:        "tyrfs-native",
		FSDataSet:       FSDataSetDefault,
		FSLargeFile:     FSLargeFileDefault,
		FSSmallFile:     FSSmallFileDefault,
		FSMetaFiles:     FSMetaFilesDefault,
		FSSync:          true,
		MaxErrors:       100,
		OpTimeout:       30 * time.Second,
	}
}

func (c *Config) validate() error {
	var problems []error
	if !slices.Contains(Workloads, c.Workload) {
		problems = append(problems, fmt.Errorf("unknown workload %q: want one of %v", c.Workload, Workloads))
	}
	if len(c.Clients) == 0 {
		problems = append(problems, errors.New("--clients: need at least one client count"))
	}
	for _, n := range c.Clients {
		if n < 1 || n > 4096 {
			problems = append(problems, fmt.Errorf("--clients %d: must be in [1, 4096]", n))
		}
	}
	if c.Duration <= 0 {
		problems = append(problems, fmt.Errorf("--duration %s: must be positive", c.Duration))
	}
	if c.ValueSize < 1 || c.ValueSize > maxValueBytes {
		problems = append(problems, fmt.Errorf("--value-size %d: must be in [1, %d], what one request carries",
			c.ValueSize, maxValueBytes))
	}
	if c.System == "" {
		problems = append(problems, errors.New("--system: must not be empty"))
	}
	if c.Replication < 1 || c.Replication > limits.ReplicationMax {
		problems = append(problems, fmt.Errorf("--replication %d: must be in [1, %d]", c.Replication, limits.ReplicationMax))
	}
	if c.Peer != "" && c.Peer != "redis" {
		problems = append(problems, fmt.Errorf("--peer %q: only redis is supported", c.Peer))
	}
	if c.Peer != "" && len(c.PeerAddrs) == 0 {
		problems = append(problems, errors.New("--peer-addr: need an address for the peer"))
	}
	if (c.ZooKeeper == "") != (c.ZKRedis == "") {
		problems = append(problems, errors.New("--zookeeper and --zk-redis: give both or neither: "+
			"the locked peer takes its locks in ZooKeeper and keeps its data in Redis"))
	}
	if len(c.Agg) == 0 {
		problems = append(problems, fmt.Errorf("--agg: need at least one of %v", AggModes))
	}
	for _, a := range c.Agg {
		if !slices.Contains(AggModes, a) {
			problems = append(problems, fmt.Errorf("--agg %q: want one of %v", a, AggModes))
		}
	}
	if c.Generators < 1 || c.Generators > generatorsMax {
		problems = append(problems, fmt.Errorf("--generators %d: must be in [1, %d]", c.Generators, generatorsMax))
	}
	if !(c.ReadRatio >= 0 && c.ReadRatio <= 1) {
		problems = append(problems, fmt.Errorf("--read-ratio %v: must be in [0, 1]", c.ReadRatio))
	}
	if c.Accounts < 2 || c.Accounts > accountsMax {
		problems = append(problems, fmt.Errorf("--accounts %d: must be in [2, %d]", c.Accounts, accountsMax))
	}
	if c.AccountsPerBlob < 1 || c.AccountsPerBlob > accountsPerBlobMax {
		problems = append(problems, fmt.Errorf("--accounts-per-blob %d: must be in [1, %d]",
			c.AccountsPerBlob, accountsPerBlobMax))
	}
	if c.Workload == "limits" && c.Dir == "" {
		problems = append(problems, errors.New("--dir: need a directory for the fsync limit"))
	}
	if c.KeysPerClient < 1 || c.ReadKeys < 1 {
		problems = append(problems, errors.New("key counts must be positive"))
	}
	if !(c.ReadSkew >= 0 && c.ReadSkew <= 10) {
		problems = append(problems, fmt.Errorf("--read-skew %v: must be in [0, 10]", c.ReadSkew))
	}
	if c.Workload == "isolation" {
		problems = append(problems, c.validateIsolation()...)
	}
	if c.StreamSize < 1 {
		problems = append(problems, fmt.Errorf("--stream-size %d: must be positive", c.StreamSize))
	}
	if c.StreamInFlight < 1 || c.StreamInFlight > 64 {
		problems = append(problems, fmt.Errorf("--stream-in-flight %d: must be in [1, 64]", c.StreamInFlight))
	}
	for _, n := range c.ObjectSizes {
		if n < 1 || n > ObjectBytesMax {
			problems = append(problems, fmt.Errorf("--object-sizes %d: must be in [1, %d]", n, ObjectBytesMax))
		}
	}
	if c.Workload == "object" && len(c.ObjectSizes) == 0 {
		problems = append(problems, errors.New("--object-sizes: need at least one size"))
	}
	if c.ListKeys < ListPageKeys || c.ListKeys > ListKeysMax {
		problems = append(problems, fmt.Errorf("--list-keys %d: must be in [%d, %d]", c.ListKeys, ListPageKeys, ListKeysMax))
	}
	for name, how := range c.S3Fill {
		if !slices.ContainsFunc(c.S3, func(p S3Peer) bool { return p.Name == name }) {
			problems = append(problems, fmt.Errorf("--s3-fill %s: no --s3 server of that name", name))
		}
		if how != S3FillNative && !filepath.IsAbs(how) {
			problems = append(problems, fmt.Errorf("--s3-fill %s=%s: want %s or an absolute directory", name, how, S3FillNative))
		}
	}
	if c.Workload == FSWorkload {
		problems = append(problems, c.validateFS()...)
	}
	if c.MaxErrors < 1 {
		problems = append(problems, fmt.Errorf("--max-errors %d: must be positive", c.MaxErrors))
	}
	if c.OpTimeout <= 0 {
		problems = append(problems, fmt.Errorf("--op-timeout %s: must be positive", c.OpTimeout))
	}
	return errors.Join(problems...)
}

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "bench: "+format+"\n", args...)
	}
}

// system is one store under test, set up for one run. What else it can do
// decides the workloads it runs: writeSystem, readSystem, streamSystem,
// counterSystem, monalisaSystem and bankSystem.
type system interface {
	Name() string
	// Note says how the workload maps onto the system when that is not
	// obvious, for the output.
	Note(workload string) string
	// Info is the server's version and the settings that decide what its
	// numbers mean (durability above all), as the server reports them.
	Info() SystemInfo
	Open(ctx context.Context) error
	// Close removes everything the run stored.
	Close(ctx context.Context) error
	// Conns opens n connections, one per client, and a function closing
	// them all.
	Conns(ctx context.Context, n int) ([]conn, func() error, error)
}

// SystemInfo describes the server behind a system's results.
type SystemInfo struct {
	Version  string
	Settings string
}

// conn is one client's connection; the workloads' own operations are in
// putConn, getConn, counterConn, monalisaConn and bankConn.
type conn interface {
	Ping(ctx context.Context) error
}

// retrier is a system that runs some workloads' operations as
// transactions it aborts on conflict and runs again. Each result of such a
// workload carries the aborts counted during its measurement.
type retrier interface {
	// retries reports whether the system runs workload's operations so.
	retries(workload string) bool
	// takeAborts returns the attempts aborted since the last call, and
	// starts counting afresh.
	takeAborts() uint64
}

// writeSystem runs the write workload: Create makes empty values under
// keys, and its conns are putConns.
type writeSystem interface {
	system
	Create(ctx context.Context, keys []string) error
}

type putConn interface {
	Put(ctx context.Context, key string, value []byte) error
}

// readSystem runs the read workload: Preload stores value under keys, and
// its conns are getConns.
type readSystem interface {
	system
	Preload(ctx context.Context, keys []string, value []byte) error
}

type getConn interface {
	Get(ctx context.Context, key string, n int) ([]byte, error)
}

// objectSystem runs the object workload: Create makes empty objects, and
// its conns are objectConns.
type objectSystem interface {
	writeSystem
	objects()
}

// objectConn puts and gets whole objects, of any size the workload runs,
// each as one atomic operation where the system allows it.
type objectConn interface {
	PutObject(ctx context.Context, key string, value []byte) error
	GetObject(ctx context.Context, key string, n int) ([]byte, error)
}

// streamSystem runs the stream workload.
type streamSystem interface {
	system
	PartBytes() int
	StreamOpen(ctx context.Context, parts, inFlight int) (streamConn, error)
}

// streamConn moves the parts of one large value.
type streamConn interface {
	PutPart(ctx context.Context, i int, data []byte) error
	GetPart(ctx context.Context, i int, n int) ([]byte, error)
	Close() error
}

// runs reports whether s runs workload.
func runs(s system, workload string) bool {
	var ok bool
	switch workload {
	case "write":
		_, ok = s.(writeSystem)
	case "read":
		_, ok = s.(readSystem)
	case "isolation":
		_, r := s.(readSystem)
		_, w := s.(writeSystem)
		ok = r && w
	case "stream":
		_, ok = s.(streamSystem)
	case "object":
		_, ok = s.(objectSystem)
	case "list":
		_, ok = s.(listSystem)
	case "counter":
		_, ok = s.(counterSystem)
	case "monalisa":
		_, ok = s.(monalisaSystem)
	case "bank":
		_, ok = s.(bankSystem)
	}
	return ok
}

// workloadsOf lists the workloads s runs, for error messages.
func workloadsOf(s system) []string {
	var out []string
	for _, w := range Workloads {
		if runs(s, w) {
			out = append(out, w)
		}
	}
	return out
}

// Run measures cfg.Workload on tyr and on each peer server and calls emit
// with each result as soon as it is measured. Whatever it stored is removed
// before it returns, even when ctx is cancelled. The limits workload
// measures the machine instead and needs no server.
func Run(ctx context.Context, cfg Config, emit func(Result) error) (err error) {
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.Workload == "limits" {
		cfg.progress("machine limits, fsync in %s", cfg.Dir)
		return runLimits(ctx, &cfg, emit)
	}
	cfg.progress("workload %s, seed %d", cfg.Workload, cfg.Seed)
	if cfg.Workload == FSWorkload {
		return runFS(ctx, &cfg, emit)
	}
	// opened holds every system set up, measured or not, so that all are
	// cleaned up.
	var opened []system
	defer func() {
		// Cleanup gets a context of its own so an interrupted run still
		// drops its keyspace and deletes its keys.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		for _, s := range opened {
			cfg.progress("%s: removing bench data", s.Name())
			if cerr := s.Close(cctx); cerr != nil {
				err = errors.Join(err, fmt.Errorf("%s: %w", s.Name(), cerr))
			}
		}
	}()
	openCtx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
	defer cancel()
	t, err := newTyrSystem(&cfg)
	if err != nil {
		return err
	}
	opened = append(opened, t)
	if err := t.Open(openCtx); err != nil {
		return fmt.Errorf("tyr at %s: %w", cfg.Endpoint, err)
	}
	var systems []system
	if cfg.Workload == "counter" || cfg.Workload == "monalisa" {
		if slices.Contains(cfg.Agg, "atomic") {
			systems = append(systems, t)
		}
		if slices.Contains(cfg.Agg, "rmw") {
			systems = append(systems, &tyrRMWSystem{tyrSystem: t})
		}
	} else {
		systems = append(systems, t)
	}
	peers, err := openPeers(openCtx, &cfg, func(s system) { opened = append(opened, s) })
	if err != nil {
		return err
	}
	for _, p := range peers {
		if !runs(p, cfg.Workload) {
			return fmt.Errorf("%s does not run the %s workload; it runs %s",
				p.Name(), cfg.Workload, strings.Join(workloadsOf(p), ", "))
		}
		cfg.progress("peer %s", p.Name())
	}
	systems = append(systems, peers...)
	switch cfg.Workload {
	case "write":
		return runWrite(ctx, &cfg, systems, emit)
	case "read":
		return runRead(ctx, &cfg, systems, emit)
	case "isolation":
		return runIsolation(ctx, &cfg, systems, emit)
	case "counter":
		return runCounter(ctx, &cfg, systems, emit)
	case "monalisa":
		return runMonalisa(ctx, &cfg, systems, emit)
	case "bank":
		return runBank(ctx, &cfg, systems, emit)
	case "object":
		return runObject(ctx, &cfg, systems, emit)
	case "list":
		return runList(ctx, &cfg, systems, emit)
	default:
		return runStream(ctx, &cfg, systems, emit)
	}
}

// openPeers connects to every peer cfg names, calling opened with each as
// soon as it holds anything to clean up.
func openPeers(ctx context.Context, cfg *Config, opened func(system)) ([]system, error) {
	var peers []system
	add := func(s system, err error) error {
		if err != nil {
			return err
		}
		opened(s)
		if err := s.Open(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
		peers = append(peers, s)
		return nil
	}
	if cfg.Peer == "redis" {
		for _, addr := range cfg.PeerAddrs {
			if err := add(newRedisSystem(ctx, addr)); err != nil {
				return nil, err
			}
		}
	}
	if cfg.Postgres != "" {
		if err := add(newPostgresSystem(ctx, cfg.Postgres)); err != nil {
			return nil, err
		}
	}
	if cfg.Etcd != "" {
		if err := add(newEtcdSystem(ctx, cfg.Etcd)); err != nil {
			return nil, err
		}
	}
	if cfg.ZooKeeper != "" {
		if err := add(newZKRedisSystem(ctx, cfg.ZooKeeper, cfg.ZKRedis)); err != nil {
			return nil, err
		}
	}
	for _, p := range cfg.S3 {
		if err := add(newS3System(cfg, p)); err != nil {
			return nil, err
		}
	}
	return peers, nil
}

func writeKey(client, i int) string { return fmt.Sprintf("c%d/k%d", client, i) }
func readKey(i int) string          { return fmt.Sprintf("k%d", i) }

func runWrite(ctx context.Context, cfg *Config, systems []system, emit func(Result) error) error {
	maxClients := slices.Max(cfg.Clients)
	keys := make([]string, 0, maxClients*cfg.KeysPerClient)
	for c := range maxClients {
		for i := range cfg.KeysPerClient {
			keys = append(keys, writeKey(c, i))
		}
	}
	for _, s := range systems {
		cfg.progress("%s: preparing %d keys", s.Name(), len(keys))
		if err := s.(writeSystem).Create(ctx, keys); err != nil {
			return fmt.Errorf("%s: creating keys: %w", s.Name(), err)
		}
	}
	op := func(ctx context.Context, c conn, client int, rng *rand.Rand, value []byte) (int, error) {
		return len(value), c.(putConn).Put(ctx, writeKey(client, rng.IntN(cfg.KeysPerClient)), value)
	}
	return forEachPhase(ctx, cfg, systems, emit, op)
}

// ReadWorkload names the results of the read workload with values of
// size bytes, e.g. read-1KiB or read-800B, so that one report can hold
// reads of several sizes side by side.
func ReadWorkload(size int) string { return "read-" + sizeLabel(int64(size)) }

// sizeLabel is FormatSize with a unit even for sizes of no binary unit.
func sizeLabel(n int64) string {
	s := FormatSize(n)
	if s[len(s)-1] >= '0' && s[len(s)-1] <= '9' {
		s += "B"
	}
	return s
}

func runRead(ctx context.Context, cfg *Config, systems []system, emit func(Result) error) error {
	keys := make([]string, cfg.ReadKeys)
	for i := range keys {
		keys[i] = readKey(i)
	}
	value := make([]byte, cfg.ValueSize)
	fillRandom(rand.New(rand.NewPCG(cfg.Seed, 0)), value)
	for _, s := range systems {
		cfg.progress("%s: preloading %d keys of %d bytes", s.Name(), len(keys), cfg.ValueSize)
		if err := s.(readSystem).Preload(ctx, keys, value); err != nil {
			return fmt.Errorf("%s: preloading: %w", s.Name(), err)
		}
	}
	rc := *cfg
	rc.Workload = ReadWorkload(cfg.ValueSize)
	return forEachPhase(ctx, &rc, systems, emit, readOp(cfg, len(keys)))
}

// readOp reads the value of one of the first n read keys, picked by the
// power law of cfg.ReadSkew (the most read key is k0), and checks its size.
func readOp(cfg *Config, n int) opFunc {
	pl := newPowerLaw(n, cfg.ReadSkew)
	return func(ctx context.Context, c conn, _ int, rng *rand.Rand, _ []byte) (int, error) {
		data, err := c.(getConn).Get(ctx, readKey(pl.pick(rng)), cfg.ValueSize)
		if err != nil {
			return 0, err
		}
		if len(data) != cfg.ValueSize {
			return 0, fmt.Errorf("read %d bytes, want %d", len(data), cfg.ValueSize)
		}
		return len(data), nil
	}
}

// opFunc runs one operation for client and returns the bytes it moved.
type opFunc func(ctx context.Context, c conn, client int, rng *rand.Rand, value []byte) (int, error)

// forEachPhase measures every client count on every system, alternating
// systems within a client count so that slow drift of the machine (other
// load, thermal limits, a filling disk) affects all systems alike.
func forEachPhase(ctx context.Context, cfg *Config, systems []system, emit func(Result) error, op opFunc) error {
	for _, n := range cfg.Clients {
		for _, s := range systems {
			cfg.progress("%s: %s with %d clients for %s", s.Name(), cfg.Workload, n, cfg.Duration)
			rt, retrying := s.(retrier)
			retrying = retrying && rt.retries(cfg.Workload)
			if retrying {
				rt.takeAborts() // those of the setup, or of the phase before
			}
			r, err := timed(ctx, cfg, s, n, op)
			if err != nil {
				return fmt.Errorf("%s: %w", s.Name(), err)
			}
			if retrying {
				r.setAborts(rt.takeAborts())
			}
			r.describe(s, cfg.Workload)
			if err := emit(r); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// timed runs op in n clients for cfg.Duration, each client on its own
// connection and goroutine, and summarizes what succeeded.
func timed(ctx context.Context, cfg *Config, s system, n int, op opFunc) (Result, error) {
	conns, closeAll, err := s.Conns(ctx, n)
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = closeAll() }()
	// Connections are opened before the clock starts, so the measurement
	// holds no connection setup.
	var wg sync.WaitGroup
	pingErrs := make([]error, n)
	for i, c := range conns {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
			defer cancel()
			pingErrs[i] = c.Ping(pctx)
		})
	}
	wg.Wait()
	if err := errors.Join(pingErrs...); err != nil {
		return Result{}, fmt.Errorf("connecting %d clients: %w", n, err)
	}

	var (
		errCount atomic.Uint64
		firstErr atomic.Pointer[error]
		bytes    atomic.Uint64
	)
	obs, observed := s.(observer)
	if observed {
		if err := obs.begin(ctx); err != nil {
			return Result{}, err
		}
	}
	hists := make([]Histogram, n)
	start := time.Now()
	end := start.Add(cfg.Duration)
	for i, c := range conns {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(n)<<32|uint64(i)))
			value := make([]byte, cfg.ValueSize)
			fillRandom(rng, value)
			var moved uint64
			for ctx.Err() == nil && errCount.Load() < uint64(cfg.MaxErrors) && time.Now().Before(end) {
				octx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
				t0 := time.Now()
				m, err := op(octx, c, i, rng, value)
				d := time.Since(t0)
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						break
					}
					errCount.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				hists[i].Record(d)
				moved += uint64(m)
			}
			bytes.Add(moved)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	var all Histogram
	for i := range hists {
		all.Merge(&hists[i])
	}
	if e := firstErr.Load(); e != nil {
		cfg.progress("%s: %d errors, the first: %v", s.Name(), errCount.Load(), *e)
	}
	r := summarize(cfg.Workload, s.Name(), n, &all, bytes.Load(), cfg.ValueSize, errCount.Load(), elapsed)
	if observed {
		if err := obs.end(ctx, &r); err != nil {
			return Result{}, err
		}
	}
	return r, nil
}

// runStream puts one large value in parts with a few in flight, then gets
// it back, verifying each part, on each system in turn.
func runStream(ctx context.Context, cfg *Config, systems []system, emit func(Result) error) error {
	for _, sys := range systems {
		s := sys.(streamSystem)
		part := s.PartBytes()
		parts := int((cfg.StreamSize + int64(part) - 1) / int64(part))
		sc, err := s.StreamOpen(ctx, parts, cfg.StreamInFlight)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
		for _, phase := range []string{"put", "get"} {
			cfg.progress("%s: stream %s of %d bytes in %d parts, %d in flight",
				s.Name(), phase, cfg.StreamSize, parts, cfg.StreamInFlight)
			r := streamPhase(ctx, cfg, sc, phase, parts, part)
			if err := ctx.Err(); err != nil {
				_ = sc.Close()
				return err
			}
			r.System = s.Name()
			r.describe(s, "stream")
			if err := emit(r); err != nil {
				_ = sc.Close()
				return err
			}
		}
		if err := sc.Close(); err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
	}
	return nil
}

// streamPhase moves every part once. Each part starts with its index, so a
// get that returns the wrong part is caught as an error.
func streamPhase(ctx context.Context, cfg *Config, sc streamConn, phase string, parts, part int) Result {
	var (
		next     atomic.Int64
		errCount atomic.Uint64
		firstErr atomic.Pointer[error]
		bytes    atomic.Uint64
		wg       sync.WaitGroup
	)
	hists := make([]Histogram, cfg.StreamInFlight)
	size := cfg.StreamSize
	start := time.Now()
	for w := range cfg.StreamInFlight {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
			var buf []byte
			if phase == "put" {
				buf = make([]byte, part)
				fillRandom(rng, buf)
			}
			for ctx.Err() == nil && errCount.Load() < uint64(cfg.MaxErrors) {
				i := int(next.Add(1) - 1)
				if i >= parts {
					break
				}
				n := int(min(int64(part), size-int64(i)*int64(part)))
				octx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
				t0 := time.Now()
				var err error
				if phase == "put" {
					stamp(buf[:n], i)
					err = sc.PutPart(octx, i, buf[:n])
				} else {
					var data []byte
					data, err = sc.GetPart(octx, i, n)
					if err == nil {
						err = checkPart(data, n, i)
					}
				}
				d := time.Since(t0)
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						break
					}
					errCount.Add(1)
					err = fmt.Errorf("part %d: %w", i, err)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				hists[w].Record(d)
				bytes.Add(uint64(n))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all Histogram
	for i := range hists {
		all.Merge(&hists[i])
	}
	if e := firstErr.Load(); e != nil {
		cfg.progress("stream %s: %d errors, the first: %v", phase, errCount.Load(), *e)
	}
	r := summarize("stream-"+phase, "", 1, &all, bytes.Load(), part, errCount.Load(), elapsed)
	r.InFlight = cfg.StreamInFlight
	return r
}

func stamp(b []byte, i int) {
	if len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, uint64(i))
	}
}

func checkPart(data []byte, n, i int) error {
	if len(data) != n {
		return fmt.Errorf("got %d bytes, want %d", len(data), n)
	}
	if n >= 8 && binary.LittleEndian.Uint64(data) != uint64(i) {
		return fmt.Errorf("holds part %d", binary.LittleEndian.Uint64(data))
	}
	return nil
}

// fillRandom fills b with incompressible bytes, so that neither system
// gains from compressing what a benchmark happens to write.
func fillRandom(rng *rand.Rand, b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, rng.Uint64())
		b = b[8:]
	}
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// batches calls fn on consecutive ranges [lo, hi) of at most size items
// covering [0, n), stopping at the first error.
func batches(n, size int, fn func(lo, hi int) error) error {
	for lo := 0; lo < n; lo += size {
		if err := fn(lo, min(lo+size, n)); err != nil {
			return err
		}
	}
	return nil
}
