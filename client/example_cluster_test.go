package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/worker"
)

// startCluster starts a server and a worker lending two threads on
// loopback, in this process, and returns the server's URL, the cluster
// key and a function that stops both. In real use they are braid server
// and braid worker on their hosts.
func startCluster() (url string, key []byte, stop func()) {
	key = []byte("example-cluster-key-0123456789abcdef")
	dir, err := os.MkdirTemp("", "braid-example-")
	if err != nil {
		log.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(server.Config{Listen: "127.0.0.1:0", Data: dir, Key: key, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stopServer := context.WithCancel(context.Background())
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Run(ctx) }()
	w, err := worker.New(worker.Config{Servers: []string{srv.URL()}, Key: key, Threads: 2, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	wkDone := make(chan error, 1)
	go func() { wkDone <- w.Run(wctx) }()
	c := client.New(srv.URL(), client.WithKey(key))
	if !testwait.Until(10*time.Second, func() bool {
		h, err := c.Health(ctx)
		return err == nil && h.Workers == 1
	}) {
		log.Fatal("the worker did not register within 10s")
	}
	return srv.URL(), key, func() {
		// The worker first: it deregisters while the server still
		// answers.
		stopWorker()
		<-wkDone
		stopServer()
		<-srvDone
		os.RemoveAll(dir)
	}
}

// Example_cluster uploads data, runs a job on it and downloads its
// output, against a server and a worker started in this process, so go
// test runs it and checks what it prints.
func Example_cluster() {
	url, key, stop := startCluster()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The cluster key both authenticates the client and checks the
	// server's certificate; a token (client.WithToken) would do too.
	c := client.New(url, client.WithKey(key))
	input := bytes.Repeat([]byte("braid "), 10_000)
	id, err := c.Put(ctx, bytes.NewReader(input))
	if err != nil {
		log.Fatal(err)
	}
	// Split into 4 chunks whose checksums a fifth unit reduces.
	job, err := c.Submit(ctx, api.JobRequest{Op: "checksum", Input: id, Units: 4, Params: map[string]string{"block": "4096"}})
	if err != nil {
		log.Fatal(err)
	}
	job, err = c.Wait(ctx, job.Job, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("job", job.Job, job.State, "with", job.Units.Done, "of", job.Units.Total, "units done")
	var out bytes.Buffer
	if _, err := c.Get(ctx, job.Output, &out); err != nil {
		log.Fatal(err)
	}
	fmt.Println("output:", out.Len() > 0)
	// Output:
	// job 1 done with 5 of 5 units done
	// output: true
}

// ExampleClient_Units reads which worker thread ran each unit of a job,
// and for how long: what the dashboard's timeline shows.
func ExampleClient_Units() {
	url, key, stop := startCluster()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c := client.New(url, client.WithKey(key))
	id, err := c.Put(ctx, bytes.NewReader(bytes.Repeat([]byte("units "), 10_000)))
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Submit(ctx, api.JobRequest{Op: "checksum", Input: id, Units: 3, Params: map[string]string{"block": "4096"}})
	if err != nil {
		log.Fatal(err)
	}
	if job, err = c.Wait(ctx, job.Job, nil); err != nil {
		log.Fatal(err)
	}
	tl, err := c.Units(ctx, job.Job)
	if err != nil {
		log.Fatal(err)
	}
	workers := map[string]bool{}
	for _, u := range tl.Units {
		workers[u.Worker] = true
		if u.Received.Before(u.Sent) || u.ComputeNanos < 0 {
			log.Fatalf("unit %d came back before it was sent", u.Unit)
		}
	}
	// checksum is a two-level job: the 3 chunk units asked for, and one
	// that combines their sums.
	fmt.Println(len(tl.Units), "tries kept for", job.Units.Total, "units, on", len(workers), "worker")
	// Output:
	// 4 tries kept for 4 units, on 1 worker
}
