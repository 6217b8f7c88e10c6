package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tyrstore/tyr/internal/bench"
)

func init() {
	commandAdders = append(commandAdders, func(root *cobra.Command, e *env) {
		root.AddCommand(newBenchCommand(e))
	})
}

const benchLong = `Measure a tyr server under a simple workload, optionally side by side with
peer systems under the same logical workload, and the machine's own limits.

Workloads:
  write     each client writes --value-size bytes to blobs of its own, chosen
            at random among --keys-per-client blobs created beforehand
  read      --read-keys values of --value-size bytes are stored, then each
            client reads them, picking keys by a power law (--read-skew);
            results are named read-<size>, e.g. read-1KiB
  isolation of --read-keys keys, half are preloaded with --value-size bytes
            and read as in read, the other half created and written; at
            each client count, every client reads, then for each of
            --reader-shares (percent of the clients reading, the others
            writing) the readers alone and the readers with the writers;
            each mix's per-reader throughput is given relative to the same
            readers alone and to every client reading
  stream    one value of --stream-size is put in parts of the most one
            request carries (4 MiB), a few in flight, then read back; put and
            get are reported separately
  counter   every client adds 1 to one shared 8-byte counter
  monalisa  the seeds' MonALISA layout: --generators append 16-byte events
            to logs of their own, each added in the same transaction to
            per-minute aggregates (sum, count) of its machine, cluster, site
            and to one global aggregate, the hot spot; --read-ratio of the
            operations read 800 bytes of an aggregate chosen by a power law
  bank      --accounts accounts of 1000; each operation moves 1 to 100
            between two random accounts in one serializable transaction
            (read both balances, write both), run again when it aborts on a
            conflict; afterwards the balances must still add up, on every
            system. tyr keeps --accounts-per-blob 8-byte balances side by
            side in a blob and runs RunTx
  fs        a data set (--data-set) stored as --large-file files and again as
            --small-file files, each read whole by each count of readers;
            then files empty and of 4 KiB created, stat'ed, read and
            deleted, each client in a directory of its own; then each
            client's 4 MiB file updated 4 KiB at a random place at a
            time, each update durable (fdatasync) before the next; systems:
            tyrfs-native (--native, the tyrfs package over --endpoint:
            Fetch, Create+WriteAt) and directories driven with os calls:
            TýrFS mounts (--mount NAME=PATH), peers such as the local disk
            (--dir NAME=PATH) and distributed file systems (--distributed
            NAME=PATH); every read is checked byte for byte
  limits    no server: loopback TCP round trips, loopback stream MB/s and
            small appends with fsync and 4 MiB sequential writes with fsync
            in --dir, the limits the other results can be read against

For counter and monalisa, --agg says how tyr updates: with atomic ops in the
commit ("tyr") and/or as transactional read-modify-write ("tyr-rmw"). A
system that aborts and retries on conflict (tyr-rmw, and tyr, PostgreSQL,
etcd and Redis in the bank) reports its aborts and aborts per committed
operation with each result.

tyr runs in a keyspace of its own (bench-<random>: 64 MiB chunks, sync on,
MVCC on, --replication copies) that is dropped at the end. Peers, each
measured as a system of its own, with their data removed at the end:
  --peer redis --peer-addr ADDR  write (SET), read (GET), stream (a key per
                                 4 MiB part), counter (INCRBY), bank (WATCH
                                 and MGET, then MSET in MULTI/EXEC, retried)
  --postgres URL                 counter (UPDATE ... RETURNING), monalisa (an
                                 INSERT and 4 UPDATEs in one transaction),
                                 bank (SERIALIZABLE SELECT, UPDATEs, retried)
  --etcd ADDR                    counter (Get, then Txn on ModRevision, with
                                 retry), read (Get), bank (Gets, then Txn on
                                 both ModRevisions, with retry)
  --zookeeper ADDR --zk-redis ADDR
                                 counter, monalisa and bank as
                                 read-modify-write in Redis under ZooKeeper
                                 locks, one per aggregate slot or account
Each client is one goroutine with its own connection.

Against a cluster, --direct sends each operation to the node that serves
its blob rather than to --endpoint, and --metrics-addr (every node's) adds
to each result the chain messages and Deliver calls between the nodes, and
the Commit and Read requests they served, during the measurement.

Results give, for each workload, system and client count: operations and
MB (10^6 bytes) per second, p50 and p99 latency of successful operations in
microseconds, failed operations, and the server's version and durability
settings. --json writes one JSON object per line instead of a table;
"tyr bench report FILE" turns such lines into Markdown and plots.`

func newBenchCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench WORKLOAD [flags]",
		Short: "Measure tyr, optionally side by side with peer systems",
		Long:  benchLong,
		Args:  cobra.ArbitraryArgs,
		// Without this, an unknown workload would print help and succeed.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return fmt.Errorf("unknown workload %q: want %s or report",
				args[0], strings.Join(bench.Workloads, ", "))
		},
	}
	for _, w := range bench.Workloads {
		cmd.AddCommand(newBenchWorkloadCommand(e, w))
	}
	cmd.AddCommand(newBenchReportCommand(e))
	return cmd
}

// sizeFlag is a byte count flag that accepts units such as KiB and GiB.
type sizeFlag struct{ n *int64 }

func (f sizeFlag) String() string {
	if f.n == nil {
		return "0"
	}
	return bench.FormatSize(*f.n)
}

func (f sizeFlag) Set(s string) error {
	n, err := bench.ParseSize(s)
	if err != nil {
		return err
	}
	*f.n = n
	return nil
}

func (sizeFlag) Type() string { return "size" }

// sizesFlag is a list of byte counts, separated by commas.
type sizesFlag struct{ ns *[]int64 }

func (f sizesFlag) String() string {
	if f.ns == nil {
		return ""
	}
	out := make([]string, len(*f.ns))
	for i, n := range *f.ns {
		out[i] = bench.FormatSize(n)
	}
	return strings.Join(out, ",")
}

func (f sizesFlag) Set(s string) error {
	var ns []int64
	for _, part := range strings.Split(s, ",") {
		n, err := bench.ParseSize(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		ns = append(ns, n)
	}
	*f.ns = ns
	return nil
}

func (sizesFlag) Type() string { return "sizes" }

// fsDirsFlag collects NAME=PATH directories of one role.
type fsDirsFlag struct {
	dirs *[]bench.FSDir
	role string
}

func (f fsDirsFlag) String() string {
	if f.dirs == nil {
		return ""
	}
	var out []string
	for _, d := range *f.dirs {
		if d.Role == f.role {
			out = append(out, d.Name+"="+d.Path)
		}
	}
	return strings.Join(out, ",")
}

func (f fsDirsFlag) Set(s string) error {
	d, err := bench.ParseFSDir(s, f.role)
	if err != nil {
		return err
	}
	*f.dirs = append(*f.dirs, d)
	return nil
}

func (fsDirsFlag) Type() string { return "NAME=PATH" }

// s3PeersFlag collects --s3 NAME=URL values.
type s3PeersFlag struct{ peers *[]bench.S3Peer }

func (f s3PeersFlag) String() string {
	if f.peers == nil {
		return ""
	}
	out := make([]string, len(*f.peers))
	for i, p := range *f.peers {
		out[i] = p.Name + "=" + p.URL
	}
	return strings.Join(out, ",")
}

func (f s3PeersFlag) Set(s string) error {
	p, err := bench.ParseS3Peer(s)
	if err != nil {
		return err
	}
	*f.peers = append(*f.peers, p)
	return nil
}

func (s3PeersFlag) Type() string { return "NAME=URL" }

var workloadShort = map[string]string{
	"write": "Random writes of --value-size bytes to pre-created blobs",
	"read":  "Power-law reads of --value-size bytes from preloaded blobs",
	"isolation": "Readers and writers of disjoint blobs at several mixes: per-reader throughput against " +
		"read-only runs",
	"stream": "Put then get one large value in parts",
	"object": "Each client puts whole objects of its own, then gets them, at each of --object-sizes",
	"list": "Pages of 1,000 keys listed from a 1,000-key prefix and from a --list-keys prefix, " +
		"each page after a random key",
	"counter": "Every client adds 1 to one shared 8-byte counter: atomic add vs transactional read-modify-write (and peers)",
	"monalisa": "MonALISA events appended with per-minute aggregates updated in the same transaction, " +
		"and power-law aggregate reads",
	"bank": "Transfers between random accounts, each a serializable read-modify-write transaction of two " +
		"balances; the balances' sum is checked afterwards",
	"fs": "Whole-file reads of one data set as large and as small files, and create/stat/read/delete of " +
		"empty and 4 KiB files: tyrfs-native, TýrFS mounts and peer directories",
	"limits": "The machine's loopback round trips, loopback stream and fsync rate, for reading the other results",
}

func newBenchWorkloadCommand(e *env, workload string) *cobra.Command {
	cfg := bench.DefaultConfig()
	cfg.Workload = workload
	var (
		asJSON    bool
		valueSize = int64(cfg.ValueSize)
	)
	cmd := &cobra.Command{
		Use:   workload + " [flags]",
		Short: workloadShort[workload],
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Endpoint = e.endpoint
			// Clamping keeps a huge value an error of Run's range check
			// rather than a wrapped conversion.
			cfg.ValueSize = int(min(valueSize, math.MaxInt32))
			return runBench(cmd.Context(), e, cfg, asJSON)
		},
	}
	f := cmd.Flags()
	if workload != "stream" {
		f.IntSliceVar(&cfg.Clients, "clients", cfg.Clients, "client counts to measure, each in turn: N[,N,...]")
		f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long each client count runs on each system")
	}
	switch workload {
	case "write":
		f.IntVar(&cfg.KeysPerClient, "keys-per-client", cfg.KeysPerClient, "blobs each client writes to")
	case "read", "isolation":
		f.IntVar(&cfg.ReadKeys, "read-keys", cfg.ReadKeys, "values stored before reading (isolation: half of them)")
		f.Float64Var(&cfg.ReadSkew, "read-skew", cfg.ReadSkew,
			"exponent of the power law reads pick keys by: key k in proportion to 1/(k+1)^skew; 0 picks uniformly")
		if workload == "isolation" {
			f.IntSliceVar(&cfg.ReaderShares, "reader-shares", cfg.ReaderShares,
				"mixes to measure: percent of the clients that read, the others writing")
		}
	case "object":
		f.Var(sizesFlag{&cfg.ObjectSizes}, "object-sizes", "object sizes to measure, each in turn: SIZE[,SIZE,...]")
	case "list":
		f.IntVar(&cfg.ListKeys, "list-keys", cfg.ListKeys, "keys of the large prefix")
		f.StringToStringVar(&cfg.S3Fill, "s3-fill", nil,
			"how to store the objects of the --s3 server NAME, if not by PutObject: NAME=native (tyr's gateway: "+
				"through --endpoint's native API) or NAME=DIR (versitygw's POSIX back-end serving DIR: as files)")
	case "stream":
		f.Var(sizeFlag{&cfg.StreamSize}, "stream-size", "size of the value put and got")
		f.IntVar(&cfg.StreamInFlight, "stream-in-flight", cfg.StreamInFlight, "parts in flight at once")
	case "monalisa":
		f.IntVar(&cfg.Generators, "generators", cfg.Generators, "event generators, each appending to a log of its own")
		f.Float64Var(&cfg.ReadRatio, "read-ratio", cfg.ReadRatio, "fraction of operations that read aggregates, in [0, 1]")
	case "bank":
		f.IntVar(&cfg.Accounts, "accounts", cfg.Accounts, "accounts transfers move money between")
		f.IntVar(&cfg.AccountsPerBlob, "accounts-per-blob", cfg.AccountsPerBlob,
			"balances tyr keeps side by side in one blob (transfers conflict per blob)")
	case bench.FSWorkload:
		cfg.Clients = []int{1, 16}
		f.Lookup("clients").DefValue = "[1,16]"
		f.Var(fsDirsFlag{&cfg.FSDirs, bench.RoleFSMount}, "mount", "a TýrFS mount to measure: NAME=PATH, repeatable")
		f.Var(fsDirsFlag{&cfg.FSDirs, bench.RoleFSPeer}, "dir", "a peer directory to measure, e.g. on the local disk: NAME=PATH, repeatable")
		f.Var(fsDirsFlag{&cfg.FSDirs, bench.RoleFSDistributed}, "distributed",
			"a distributed file system's mount to measure, the peer of the bars: NAME=PATH, repeatable")
		f.StringVar(&cfg.FSNative, "native", cfg.FSNative,
			"name of the tyrfs package's system over --endpoint, in a keyspace of its own; empty to leave it out")
		f.Var(sizeFlag{&cfg.FSDataSet}, "data-set", "bytes of the data set, stored as large files and again as small ones")
		f.Var(sizeFlag{&cfg.FSLargeFile}, "large-file", "size of the data set's large files")
		f.Var(sizeFlag{&cfg.FSSmallFile}, "small-file", "size of the data set's small files")
		f.IntVar(&cfg.FSMetaFiles, "meta-files", cfg.FSMetaFiles, "most files one create phase makes, over all its clients")
		f.BoolVar(&cfg.FSCreateTrunc, "create-trunc", cfg.FSCreateTrunc,
			`directories' creates open the new file with O_CREAT|O_TRUNC, as fopen(path, "w") does, instead of O_CREAT|O_EXCL`)
	case "limits":
		f.StringVar(&cfg.Dir, "dir", cfg.Dir, "directory to measure the fsync rate in: one on the disk the servers use")
	}
	if workload == "write" || workload == "read" || workload == "isolation" || workload == "counter" {
		f.Var(sizeFlag{&valueSize}, "value-size", "bytes per write or read, at most 4MiB")
	}
	if workload == "counter" || workload == "monalisa" {
		f.StringSliceVar(&cfg.Agg, "agg", cfg.Agg,
			"how tyr updates the counter or aggregates, each measured: atomic (ops in the commit), rmw (transaction)")
	}
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed for keys and values; 0 picks one, printed so a run can be repeated")
	f.BoolVar(&asJSON, "json", false, "write one JSON object per result line instead of a table")
	f.IntVar(&cfg.MaxErrors, "max-errors", cfg.MaxErrors, "stop a measurement after this many failed operations")
	f.DurationVar(&cfg.OpTimeout, "op-timeout", cfg.OpTimeout, "deadline of each operation")
	if workload == "limits" {
		return cmd
	}
	if workload == bench.FSWorkload {
		f.IntVar(&cfg.Replication, "replication", cfg.Replication, "replication factor of the native system's keyspace")
		f.BoolVar(&cfg.FSSync, "sync", cfg.FSSync,
			"sync every commit of the native system's keyspace to disk before acknowledging it (--sync=false: acknowledged once written)")
		return cmd
	}
	f.StringVar(&cfg.System, "system", cfg.System, "name of tyr in the results, e.g. to tell deployments apart in one report")
	f.IntVar(&cfg.Replication, "replication", cfg.Replication, "replication factor of the bench keyspace")
	if workload != "stream" {
		f.BoolVar(&cfg.Direct, "direct", false,
			"send each read and write to the node that serves its blob, found from the endpoint's cluster status")
		f.StringSliceVar(&cfg.MetricsAddrs, "metrics-addr", nil,
			"metrics address (host:port) of every node of the cluster; each result then carries the peer messages, "+
				"Deliver calls, requests and WAL syncs the nodes counted during it")
	}
	f.StringVar(&cfg.Peer, "peer", "", "also measure this system under the same workload: redis")
	f.StringSliceVar(&cfg.PeerAddrs, "peer-addr", []string{"127.0.0.1:6379"},
		"address of the peer; repeat or separate with commas to measure several servers")
	f.StringVar(&cfg.Postgres, "postgres", "", "also measure the PostgreSQL server at this URL (postgres://user@host:port/db)")
	f.StringVar(&cfg.Etcd, "etcd", "", "also measure the etcd member with this client address (host:port)")
	f.StringVar(&cfg.ZooKeeper, "zookeeper", "", "also measure Redis (--zk-redis) locked by the ZooKeeper server at host:port")
	f.StringVar(&cfg.ZKRedis, "zk-redis", "", "the Redis server (host:port) the ZooKeeper-locked peer keeps its data in")
	if workload == "object" || workload == "list" {
		f.Var(s3PeersFlag{&cfg.S3}, "s3", "also measure this S3 server: NAME=http://[ACCESS:SECRET@]HOST:PORT, repeatable")
		f.StringVar(&cfg.S3AccessKey, "s3-access-key", os.Getenv("TYR_S3_ACCESS_KEY"),
			"access key of the --s3 servers (env TYR_S3_ACCESS_KEY)")
		f.StringVar(&cfg.S3SecretKey, "s3-secret-key", os.Getenv("TYR_S3_SECRET_KEY"),
			"secret key of the --s3 servers (env TYR_S3_SECRET_KEY)")
	}
	return cmd
}

func runBench(ctx context.Context, e *env, cfg bench.Config, asJSON bool) error {
	// Interrupting a run still removes what it stored: Run cleans up on a
	// context of its own once this one is cancelled.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	cfg.Progress = e.stderr
	var results []bench.Result
	err := bench.Run(ctx, cfg, func(r bench.Result) error {
		results = append(results, r)
		if asJSON {
			return bench.WriteJSON(e.stdout, r)
		}
		return nil
	})
	if asJSON {
		return err
	}
	if len(results) > 0 {
		writeBenchSummary(e.stdout, cfg, results)
	}
	return err
}

func writeBenchSummary(w io.Writer, cfg bench.Config, results []bench.Result) {
	switch cfg.Workload {
	case "stream":
		fmt.Fprintf(w, "stream: %s in parts, %d in flight, seed %d, tyr at %s\n\n",
			bench.FormatSize(cfg.StreamSize), cfg.StreamInFlight, cfg.Seed, cfg.Endpoint)
	case "monalisa":
		fmt.Fprintf(w, "monalisa: %d generators, %.0f%% reads, %s per measurement, seed %d, tyr at %s\n\n",
			cfg.Generators, 100*cfg.ReadRatio, cfg.Duration, cfg.Seed, cfg.Endpoint)
	case "bank":
		fmt.Fprintf(w, "bank: %d accounts, %d per blob on tyr, %s per measurement, seed %d, tyr at %s\n\n",
			cfg.Accounts, cfg.AccountsPerBlob, cfg.Duration, cfg.Seed, cfg.Endpoint)
	case bench.FSWorkload:
		open := "O_CREAT|O_EXCL"
		if cfg.FSCreateTrunc {
			open = "O_CREAT|O_TRUNC"
		}
		fmt.Fprintf(w, "fs: a data set of %s as %s and as %s files, %s per measurement, at most %d files per create phase (%s), seed %d\n\n",
			bench.FormatSize(cfg.FSDataSet), bench.FormatSize(cfg.FSLargeFile), bench.FormatSize(cfg.FSSmallFile),
			cfg.Duration, cfg.FSMetaFiles, open, cfg.Seed)
		_ = bench.WriteFSReport(w, results)
		return
	case "limits":
		fmt.Fprintf(w, "limits: %s per measurement, fsync in %s\n\n", cfg.Duration, cfg.Dir)
	default:
		fmt.Fprintf(w, "%s: values of %d bytes, %s per measurement, seed %d, tyr at %s\n\n",
			cfg.Workload, cfg.ValueSize, cfg.Duration, cfg.Seed, cfg.Endpoint)
	}
	_ = bench.WriteTable(w, results)
	if cfg.Workload == bench.IsolationWorkload {
		_ = bench.WriteIsolation(w, results)
	}
	var ratios strings.Builder
	if err := bench.WriteRatios(&ratios, results, cfg.System); err == nil && ratios.Len() > 0 {
		fmt.Fprintf(w, "\n%s", ratios.String())
	}
	for _, n := range bench.Notes(results) {
		fmt.Fprintf(w, "\nnote: %s", n)
	}
	fmt.Fprintf(w, "\n%s\n", bench.NoisyMachineNote)
}

func newBenchReportCommand(e *env) *cobra.Command {
	base := bench.BaseSystem
	var (
		plots   string
		targets bool
	)
	cmd := &cobra.Command{
		Use:   "report [FILE...]",
		Short: "Turn --json results into Markdown tables of tyr/peer ratios, and plots",
		Long: `Read results written by "tyr bench WORKLOAD --json" from the files, or from
standard input when none is given or a file is "-", and write Markdown: for
each workload, the ratio of tyr's operations per second to each peer's at
every client count; the machine's limits, if measured; then every
measurement, as a fraction of those limits. --base names the system the
others are compared with. --plots PREFIX also draws each workload's
operations per second by clients, every system on one chart, into
PREFIX-<workload>.png, linked from the Markdown by file name (for a report
saved next to the plots). --targets ends the report with the issue's
targets: each bound, the ratio this run measured and whether it is met.`,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{"-"}
			}
			var all []bench.Result
			for _, name := range args {
				rs, err := readResults(e, name)
				if err != nil {
					return err
				}
				all = append(all, rs...)
			}
			if len(all) == 0 {
				return errors.New("no results to report")
			}
			if len(all) > 0 && !slices.ContainsFunc(all, func(r bench.Result) bool { return !bench.IsFS(r) }) {
				return bench.WriteFSReport(e.stdout, all)
			}
			var links map[string]string
			if plots != "" {
				files, err := bench.WritePlots(plots, all)
				if err != nil {
					return err
				}
				links = map[string]string{}
				for wl, f := range files {
					links[wl] = filepath.Base(f)
				}
			}
			if err := bench.WriteReport(e.stdout, all, base, links); err != nil {
				return err
			}
			if targets {
				return bench.WriteTargetsSection(e.stdout, all, base)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&base, "base", base, "system whose operations per second the ratios divide")
	cmd.Flags().BoolVar(&targets, "targets", false,
		"end with the issue's targets (at 32 clients), each measured ratio and whether it is met")
	cmd.Flags().StringVar(&plots, "plots", "", "also write a PNG plot per workload to PREFIX-<workload>.png")
	return cmd
}

func readResults(e *env, name string) ([]bench.Result, error) {
	if name == "-" {
		return bench.ReadJSONL(e.stdin)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rs, err := bench.ReadJSONL(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return rs, nil
}
