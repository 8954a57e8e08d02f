package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/testwait"
)

// A job's Units.Computing counts the units computing on workers (from
// their heartbeats), not those sent ahead: on one worker of 1 thread, a
// job of 6 long units has 1 computing, while more are in flight, and the
// worker reports 1 running and the others queued.
func TestUnitsComputing(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(1, nil)
	c.waitWorkers(1)
	long := c.submit(api.JobRequest{Op: "sleep", Input: c.put(nil), Params: map[string]string{"ms": "120000"}, Units: 6})
	t.Cleanup(func() { c.c.Cancel(context.Background(), long.Job) })
	var st api.JobStatus
	var err error
	if !testwait.Until(20*time.Second, func() bool {
		st, err = c.c.Status(t.Context(), long.Job)
		return err == nil && st.Units.Computing == 1 && st.Units.Running > 1
	}) {
		ws, _ := c.c.Workers(t.Context())
		t.Fatalf("units %+v (%v), want 1 computing of more in flight; workers %+v", st.Units, err, ws)
	}
	var ws []api.WorkerInfo
	if !testwait.Until(20*time.Second, func() bool {
		ws, err = c.c.Workers(t.Context())
		return err == nil && len(ws) == 1 && ws[0].Running == 1 && ws[0].Queued >= 1 && ws[0].Queued <= st.Units.Running-1
	}) {
		t.Fatalf("workers %+v (%v), want 1 running and the other units in flight queued (%d in flight)", ws, err, st.Units.Running)
	}
}
