package server_test

import (
	"bytes"
	"context"
	"fmt"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/transport"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/worker"
)

// reference runs a job in this process, as one unit.
func reference(t testing.TB, op ops.Op, in []byte, params map[string]string) []byte {
	t.Helper()
	out, err := ops.Execute(t.Context(), op, bytes.NewReader(in), int64(len(in)), params, ops.Hint{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBlurTwoWorkers runs a tiled blur over a server and two workers and
// compares the output with the single-unit output, for every policy.
func TestBlurTwoWorkers(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.addWorker(1, nil)
	c.waitWorkers(2)
	img := ops.SamplePNG(300, 200)
	want := reference(t, ops.Blur(), img, map[string]string{"radius": "4"})
	in := c.put(img)
	for _, policy := range []string{api.PolicyEqual, api.PolicyProportional, api.PolicyDynamic} {
		t.Run(policy, func(t *testing.T) {
			st := c.run(api.JobRequest{Op: "blur", Input: in, Params: map[string]string{"radius": "4"},
				Tile: api.Tile{W: 64, H: 48}, Policy: policy})
			if st.State != api.JobDone {
				t.Fatalf("job %d is %s: %s", st.Job, st.State, st.Error)
			}
			if st.Units.Total != 25 || st.Units.Done != 25 || st.Units.Running != 0 {
				t.Errorf("units %+v, want 25 done", st.Units)
			}
			if st.Policy != policy {
				t.Errorf("policy %q, want %q", st.Policy, policy)
			}
			if got := c.get(st.Output); !bytes.Equal(got, want) {
				t.Errorf("output differs from the single-unit output (%d vs %d bytes)", len(got), len(want))
			}
		})
	}
	// The worker list shows each live worker's data-plane paths, and their
	// byte counts grow by the tiles out and the results back of a job of
	// 300x200 RGBA pixels. The counts are the live sessions': a worker
	// that re-registers (its heartbeats late on a loaded machine) gets a
	// new session, counted from zero, so a job during which a session was
	// replaced is run again, three times at most. Checked by hand: with
	// the byte counts left out of the server's worker list, the test
	// fails.
	const px = 300 * 200 * 4
	for attempt := 1; ; attempt++ {
		var before map[string]sessionBytes
		testwait.For(t, "both workers listed with every path up", 10*time.Second, func() bool {
			before = liveSessions(t, c)
			up := 0
			for _, b := range before {
				if b.up {
					up++
				}
			}
			return up == 2
		})
		st := c.run(api.JobRequest{Op: "blur", Input: in, Params: map[string]string{"radius": "4"},
			Tile: api.Tile{W: 64, H: 48}, Policy: api.PolicyEqual})
		if st.State != api.JobDone {
			t.Fatalf("job %d is %s: %s", st.Job, st.State, st.Error)
		}
		after := liveSessions(t, c)
		var sent, recv int64
		same := true
		for id, b := range before {
			a, ok := after[id]
			same = same && ok && a.sess == b.sess
			sent += a.sent - b.sent
			recv += a.recv - b.recv
		}
		if same {
			if sent < px || recv < px {
				t.Errorf("paths carried %d bytes out and %d back during a job, want at least %d each way", sent, recv, px)
			}
			break
		}
		if attempt == 3 {
			t.Fatalf("a worker's data-plane session was replaced during each of %d jobs", attempt)
		}
		t.Logf("a worker's data-plane session was replaced during the job (it re-registered); again")
	}
}

// sessionBytes is what the worker list says of one worker's data-plane
// session: bytes sent and received over its paths, and whether every path
// is up, to the worker's address.
type sessionBytes struct {
	sess       *transport.Session
	sent, recv int64
	up         bool
}

// liveSessions returns the live workers' sessions by worker ID, leaving
// out those replaced while the list was read.
func liveSessions(t *testing.T, c *cluster) map[string]sessionBytes {
	t.Helper()
	ids := map[string]*transport.Session{}
	if ws, err := c.c.Workers(t.Context()); err == nil {
		for _, w := range ws {
			ids[w.ID] = server.PeerSession(c.srv, w.ID)
		}
	}
	ws, err := c.c.Workers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]sessionBytes{}
	for _, w := range ws {
		sess := server.PeerSession(c.srv, w.ID)
		if !w.Alive || sess == nil || sess != ids[w.ID] {
			continue
		}
		b := sessionBytes{sess: sess, up: len(w.Paths) > 0 && len(w.Paths) == len(w.Addresses)}
		for _, p := range w.Paths {
			b.up = b.up && p.State == "up" && p.Remote == w.Addresses[0] && p.Local != ""
			b.sent += p.BytesSent
			b.recv += p.BytesReceived
		}
		out[w.ID] = b
	}
	return out
}

// TestChecksumDAG runs the checksum operation, whose reduce unit depends
// on every chunk unit.
func TestChecksumDAG(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.addWorker(2, nil)
	c.waitWorkers(2)
	data := bytes.Repeat([]byte("braid checksum DAG "), 50_000) // ~950 KB
	st := c.run(api.JobRequest{Op: "checksum", Input: c.put(data), Params: map[string]string{"block": "4096"}, Units: 7})
	if st.State != api.JobDone {
		t.Fatalf("job is %s: %s", st.State, st.Error)
	}
	if st.Units.Total != 8 {
		t.Errorf("%d units, want 7 chunks and a reduce", st.Units.Total)
	}
	if got, want := string(c.get(st.Output)), ops.ChecksumOf(data, 4096); got != want {
		t.Errorf("checksum %q, want %q", got, want)
	}
}

// TestRepeatNoop: every copy of a repeated job counts once and the output
// is the input.
func TestRepeatNoop(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.waitWorkers(1)
	data := ops.SampleGIF()
	st := c.run(api.JobRequest{Op: "noop", Input: c.put(data), Repeat: 300, InFlight: 4})
	if st.State != api.JobDone || st.Units.Done != 300 {
		t.Fatalf("job is %s with %+v: %s", st.State, st.Units, st.Error)
	}
	if !bytes.Equal(c.get(st.Output), data) {
		t.Error("noop output differs from its input")
	}
	ws, err := c.c.Workers(t.Context())
	if err != nil || len(ws) != 1 || ws[0].Done != 300 {
		t.Errorf("workers %+v, %v: want one credited with 300 units", ws, err)
	}
}

// TestWorkerComputeFraction checks the compute time and lent thread time
// the server reports for a worker: every unit's compute counts, and the
// compute cannot exceed the thread time lent while units were out.
func TestWorkerComputeFraction(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.waitWorkers(1)
	ws, err := c.c.Workers(t.Context())
	if err != nil || len(ws) != 1 {
		t.Fatalf("workers %+v, %v: want one", ws, err)
	}
	if ws[0].ComputeNanos != 0 || ws[0].LentNanos != 0 || ws[0].Tries != 0 {
		t.Fatalf("an idle worker shows compute %d ns of %d ns lent in %d tries, want 0, 0 and 0", ws[0].ComputeNanos, ws[0].LentNanos, ws[0].Tries)
	}
	const units, ms = 20, 5
	st := c.run(api.JobRequest{Op: "sleep", Input: c.put([]byte("x")), Units: units, Params: map[string]string{"ms": "5"}})
	if st.State != api.JobDone || st.Units.Done != units {
		t.Fatalf("job is %s with %+v: %s", st.State, st.Units, st.Error)
	}
	if ws, err = c.c.Workers(t.Context()); err != nil || len(ws) != 1 {
		t.Fatalf("workers %+v, %v: want one", ws, err)
	}
	w := ws[0]
	if min := int64(units * ms * time.Millisecond); w.ComputeNanos < min {
		t.Errorf("compute %v, want at least %v (%d units of %d ms)", time.Duration(w.ComputeNanos), time.Duration(min), units, ms)
	}
	if w.ComputeNanos > w.LentNanos {
		t.Errorf("compute %v exceeds the lent thread time %v", time.Duration(w.ComputeNanos), time.Duration(w.LentNanos))
	}
	if f := w.ComputeFraction(); f <= 0 || f > 1 {
		t.Errorf("compute fraction %.3f, want within (0, 1]", f)
	}
	// Every unit was computed here, and any backup copy too.
	if w.Tries < units || w.Tries < w.Done {
		t.Errorf("%d tries computed, want at least the %d units (%d credited)", w.Tries, units, w.Done)
	}
}

// flipOnce is noop, but the run numbered bad (from 1) returns its input
// with the first byte flipped: a worker that computed one wrong result.
type flipOnce struct {
	ops.Op
	bad   int64
	calls atomic.Int64
}

func (f *flipOnce) Name() string { return "flip-once" }

func (f *flipOnce) Run(ctx context.Context, params map[string]string, inputs [][]byte) ([]byte, error) {
	out, err := f.Op.Run(ctx, params, inputs)
	if err == nil && f.calls.Add(1) == f.bad {
		out = bytes.Clone(out)
		out[0] ^= 0xff
	}
	return out, err
}

// TestRepeatCopyDiffers checks that a repeated job whose copies do not
// all give the same bytes fails naming the copy, and that one whose copies
// agree (compared with the first copy's kept result, not hashed again)
// completes with the right output.
func TestRepeatCopyDiffers(t *testing.T) {
	for _, bad := range []int64{0, 1, 7, 40} {
		t.Run(fmt.Sprintf("bad=%d", bad), func(t *testing.T) {
			op := &flipOnce{Op: ops.Noop(), bad: bad}
			reg := ops.NewRegistry(op)
			c := newCluster(t, func(cfg *server.Config) { cfg.Ops = reg })
			c.addWorker(2, func(cfg *worker.Config) { cfg.Ops = reg })
			c.waitWorkers(1)
			data := ops.SampleGIF()
			st := c.run(api.JobRequest{Op: "flip-once", Input: c.put(data), Repeat: 40, Policy: api.PolicyEqual})
			if bad == 0 {
				if st.State != api.JobDone || !bytes.Equal(c.get(st.Output), data) {
					t.Fatalf("job is %s (%s), want done with the input as output", st.State, st.Error)
				}
				return
			}
			if st.State != api.JobFailed || !strings.Contains(st.Error, "differs from copy 1") {
				t.Fatalf("job is %s with error %q, want failed: a copy differs from copy 1", st.State, st.Error)
			}
		})
	}
}
