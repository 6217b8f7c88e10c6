package cli

import (
	"context"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/tyrfs"
)

func init() {
	commandAdders = append(commandAdders, func(root *cobra.Command, e *env) { root.AddCommand(newFSCommand(e)) })
}

// progressInterval is how often tyr fs import and export print progress.
const progressInterval = time.Second

func newFSCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fs",
		Short: "Copy directory trees into and out of a TýrFS keyspace",
	}
	cmd.AddCommand(newFSCopyCommand(e, true), newFSCopyCommand(e, false))
	return cmd
}

// splitFSPath splits KEYSPACE[/PREFIX] into the keyspace and the absolute
// path of the prefix ("/" without one).
func splitFSPath(arg string) (ks, p string, err error) {
	ks, prefix, _ := strings.Cut(arg, "/")
	if ks == "" {
		return "", "", fmt.Errorf("invalid path %q: want KEYSPACE or KEYSPACE/PREFIX", arg)
	}
	return ks, "/" + strings.Trim(prefix, "/"), nil
}

func newFSCopyCommand(e *env, in bool) *cobra.Command {
	use, short, long := "export KEYSPACE[/PREFIX] DIR", "Copy a TýrFS tree out to a local directory",
		`Copy the tree under PREFIX of the TýrFS keyspace into the local directory DIR
(made if missing), keeping names, kinds, modes and times, and owners when
run as root. A local file with the same size and mtime is left alone, so a
second run resumes an interrupted one. Progress goes to stderr.`
	if in {
		use, short, long = "import DIR KEYSPACE[/PREFIX]", "Copy a local directory tree into a TýrFS keyspace",
			`Copy the local tree under DIR into the TýrFS file system of KEYSPACE,
under PREFIX (made if missing), keeping names, kinds, modes, owners and
times; devices, FIFOs and sockets are skipped and counted. A file whose
copy has the same size and mtime is left alone, and the mtime is set last,
so a second run resumes an interrupted one. The keyspace must exist.
Progress goes to stderr.`
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			local, remote := args[0], args[1]
			if !in {
				local, remote = args[1], args[0]
			}
			ks, p, err := splitFSPath(remote)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return e.withClient(func(c *client.Client) error {
				return runFSCopy(ctx, e, c, ks, p, local, in)
			})
		},
	}
}

func runFSCopy(ctx context.Context, e *env, c *client.Client, ks, p, local string, in bool) error {
	f, err := tyrfs.New(ctx, c, ks)
	if err != nil {
		return err
	}
	start, last := time.Now(), time.Now()
	progress := func(s tyrfs.CopyStats) {
		if time.Since(last) >= progressInterval {
			last = time.Now()
			fmt.Fprintf(e.stderr, "%s: %v\n", time.Since(start).Round(time.Second), s)
		}
	}
	var s tyrfs.CopyStats
	if in {
		s, err = f.Import(ctx, local, p, progress)
	} else {
		s, err = f.Export(ctx, p, local, progress)
	}
	if err != nil {
		return fmt.Errorf("%w (after %v; run again to resume)", err, s)
	}
	fmt.Fprintf(e.stdout, "%v in %v\n", s, time.Since(start).Round(time.Millisecond))
	return nil
}
