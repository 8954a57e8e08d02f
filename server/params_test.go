package server_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
)

// paramSum is a module that writes the length and a checksum of its
// parameter P and the length of its input: what a unit saw of a long
// parameter. SPIN makes it count to SPIN first.
const paramSum = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
	const char *p = getenv("P");
	unsigned int sum = 0;
	size_t n = 0;
	if (p) { n = strlen(p); for (size_t i = 0; i < n; i++) sum = sum * 31 + (unsigned char)p[i]; }
	const char *s = getenv("SPIN");
	if (s) { volatile long x = 0; long k = atol(s); for (long i = 0; i < k; i++) x += i; }
	long in = 0;
	while (getchar() != EOF) in++;
	printf("%zu %u %ld\n", n, sum, in);
	return 0;
}
`

// paramJob returns a 256 KiB parameter, the input of units units of
// 64 bytes, and the output each unit must give.
func paramJob(seed byte, units int) (param string, input []byte, want string) {
	var b strings.Builder
	for i := range 256 << 10 {
		b.WriteByte('a' + byte(i*7+int(seed))%26)
	}
	param = b.String()
	var sum uint32
	for i := range len(param) {
		sum = sum*31 + uint32(param[i])
	}
	line := fmt.Sprintf("%d %d 64\n", len(param), sum)
	return param, bytes.Repeat([]byte(strings.Repeat("x", 63)+"\n"), units), strings.Repeat(line, units)
}

// sentToWorkers is what the server sent on the data plane to its live
// workers, all paths together.
func (c *cluster) sentToWorkers() int64 {
	c.t.Helper()
	ws, err := c.c.Workers(c.t.Context())
	if err != nil {
		c.t.Fatal(err)
	}
	var n int64
	for _, w := range ws {
		for _, p := range w.Paths {
			n += p.BytesSent
		}
	}
	return n
}

// TestLongParamSentOncePerStream: a job of 200 units with a 256 KiB
// parameter sends that parameter about once per stream of the worker,
// not once per unit (51 MiB), and every unit sees it whole.
func TestLongParamSentOncePerStream(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.waitWorkers(1)
	c.addOp("psum", paramSum, client.OpOptions{})
	param, input, want := paramJob(1, 200)
	in := c.put(input)
	before := c.sentToWorkers()
	st := c.run(api.JobRequest{Op: "psum", Input: in, Split: "bytes:64", Merge: "concat", Params: map[string]string{"P": param}})
	if st.State != api.JobDone || st.Units.Total != 200 {
		t.Fatalf("job %s %q, %d units", st.State, st.Error, st.Units.Total)
	}
	if got := string(c.get(st.Output)); got != want {
		t.Fatalf("output: %d bytes, want %d: a unit saw another parameter (first line %q)", len(got), len(want), strings.SplitN(got, "\n", 2)[0])
	}
	sent := c.sentToWorkers() - before
	// Two streams, each sent the value once; the rest is 200 small units.
	if limit := int64(3*len(param) + 200*1024); sent > limit {
		t.Errorf("the job sent %d bytes to the worker (limit %d): its %d-byte parameter went %.1f times", sent, limit, len(param), float64(sent)/float64(len(param)))
	}
	t.Logf("200 units, %d-byte parameter: %d bytes sent", len(param), sent)
}

// TestLongParamWorkerRestart: a worker that stops mid-job and a new one
// that takes the rest get the parameter on their own streams, and every
// unit sees it.
func TestLongParamWorkerRestart(t *testing.T) {
	c := newCluster(t, nil)
	w := c.addWorker(1, nil)
	c.waitWorkers(1)
	c.addOp("psum", paramSum, client.OpOptions{})
	param, input, want := paramJob(2, 100)
	job := c.submit(api.JobRequest{Op: "psum", Input: c.put(input), Split: "bytes:64", Merge: "concat",
		Params: map[string]string{"P": param, "SPIN": "200000"}})
	if st := c.waitDone(job.Job, 10); st.State.Final() {
		t.Fatalf("job ended before the worker stopped: %s", st.State)
	}
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	c.waitWorkers(0)
	c.addWorker(1, nil)
	st := c.wait(job.Job)
	if st.State != api.JobDone {
		t.Fatalf("job %s %q", st.State, st.Error)
	}
	if got := string(c.get(st.Output)); got != want {
		t.Fatalf("output: %d bytes, want %d (first line %q)", len(got), len(want), strings.SplitN(got, "\n", 2)[0])
	}
}
