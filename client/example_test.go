package client_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
)

// A client holding the cluster key uploads an image, blurs it in
// 256 x 256 tiles on the cluster's workers, waits for the job and saves
// the result. (Compiled by go test, not run: it needs a server.)
func Example() {
	ctx := context.Background()
	c := client.New("https://10.0.0.1:7400", client.WithKey([]byte(os.Getenv("BRAID_KEY"))))
	in, err := os.Open("photo.png")
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close()
	id, err := c.Put(ctx, in)
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Submit(ctx, api.JobRequest{Op: "blur", Input: id, Tile: api.Tile{W: 256, H: 256}})
	if err != nil {
		log.Fatal(err)
	}
	job, err = c.Wait(ctx, job.Job, func(st api.JobStatus) {
		fmt.Fprintf(os.Stderr, "%d of %d units done\n", st.Units.Done, st.Units.Total)
	})
	if err != nil {
		log.Fatal(err)
	}
	if job.State != api.JobDone {
		log.Fatalf("job %d %s: %s", job.Job, job.State, job.Error)
	}
	out, err := os.Create("photo-blurred.png")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Get(ctx, job.Output, out); err != nil {
		log.Fatal(err)
	}
	if err := out.Close(); err != nil {
		log.Fatal(err)
	}
}

// A client without the cluster key uses a token with the client role
// (braid token create --role client); its join token also pins the
// server's certificate.
func ExampleWithToken() {
	c := client.New("https://10.0.0.1:7400", client.WithToken(os.Getenv("BRAID_TOKEN")))
	workers, err := c.Workers(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	for _, w := range workers {
		fmt.Println(w.ID, w.Threads)
	}
}
