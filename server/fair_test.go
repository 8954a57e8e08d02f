package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/internal/wasmtest"
)

// TestHostileTenantYields is the stress test of a tenant that holds
// every thread: mallory's modules spin until their two-minute unit
// timeout, in one-unit jobs (which dynamic scheduling gives backup
// copies on idle threads) and a many-unit job, on 2 workers x 2 threads.
// alice's job of two 1-second units must finish within twice the time
// it takes on the idle cluster: the server takes threads back from
// mallory (sched.Preempt) as soon as alice's units are ready. Without
// that, alice's job waits for mallory's units to time out, and c.wait
// gives up after 20s. mallory's units taken back run again later with
// no retry counted.
func TestHostileTenantYields(t *testing.T) {
	wasmtest.Require(t)
	c := newCluster(t, nil)
	w1, w2 := c.addWorker(2, nil), c.addWorker(2, nil)
	c.waitWorkers(2)
	alice := newTenant(t, c, api.RoleClient, "alice", "")
	mallory := newTenant(t, c, api.RoleClient, "mallory", "")
	mallory.addOp("spin", wasmtest.Loop, client.OpOptions{})

	good := api.JobRequest{Op: "sleep", Input: alice.put(nil), Units: 2, Params: map[string]string{"ms": "1000"}}
	timed := func() time.Duration {
		t.Helper()
		start := time.Now()
		st := alice.run(good)
		if st.State != api.JobDone {
			t.Fatalf("alice's job %s: %s", st.State, st.Error)
		}
		return time.Since(start)
	}
	baseline := timed()

	in := mallory.put([]byte("x"))
	spin := api.JobRequest{Op: "spin", Input: in, UnitTimeout: "2m"}
	var flood []uint64
	for range 2 {
		flood = append(flood, mallory.submit(spin).Job)
	}
	many := spin
	many.Input, many.Split = mallory.put([]byte("1\n2\n3\n4\n5\n6\n7\n8\n")), "lines:1"
	flood = append(flood, mallory.submit(many).Job)
	testwait.For(t, "mallory's units to run on every thread", 30*time.Second, func() bool {
		return w1.w.Stats().Running == 2 && w2.w.Stats().Running == 2
	})

	beside := timed()
	t.Logf("alice's job: %v alone, %v beside mallory's flood", baseline, beside)
	if beside > 2*baseline {
		t.Errorf("alice's job took %v beside mallory's flood, more than twice its %v alone", beside, baseline)
	}

	// mallory's units taken back were not tries that failed or were lost.
	for _, id := range flood {
		st, err := mallory.c.Status(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != api.JobRunning && st.State != api.JobQueued || st.Units.Retries != 0 {
			t.Errorf("mallory's job %d: %s, %d retries (%q), want running with none", id, st.State, st.Units.Retries, st.Error)
		}
		if _, err := mallory.c.Cancel(context.Background(), id); err != nil {
			t.Error(err)
		}
	}
}
