package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tyrstore/tyr/client"
)

func init() { commandAdders = append(commandAdders, addBlobCommands) }

func addBlobCommands(root *cobra.Command, e *env) {
	root.AddCommand(
		newCreate(e), newPut(e), newGet(e), newCat(e), newWrite(e), newAppend(e),
		newTruncate(e), newStat(e), newList(e), newRemove(e),
	)
}

// splitPath splits KS/KEY at the first '/'; the key keeps any further '/'.
func splitPath(arg string) (ks, key string, err error) {
	ks, key, ok := strings.Cut(arg, "/")
	if !ok || ks == "" || key == "" {
		return "", "", fmt.Errorf("invalid blob path %q: want KEYSPACE/KEY", arg)
	}
	return ks, key, nil
}

// splitPrefix splits KS[/PREFIX] for ls, where the prefix may be empty.
func splitPrefix(arg string) (ks, prefix string, err error) {
	ks, prefix, _ = strings.Cut(arg, "/")
	if ks == "" {
		return "", "", fmt.Errorf("invalid list path %q: want KEYSPACE or KEYSPACE/PREFIX", arg)
	}
	return ks, prefix, nil
}

// blobRun is the body of a command on one blob: the path is already split
// and the client dialled.
type blobRun func(ctx context.Context, c *client.Client, ks, key string, args []string) error

// blobCommand builds a command whose first argument is KS/KEY.
func blobCommand(e *env, use, short string, minArgs, maxArgs int, run blobRun) *cobra.Command {
	usage := strings.TrimPrefix(use, strings.Fields(use)[0]+" ")
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  rangeArgs(minArgs, maxArgs, usage),
		RunE: func(cmd *cobra.Command, args []string) error {
			ks, key, err := splitPath(args[0])
			if err != nil {
				return err
			}
			return e.withClient(func(c *client.Client) error {
				return run(cmd.Context(), c, ks, key, args[1:])
			})
		},
	}
}

// nonNegative checks a signed flag value; flags are parsed as signed so
// that "-5" is reported as negative instead of as a huge unsigned number.
func nonNegative(name string, v int64) error {
	if v < 0 {
		return fmt.Errorf("invalid --%s %d: must not be negative", name, v)
	}
	return nil
}

// openInput opens FILE, or stdin for "-" or no argument.
func openInput(e *env, args []string) (io.Reader, func() error, error) {
	if len(args) == 0 || args[0] == "-" {
		return e.stdin, func() error { return nil }, nil
	}
	f, err := os.Open(args[0])
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}

func newCreate(e *env) *cobra.Command {
	return blobCommand(e, "create KS/KEY", "Create an empty blob; fails if it exists", 1, 1,
		func(ctx context.Context, c *client.Client, ks, key string, _ []string) error {
			return c.Create(ctx, ks, key)
		})
}

func newPut(e *env) *cobra.Command {
	return blobCommand(e, "put KS/KEY [FILE|-]",
		"Create or replace a blob with FILE or stdin; atomic up to 4 MiB, streamed beyond", 1, 2,
		func(ctx context.Context, c *client.Client, ks, key string, args []string) error {
			in, closeIn, err := openInput(e, args)
			if err != nil {
				return err
			}
			defer closeIn()
			_, err = c.Put(ctx, ks, key, in)
			return err
		})
}

// rangeFlags are --offset and --length of get and cat.
type rangeFlags struct{ offset, length int64 }

func (f *rangeFlags) add(cmd *cobra.Command) {
	cmd.Flags().Int64Var(&f.offset, "offset", 0, "first byte to read")
	cmd.Flags().Int64Var(&f.length, "length", -1, "bytes to read (default: to the end)")
}

// open checks the flags and opens a reader on the range. --length defaults
// to "to the end", so an explicit negative value must still be refused.
func (f *rangeFlags) open(ctx context.Context, cmd *cobra.Command, c *client.Client, ks, key string) (*client.Reader, error) {
	if err := nonNegative("offset", f.offset); err != nil {
		return nil, err
	}
	length := int64(-1)
	if cmd.Flags().Changed("length") {
		if err := nonNegative("length", f.length); err != nil {
			return nil, err
		}
		length = f.length
	}
	return c.NewRangeReader(ctx, ks, key, uint64(f.offset), length)
}

func newGet(e *env) *cobra.Command {
	var f rangeFlags
	var cmd *cobra.Command
	cmd = blobCommand(e, "get KS/KEY [FILE]", "Read a blob, or a range of it, to FILE or stdout", 1, 2,
		func(ctx context.Context, c *client.Client, ks, key string, args []string) error {
			r, err := f.open(ctx, cmd, c, ks, key)
			if err != nil {
				return err
			}
			defer r.Close()
			if len(args) == 0 || args[0] == "-" {
				_, err = r.WriteTo(e.stdout)
				return err
			}
			return writeFile(args[0], r)
		})
	f.add(cmd)
	return cmd
}

// writeFile streams r into path. The file is created only once the blob is
// known to exist, and removed if the stream fails, so a failed get leaves no
// truncated copy behind.
func writeFile(path string, r io.WriterTo) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = r.WriteTo(out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

func newCat(e *env) *cobra.Command {
	var f rangeFlags
	var cmd *cobra.Command
	cmd = blobCommand(e, "cat KS/KEY", "Print a blob, or a range of it, to stdout", 1, 1,
		func(ctx context.Context, c *client.Client, ks, key string, _ []string) error {
			r, err := f.open(ctx, cmd, c, ks, key)
			if err != nil {
				return err
			}
			defer r.Close()
			_, err = r.WriteTo(e.stdout)
			return err
		})
	f.add(cmd)
	return cmd
}

func newWrite(e *env) *cobra.Command {
	var offset int64
	cmd := blobCommand(e, "write KS/KEY --offset N [FILE|-]",
		"Write FILE or stdin at an offset into an existing blob", 1, 2,
		func(ctx context.Context, c *client.Client, ks, key string, args []string) error {
			if err := nonNegative("offset", offset); err != nil {
				return err
			}
			in, closeIn, err := openInput(e, args)
			if err != nil {
				return err
			}
			defer closeIn()
			w := c.NewWriter(ctx, ks, key, uint64(offset), false)
			_, err = w.ReadFrom(in)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			return err
		})
	cmd.Flags().Int64Var(&offset, "offset", 0, "where to write (required)")
	_ = cmd.MarkFlagRequired("offset")
	return cmd
}

func newAppend(e *env) *cobra.Command {
	return blobCommand(e, "append KS/KEY [FILE|-]",
		"Append FILE or stdin atomically (at most 4 MiB) and print the offset it landed at", 1, 2,
		func(ctx context.Context, c *client.Client, ks, key string, args []string) error {
			in, closeIn, err := openInput(e, args)
			if err != nil {
				return err
			}
			defer closeIn()
			// One byte past the limit is enough to know the data is too
			// large, without reading all of it.
			data, err := io.ReadAll(io.LimitReader(in, client.PayloadBytesMax+1))
			if err != nil {
				return err
			}
			if len(data) > client.PayloadBytesMax {
				return fmt.Errorf("append of more than %d bytes refused: an append is one atomic request; use write or put for larger data",
					client.PayloadBytesMax)
			}
			off, err := c.Append(ctx, ks, key, data)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(e.stdout, off)
			return err
		})
}

func newTruncate(e *env) *cobra.Command {
	cmd := blobCommand(e, "truncate KS/KEY SIZE", "Set a blob's size; growing reads as zeros", 2, 2,
		func(ctx context.Context, c *client.Client, ks, key string, args []string) error {
			size, err := parseSize("size", args[0])
			if err != nil {
				return err
			}
			return c.Truncate(ctx, ks, key, size)
		})
	cmd.SetFlagErrorFunc(negativeArgError("size"))
	return cmd
}

// negativeArgError rewrites the flag parser's complaint about a negative
// positional argument: "-5" looks like an unknown shorthand flag to it, but
// the user meant a number, so the error should say negatives are refused.
func negativeArgError(what string) func(*cobra.Command, error) error {
	return func(_ *cobra.Command, err error) error {
		msg := err.Error()
		i := strings.LastIndex(msg, " in -")
		if !strings.HasPrefix(msg, "unknown shorthand flag: ") || i < 0 {
			return err
		}
		arg := msg[i+len(" in "):]
		if _, perr := parseSize(what, arg[1:]); perr == nil {
			return fmt.Errorf("invalid %s %q: must not be negative", what, arg)
		}
		return err
	}
}

func newStat(e *env) *cobra.Command {
	return blobCommand(e, "stat KS/KEY", "Describe a blob", 1, 1,
		func(ctx context.Context, c *client.Client, ks, key string, _ []string) error {
			b, err := c.Stat(ctx, ks, key)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(e.stdout, "key:      %s\nsize:     %d\nversion:  %d\ncreated:  %s\nmodified: %s\n",
				b.Key, b.Size, b.Version, b.Created.Format(time.RFC3339Nano), b.Modified.Format(time.RFC3339Nano))
			return err
		})
}

func newList(e *env) *cobra.Command {
	var (
		limit      int64
		startAfter string
		all        bool
	)
	cmd := &cobra.Command{
		Use:   "ls KS[/PREFIX]",
		Short: "List blobs, one \"KEY<tab>SIZE\" per line, in key order",
		Long: "List blobs, one \"KEY<tab>SIZE\" per line, in key order. Without --limit\n" +
			"every key is listed; with it, at most that many, unless --all is given,\n" +
			"which lists every key using --limit as the page size.",
		Args: exactArgs(1, "KS[/PREFIX]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ks, prefix, err := splitPrefix(args[0])
			if err != nil {
				return err
			}
			limited := cmd.Flags().Changed("limit")
			if limited && limit < 1 {
				return fmt.Errorf("invalid --limit %d: must be at least 1", limit)
			}
			return e.withClient(func(c *client.Client) error {
				return listAll(cmd.Context(), c, e.stdout, ks, prefix, startAfter, limit, limited && !all)
			})
		},
	}
	cmd.Flags().Int64Var(&limit, "limit", 0, "list at most N keys, or with --all fetch N per page")
	cmd.Flags().StringVar(&startAfter, "start-after", "", "list keys after this one")
	cmd.Flags().BoolVar(&all, "all", false, "list every key, paging through all results")
	return cmd
}

// listAll prints keys page by page, so a huge keyspace is never held in
// memory. With capped, it stops after limit keys; otherwise limit is only
// the page size.
func listAll(ctx context.Context, c *client.Client, out io.Writer, ks, prefix, start string, limit int64, capped bool) error {
	page := int64(client.ListLimitMax)
	if limit > 0 {
		page = min(limit, page)
	}
	left := limit
	for {
		n := page
		if capped {
			n = min(n, left)
		}
		blobs, next, err := c.List(ctx, ks, prefix, start, int(n))
		if err != nil {
			return err
		}
		for _, b := range blobs {
			if _, err := fmt.Fprintf(out, "%s\t%d\n", b.Key, b.Size); err != nil {
				return err
			}
		}
		left -= int64(len(blobs))
		if next == "" || (capped && left <= 0) {
			return nil
		}
		if next == start {
			return errors.New("list did not advance; stopping")
		}
		start = next
	}
}

func newRemove(e *env) *cobra.Command {
	return blobCommand(e, "rm KS/KEY", "Remove a blob", 1, 1,
		func(ctx context.Context, c *client.Client, ks, key string, _ []string) error {
			return c.Delete(ctx, ks, key)
		})
}
