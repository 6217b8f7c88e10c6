// Command tyr is the tyr server, its administration tool and its client.
package main

import (
	"os"

	"github.com/tyrstore/tyr/internal/cli"
)

func main() {
	if cli.IsMountHelper(os.Args[0]) {
		os.Exit(cli.MountHelper(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
