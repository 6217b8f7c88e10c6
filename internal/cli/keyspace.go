package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tyrstore/tyr/client"
)

func init() { commandAdders = append(commandAdders, addKeyspaceCommands) }

func addKeyspaceCommands(root *cobra.Command, e *env) {
	ks := &cobra.Command{
		Use:   "keyspace",
		Short: "Create, list, describe and drop keyspaces",
		// A bare or misspelt "tyr keyspace" is a usage error, reported like
		// any other rather than by printing help and exiting 0.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("missing command: want tyr keyspace create, ls, info or drop")
		},
	}
	ks.AddCommand(newKeyspaceCreate(e), newKeyspaceList(e), newKeyspaceInfo(e), newKeyspaceDrop(e))
	root.AddCommand(ks)
}

func newKeyspaceCreate(e *env) *cobra.Command {
	var (
		chunk       string
		replication int
		mvcc, sync  bool
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a keyspace",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			chunkBytes, err := parseSize("--chunk-size", chunk)
			if err != nil {
				return err
			}
			if replication < 1 || replication > math.MaxUint32 {
				return fmt.Errorf("invalid --replication %d: must be at least 1", replication)
			}
			return e.withClient(func(c *client.Client) error {
				_, err = c.CreateKeyspace(cmd.Context(), args[0], client.KeyspaceConfig{
					ChunkSize: chunkBytes, Replication: uint32(replication), MVCC: mvcc, Sync: sync})
				return err
			})
		},
	}
	cmd.Flags().StringVar(&chunk, "chunk-size", "64MiB", "chunk size, a power of two: bytes or with KiB, MiB, GiB")
	cmd.Flags().IntVar(&replication, "replication", 1, "number of replicas")
	cmd.Flags().BoolVar(&mvcc, "mvcc", true, "keep superseded versions readable for a while")
	cmd.Flags().BoolVar(&sync, "sync", true, "sync every commit to disk before acknowledging it")
	return cmd
}

func newKeyspaceList(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List keyspaces",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withClient(func(c *client.Client) error {
				all, err := c.ListKeyspaces(cmd.Context())
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tCHUNK SIZE\tREPLICATION\tMVCC\tSYNC")
				for _, k := range all {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%t\t%t\n", k.Name, formatSize(k.Config.ChunkSize),
						k.Config.Replication, k.Config.MVCC, k.Config.Sync)
				}
				return tw.Flush()
			})
		},
	}
}

func newKeyspaceInfo(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "info NAME",
		Short: "Describe a keyspace, with this node's share: blobs, logical bytes, bytes on disk, bytes to reclaim",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(c *client.Client) error {
				k, err := c.Keyspace(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 1, ' ', 0)
				fmt.Fprintf(tw, "name:\t%s\n", k.Name)
				fmt.Fprintf(tw, "chunk size:\t%s\n", formatSize(k.Config.ChunkSize))
				fmt.Fprintf(tw, "replication:\t%d\n", k.Config.Replication)
				fmt.Fprintf(tw, "mvcc:\t%t\n", k.Config.MVCC)
				fmt.Fprintf(tw, "sync:\t%t\n", k.Config.Sync)
				fmt.Fprintf(tw, "blobs:\t%d\n", k.Blobs)
				fmt.Fprintf(tw, "logical bytes:\t%d\n", k.LogicalBytes)
				fmt.Fprintf(tw, "disk bytes:\t%d\n", k.DiskBytes)
				fmt.Fprintf(tw, "reclaim bytes:\t%d\n", k.ReclaimBytes)
				fmt.Fprintf(tw, "created:\t%s\n", k.Created.Format(time.RFC3339))
				return tw.Flush()
			})
		},
	}
}

func newKeyspaceDrop(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "drop NAME",
		Short: "Drop a keyspace and all its blobs",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(c *client.Client) error {
				return c.DropKeyspace(cmd.Context(), args[0])
			})
		},
	}
}

// sizeUnits are the suffixes parseSize accepts, largest first so that
// formatSize picks the shortest exact form.
var sizeUnits = []struct {
	suffix string
	bytes  uint64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1},
}

// parseSize reads a byte count, plain or with a binary suffix (4KiB, 64MiB).
// It parses the number as signed so that a negative size is reported as
// such rather than as a syntax error.
func parseSize(what, s string) (uint64, error) {
	num, mult := s, uint64(1)
	for _, u := range sizeUnits {
		if len(s) > len(u.suffix) && strings.EqualFold(s[len(s)-len(u.suffix):], u.suffix) {
			num, mult = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.bytes
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid %s %q: want bytes, optionally with KiB, MiB, GiB or TiB", what, s)
	}
	if n < 0 {
		return 0, fmt.Errorf("invalid %s %q: must not be negative", what, s)
	}
	if uint64(n) > math.MaxUint64/mult {
		return 0, fmt.Errorf("invalid %s %q: too large", what, s)
	}
	return uint64(n) * mult, nil
}

// formatSize prints n with the largest binary suffix that divides it.
func formatSize(n uint64) string {
	for _, u := range sizeUnits {
		if n >= u.bytes && n%u.bytes == 0 {
			return strconv.FormatUint(n/u.bytes, 10) + u.suffix
		}
	}
	return "0B"
}

// noArgs and exactArgs replace cobra's argument checks to name what is
// missing or extra in the one error line.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

func exactArgs(n int, names string) cobra.PositionalArgs {
	return rangeArgs(n, n, names)
}

func rangeArgs(lo, hi int, usage string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return fmt.Errorf("usage: %s %s", cmd.CommandPath(), usage)
		}
		return nil
	}
}
