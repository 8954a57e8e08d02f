// Command braid moves data over every network path between cluster hosts
// and runs batch jobs on top of that transport. See `braid help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/braid-hpc/braid/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
