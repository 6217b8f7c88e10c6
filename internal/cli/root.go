// Package cli is the tyr command line: the server, keyspace administration
// and blob commands. Every command that fails prints one line, "tyr: ...",
// to stderr and exits non-zero; an error of a class names it first and
// ends saying whether retrying can help.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/errs"
)

// env holds what the commands share: streams and the endpoint flag.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	endpoint       string
}

// withClient connects to the endpoint given by --endpoint or TYR_ENDPOINT,
// runs fn with the client and closes it.
func (e *env) withClient(fn func(c *client.Client) error) error {
	c, err := client.Dial(e.endpoint)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// Main runs the command line with args and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRoot(e)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(stderr, errorLine(err))
		return exitCode(err)
	}
	return 0
}

// errorLine renders err as the one line a failing command prints: its
// message (errorText), then, for an error of a class, whether retrying can
// help: "tyr: conflict: blob \"k\" ...; retrying can help".
func errorLine(err error) string {
	line := "tyr: " + errorText(err)
	if hint := errs.Hint(err); hint != "" {
		line += "; " + hint
	}
	return line
}

// errorText renders err's message on one line: the server's message for an
// error of the server's, with its class word first and nowhere else
// (errs.Message).
func errorText(err error) string {
	msg := err.Error()
	var ce *client.Error
	if errors.As(err, &ce) {
		msg = ce.Message
	}
	msg = strings.TrimPrefix(msg, "tyr: ")
	return strings.ReplaceAll(errs.Message(errs.Of(err), msg), "\n", "; ")
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:           "tyr",
		Short:         "tyr: a distributed, transactional blob store",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	endpoint := os.Getenv("TYR_ENDPOINT")
	if endpoint == "" {
		endpoint = client.DefaultEndpoint
	}
	root.PersistentFlags().StringVar(&e.endpoint, "endpoint", endpoint,
		"server address host:port (env TYR_ENDPOINT)")
	root.AddCommand(newServerCommand(e))
	for _, add := range commandAdders {
		add(root, e)
	}
	return root
}

// commandAdders lets each command file register its commands.
var commandAdders []func(root *cobra.Command, e *env)
