// Command umlrun runs a command inside User-Mode Linux with kernel SCTP
// loaded (package uml), prints its output and exits with its status:
//
//	go run ./internal/uml/umlrun -timeout 5m -- sh -c 'sysctl net.sctp.rto_min; ./ksctp.test -test.run TestEcho'
//
// The host's files are the guest's (read-only, but for a temp dir the
// guest writes its output to), so binaries built here run there.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/braid-hpc/braid/internal/uml"
)

func main() {
	timeout := flag.Duration("timeout", 5*time.Minute, "kill the guest after this long")
	mem := flag.String("mem", "", "guest memory (linux.uml's mem=); empty: 1024M")
	dir := flag.String("dir", "", "working directory of the command; empty: the current one")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: umlrun [flags] -- command [args...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *dir == "" {
		*dir, _ = os.Getwd()
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	res, err := uml.Run(ctx, uml.Config{Mem: *mem, Dir: *dir, Env: passEnv()}, flag.Args()...)
	if res != nil {
		os.Stdout.Write(res.Output)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "umlrun:", err)
		os.Exit(124)
	}
	os.Exit(res.ExitCode)
}

// passEnv forwards the BRAID_* variables into the guest.
func passEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if len(e) > 6 && e[:6] == "BRAID_" {
			env = append(env, e)
		}
	}
	return env
}
