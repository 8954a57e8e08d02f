package server_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/store/storetest"
)

// TestServerOverPostgres runs a server whose metadata store is
// PostgreSQL (BRAID_TEST_POSTGRES): a job stopped half done by a restart
// finishes after it with the right output, a second restart still shows
// it done, and the database holds every unit's result once.
func TestServerOverPostgres(t *testing.T) {
	url := storetest.Postgres(t).Fresh(t)
	c := newCluster(t, func(cfg *server.Config) { cfg.DB = url })
	c.addWorker(2, slowBlur(15*time.Millisecond))
	c.waitWorkers(1)
	img := ops.SamplePNG(160, 120)
	want := reference(t, ops.Blur(), img, nil)
	st := c.submit(api.JobRequest{Op: "blur", Input: c.put(img), Tile: api.Tile{W: 40, H: 40}})
	mid := c.waitDone(st.Job, 3)
	c.stopServer()
	if mid.State.Final() {
		t.Fatalf("job finished before the restart: %+v", mid)
	}
	c.startServer()
	st = c.wait(st.Job)
	if st.State != api.JobDone || st.Units.Done != 12 {
		t.Fatalf("job %s, %+v: %s", st.State, st.Units, st.Error)
	}
	if !bytes.Equal(c.get(st.Output), want) {
		t.Error("output differs from the single-unit output")
	}
	c.stopServer()
	c.startServer()
	again, err := c.c.Status(t.Context(), st.Job)
	if err != nil || again.State != api.JobDone || again.Output != st.Output {
		t.Errorf("after a second restart: %+v, %v; want done with output %s", again, err, st.Output)
	}
	next := c.submit(api.JobRequest{Op: "blur", Input: c.put(img), Tile: api.Tile{W: 80, H: 120}})
	if next.Job != st.Job+1 {
		t.Errorf("a job after the restarts got ID %d, want %d", next.Job, st.Job+1)
	}
	c.wait(next.Job)
	c.stopServer()

	db, err := store.OpenMeta(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	j, err := db.Job(t.Context(), st.Job)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != store.JobDone || j.Done != j.Total || j.Running != 0 || j.Output != st.Output {
		t.Errorf("stored job: %s, %d of %d done, %d running, output %s", j.State, j.Done, j.Total, j.Running, j.Output)
	}
	units, err := db.Units(t.Context(), st.Job)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		if u.State != store.UnitDone || u.Result == "" {
			t.Errorf("unit %d: %s, result %q", u.ID, u.State, u.Result)
		}
	}
}
