// Command vmrun runs a command inside a Linux kernel with kernel SCTP
// loaded (package vmkernel: User-Mode Linux where it boots, else QEMU;
// BRAID_VMKERNEL=uml|qemu forces one), prints its output and exits with
// its status:
//
//	go run ./internal/vmkernel/vmrun -timeout 5m -- sh -c 'sysctl net.sctp.rto_min; ./ksctp.test -test.run TestEcho'
//
// vmrun -setup prepares QEMU's kernel ahead of the tests (.ci/run does).
// The host's files are the guest's (read-only, but for a temp dir the
// guest writes its output to), so binaries built here run there. The
// BRAID_* variables pass into the guest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/braid-hpc/braid/internal/vmkernel"
)

func main() {
	timeout := flag.Duration("timeout", 5*time.Minute, "kill the guest after this long (QEMU's one-time kernel setup included)")
	mem := flag.String("mem", "", "guest memory, as 1024M or 2G; empty: 1024M")
	dir := flag.String("dir", "", "working directory of the command; empty: the current one")
	setup := flag.Bool("setup", false, "set up QEMU's kernel in its cache (once), say which backend runs and why, and exit")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: vmrun [flags] -- command [args...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *setup {
		os.Exit(doSetup(*timeout))
	}
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *dir == "" {
		*dir, _ = os.Getwd()
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, err := vmkernel.Choose(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmrun:", err)
		os.Exit(125)
	}
	fmt.Fprintln(os.Stderr, "vmrun:", c.Reason)
	res, err := vmkernel.Run(ctx, vmkernel.Config{Mem: *mem, Dir: *dir, Env: passEnv()}, flag.Args()...)
	if res != nil {
		os.Stdout.Write(res.Output)
		fmt.Fprintf(os.Stderr, "vmrun: %s kernel %s, %v\n", res.Backend, res.Kernel, res.Elapsed.Round(time.Millisecond))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmrun:", err)
		os.Exit(124)
	}
	os.Exit(res.ExitCode)
}

// doSetup runs QEMU's one-time setup and the backend choice.
func doSetup(timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	kernel, took, err := vmkernel.Setup(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmrun:", err)
		return 1
	}
	if took > 0 {
		fmt.Printf("vmrun: QEMU's kernel %s set up in %v\n", kernel, took.Round(time.Second))
	} else {
		fmt.Printf("vmrun: QEMU's kernel %s was set up already\n", kernel)
	}
	c, err := vmkernel.Choose(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmrun:", err)
		return 1
	}
	fmt.Println("vmrun: kernel tests run in", c.Reason)
	return 0
}

// passEnv forwards the BRAID_* variables into the guest.
func passEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if strings.HasPrefix(e, "BRAID_") {
			env = append(env, e)
		}
	}
	return env
}
