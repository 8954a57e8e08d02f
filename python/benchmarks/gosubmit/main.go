// Command gosubmit is the Go side of python/benchmarks/submit.py: it
// submits n small jobs through package client, waits for each in turn,
// and prints the wall time taken, as the Python side does with the
// Python client, so that the two clients' costs can be compared side by
// side on one cluster.
//
//	BRAID_KEY=... gosubmit -server https://127.0.0.1:7400 -input BLOB [-n 100] [-op noop]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
)

func main() {
	server := flag.String("server", "", "base URL of the braid server")
	input := flag.String("input", "", "blob id of every job's input")
	op := flag.String("op", "noop", "operation of every job")
	n := flag.Int("n", 100, "jobs to submit")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	key := strings.TrimSpace(os.Getenv("BRAID_KEY"))
	if *server == "" || *input == "" || key == "" || *n < 1 {
		fmt.Fprintln(os.Stderr, "gosubmit: want -server URL, -input BLOB, -n >= 1 and BRAID_KEY")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()
	c := client.New(*server, client.WithKey([]byte(key)))
	ids := make([]uint64, 0, *n)
	for range *n {
		st, err := c.Submit(ctx, api.JobRequest{Op: *op, Input: *input})
		if err != nil {
			fmt.Fprintf(os.Stderr, "gosubmit: %v\n", err)
			os.Exit(1)
		}
		ids = append(ids, st.Job)
	}
	submitted := time.Since(start)
	for _, id := range ids {
		st, err := c.Wait(ctx, id, nil)
		if err == nil && st.State != api.JobDone {
			err = fmt.Errorf("job %d %s: %s", id, st.State, st.Error)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "gosubmit: %v\n", err)
			os.Exit(1)
		}
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{"jobs": *n, "seconds": time.Since(start).Seconds(), "submit_seconds": submitted.Seconds()})
}
