package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/worker"
)

// try names one try of a unit.
type try struct {
	unit    uint64
	attempt uint32
}

// ranOn reads a worker's JSON debug log and returns, by try of a unit
// of job, the thread the worker says ran it.
func ranOn(t *testing.T, log string, job uint64) map[try]int {
	t.Helper()
	out := map[try]int{}
	sc := bufio.NewScanner(bytes.NewReader([]byte(log)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Msg     string
			Job     uint64
			Unit    uint64
			Attempt uint32
			Thread  int
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("worker log line %q: %v", sc.Bytes(), err)
		}
		if line.Msg == "unit run" && line.Job == job {
			out[try{line.Unit, line.Attempt}] = line.Thread
		}
	}
	return out
}

// loggedWorker adds a worker lending threads whose debug log goes to the
// returned buffer.
func (c *cluster) loggedWorker(threads int) (*testWorker, *lockedBuffer) {
	c.t.Helper()
	buf := &lockedBuffer{}
	tw := c.addWorker(threads, func(cfg *worker.Config) {
		cfg.Logger = slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	return tw, buf
}

// checkTimeline checks the timeline of a job run by the workers whose
// logs are given (by worker ID, with their threads): every unit has a
// try, each timed, on the thread whose log says it ran it, within the time
// the server had it out and as long as it computed, and the tries of one
// thread never overlap. It returns the tries by worker and thread.
func checkTimeline(t *testing.T, tl api.UnitTimeline, st api.JobStatus, logs map[string]*lockedBuffer, threads map[string]int) map[string][][]api.UnitSpan {
	t.Helper()
	if !tl.Kept || tl.Job != st.Job {
		t.Fatalf("timeline of job %d: job %d, kept %v", st.Job, tl.Job, tl.Kept)
	}
	units := map[uint64]bool{}
	for _, u := range tl.Units {
		units[u.Unit] = true
	}
	if len(units) != st.Units.Total {
		t.Fatalf("tries of %d units for %d units", len(units), st.Units.Total)
	}
	ran := map[string]map[try]int{}
	for id, log := range logs {
		ran[id] = ranOn(t, log.String(), st.Job)
	}
	lanes := map[string][][]api.UnitSpan{}
	for _, u := range tl.Units {
		n, ok := threads[u.Worker]
		if !ok {
			t.Fatalf("unit %d on unknown worker %q", u.Unit, u.Worker)
		}
		if u.Thread < 0 || u.Thread >= n || u.Started.IsZero() || u.Ended.IsZero() {
			t.Fatalf("unit %d: thread %d of %d, started %v, ended %v: untimed", u.Unit, u.Thread, n, u.Started, u.Ended)
		}
		if want, ok := ran[u.Worker][try{u.Unit, u.Attempt}]; !ok || want != u.Thread {
			t.Errorf("unit %d try %d is on thread %d of %s; the worker's log says thread %d (logged: %v)", u.Unit, u.Attempt, u.Thread, u.Worker, want, ok)
		}
		// The worker ran it while the server had it out, give or take
		// the placement's error; and for as long as it computed.
		slack := time.Duration(u.PlaceErrNanos) + time.Microsecond
		if u.Started.Before(u.Sent.Add(-slack)) || u.Ended.After(u.Received.Add(slack)) {
			t.Errorf("unit %d ran %v to %v, outside the %v to %v the server had it out (±%v)", u.Unit, u.Started, u.Ended, u.Sent, u.Received, slack)
		}
		if d := u.Ended.Sub(u.Started) - time.Duration(u.ComputeNanos); d < 0 || d > time.Millisecond {
			t.Errorf("unit %d: bar of %v for %v of computation", u.Unit, u.Ended.Sub(u.Started), time.Duration(u.ComputeNanos))
		}
		if lanes[u.Worker] == nil {
			lanes[u.Worker] = make([][]api.UnitSpan, n)
		}
		lanes[u.Worker][u.Thread] = append(lanes[u.Worker][u.Thread], u)
	}
	for w, ls := range lanes {
		for i, l := range ls {
			slices.SortFunc(l, func(a, b api.UnitSpan) int { return a.Started.Compare(b.Started) })
			for k := 1; k < len(l); k++ {
				if l[k].Started.Before(l[k-1].Ended) {
					t.Errorf("worker %s thread %d: unit %d (%v to %v) overlaps unit %d (%v to %v)", w, i,
						l[k].Unit, l[k].Started, l[k].Ended, l[k-1].Unit, l[k-1].Started, l[k-1].Ended)
				}
			}
		}
	}
	return lanes
}

// settledUnits returns the timeline of a finished job once no more tries
// come back: copies of its units that were still out when it finished
// (the scheduler runs the last units twice) come back afterwards.
func (c *cluster) settledUnits(job uint64) api.UnitTimeline {
	c.t.Helper()
	var tl api.UnitTimeline
	same := 0
	for deadline := time.Now().Add(10 * time.Second); same < 3; {
		if time.Now().After(deadline) {
			c.t.Fatalf("the tries of job %d kept coming for 10s", job)
		}
		time.Sleep(100 * time.Millisecond)
		now, err := c.c.Units(context.Background(), job)
		if err != nil {
			c.t.Fatal(err)
		}
		if len(now.Units) == len(tl.Units) {
			same++
		} else {
			same = 0
		}
		tl = now
	}
	return tl
}

// workerID returns the ID the server gave a test worker.
func workerID(tw *testWorker) string {
	for _, v := range tw.w.IDs() {
		return v
	}
	return ""
}

// TestUnitTimeline runs units that each sleep on two workers, of two
// threads and one, and checks GET /v1/jobs/{id}/units against what the
// workers logged: each try is on the thread that ran it, the tries of
// one thread do not overlap, and the two threads of a worker ran at the
// same time.
func TestUnitTimeline(t *testing.T) {
	c := newCluster(t, nil)
	w1, log1 := c.loggedWorker(2)
	w2, log2 := c.loggedWorker(1)
	c.waitWorkers(2)
	st := c.run(api.JobRequest{Op: "sleep", Input: c.put(nil), Units: 12, Params: map[string]string{"ms": "15"}})
	if st.State != api.JobDone {
		t.Fatalf("job is %s: %s", st.State, st.Error)
	}
	tl := c.settledUnits(st.Job)
	id1, id2 := workerID(w1), workerID(w2)
	lanes := checkTimeline(t, tl, st, map[string]*lockedBuffer{id1: log1, id2: log2}, map[string]int{id1: 2, id2: 1})
	// Both threads of the first worker ran units, some at the same time.
	l := lanes[id1]
	if len(l) != 2 || len(l[0]) == 0 || len(l[1]) == 0 {
		t.Fatalf("worker %s's threads ran %v units", id1, []int{len(l[0]), len(l[1])})
	}
	overlap := false
	for _, a := range l[0] {
		for _, b := range l[1] {
			overlap = overlap || (a.Started.Before(b.Ended) && b.Started.Before(a.Ended))
		}
	}
	if !overlap {
		t.Errorf("the two threads of worker %s never ran at the same time", id1)
	}
}

// TestUnitTimelinePersisted restarts the server on the same data
// directory and reads the timeline of a job that finished before, as it
// was: the server stored it when the job ended.
func TestUnitTimelinePersisted(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.waitWorkers(1)
	st := c.run(api.JobRequest{Op: "sleep", Input: c.put(nil), Units: 6, Params: map[string]string{"ms": "5"}})
	if st.State != api.JobDone {
		t.Fatalf("job is %s: %s", st.State, st.Error)
	}
	before, err := c.c.Units(t.Context(), st.Job)
	if err != nil {
		t.Fatal(err)
	}
	c.stopServer()
	c.startServer()
	after, err := c.c.Units(t.Context(), st.Job)
	if err != nil {
		t.Fatal(err)
	}
	if !after.Kept || len(after.Units) < st.Units.Total {
		t.Fatalf("after a restart: kept %v, %d tries for %d units", after.Kept, len(after.Units), st.Units.Total)
	}
	a, _ := json.Marshal(before)
	b, _ := json.Marshal(after)
	if !bytes.Equal(a, b) {
		t.Errorf("the timeline changed over the restart:\nbefore %s\nafter  %s", a, b)
	}
	for _, u := range after.Units {
		if u.Thread < 0 || u.Started.IsZero() {
			t.Errorf("unit %d lost its timing over the restart: %+v", u.Unit, u)
		}
	}
	if _, err := c.c.Units(t.Context(), st.Job+1000); err == nil {
		t.Error("the units of a job that does not exist")
	} else if want := fmt.Sprintf("no job %d", st.Job+1000); !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Errorf("units of a job that does not exist: %v, want it to say %q", err, want)
	}
}
