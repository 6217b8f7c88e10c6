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
Redis under the same logical workload.

Workloads:
  write   each client writes --value-size bytes to blobs of its own, chosen at
          random among --keys-per-client blobs created beforehand
  read    --read-keys values of --value-size bytes are stored, then each
          client reads random ones
  stream  one value of --stream-size is put in parts of the most one request
          carries (4 MiB), a few in flight, then read back; put and get are
          reported separately

tyr runs in a keyspace of its own (bench-<random>: 64 MiB chunks, sync on,
MVCC on, --replication copies) that is dropped at the end. With --peer redis, the same workload
runs against each --peer-addr: a write is SET, a read is GET, and a stream is
one key per 4 MiB part; bench keys are deleted at the end. Each client is one
goroutine with its own connection.

Against a cluster, --direct sends each operation to the node that serves
its blob rather than to --endpoint, and --metrics-addr (every node's) adds
to each result the chain messages and Deliver calls between the nodes, and
the Commit and Read requests they served, during the measurement.

Results give, for each workload, system and client count: operations and
MB (10^6 bytes) per second, p50 and p99 latency of successful operations in
microseconds, and failed operations. --json writes one JSON object per line
instead of a table; "tyr bench report FILE" turns such lines into Markdown.`

func newBenchCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench WORKLOAD [flags]",
		Short: "Measure tyr, optionally side by side with Redis",
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

var workloadShort = map[string]string{
	"write":   "Random writes of --value-size bytes to pre-created blobs",
	"read":    "Random reads of --value-size bytes from preloaded blobs",
	"stream":  "Put then get one large value in parts",
	"counter": "Every client adds 1 to one shared 8-byte counter: atomic add vs transactional read-modify-write (and Redis INCRBY)",
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
		f.Var(sizeFlag{&valueSize}, "value-size", "bytes per write or read, at most 4MiB")
	}
	switch workload {
	case "write":
		f.IntVar(&cfg.KeysPerClient, "keys-per-client", cfg.KeysPerClient, "blobs each client writes to")
	case "read":
		f.IntVar(&cfg.ReadKeys, "read-keys", cfg.ReadKeys, "values stored before reading")
	case "stream":
		f.Var(sizeFlag{&cfg.StreamSize}, "stream-size", "size of the value put and got")
		f.IntVar(&cfg.StreamInFlight, "stream-in-flight", cfg.StreamInFlight, "parts in flight at once")
	}
	f.StringVar(&cfg.System, "system", cfg.System, "name of tyr in the results, e.g. to tell deployments apart in one report")
	f.IntVar(&cfg.Replication, "replication", cfg.Replication, "replication factor of the bench keyspace")
	if workload != "stream" {
		f.BoolVar(&cfg.Direct, "direct", false,
			"send each read and write to the node that serves its blob, found from the endpoint's cluster status")
		f.StringSliceVar(&cfg.MetricsAddrs, "metrics-addr", nil,
			"metrics address (host:port) of every node of the cluster; each result then carries the peer messages, "+
				"Deliver calls and requests the nodes counted during it")
	}
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed for keys and values; 0 picks one, printed so a run can be repeated")
	f.BoolVar(&asJSON, "json", false, "write one JSON object per result line instead of a table")
	f.StringVar(&cfg.Peer, "peer", "", "also measure this system under the same workload: redis")
	f.StringSliceVar(&cfg.PeerAddrs, "peer-addr", []string{"127.0.0.1:6379"},
		"address of the peer; repeat or separate with commas to measure several servers")
	f.IntVar(&cfg.MaxErrors, "max-errors", cfg.MaxErrors, "stop a measurement after this many failed operations")
	f.DurationVar(&cfg.OpTimeout, "op-timeout", cfg.OpTimeout, "deadline of each operation")
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
	if cfg.Workload == "stream" {
		fmt.Fprintf(w, "stream: %s in parts, %d in flight, seed %d, tyr at %s\n\n",
			bench.FormatSize(cfg.StreamSize), cfg.StreamInFlight, cfg.Seed, cfg.Endpoint)
	} else {
		fmt.Fprintf(w, "%s: values of %d bytes, %s per measurement, seed %d, tyr at %s\n\n",
			cfg.Workload, cfg.ValueSize, cfg.Duration, cfg.Seed, cfg.Endpoint)
	}
	_ = bench.WriteTable(w, results)
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
	cmd := &cobra.Command{
		Use:   "report [FILE...]",
		Short: "Turn --json results into Markdown tables of tyr/peer ratios",
		Long: `Read results written by "tyr bench WORKLOAD --json" from the files, or from
standard input when none is given or a file is "-", and write Markdown: the
ratio of tyr's operations per second to each peer's for every workload and
client count, then every measurement. --base names the system the others are
compared with.`,
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
			return bench.WriteReport(e.stdout, all, base)
		},
	}
	cmd.Flags().StringVar(&base, "base", base, "system whose operations per second the ratios divide")
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
