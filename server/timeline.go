package server

import (
	"errors"
	"net/http"
	"slices"
	"sync"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/store"
)

// Bounds of the unit tries the server keeps for the dashboard's
// timeline: those of the most recent jobs, up to a number per job (a
// job's later tries are not kept).
const (
	timelineJobs  = 64
	timelineSpans = 1 << 16
)

// timeline keeps the tries of the units of the most recent jobs, in
// memory: what GET /v1/jobs/{id}/units answers.
type timeline struct {
	mu    sync.Mutex
	jobs  map[uint64][]api.UnitSpan
	order []uint64 // jobs from the oldest kept
}

// add keeps one try of a unit of job.
func (t *timeline) add(job uint64, sp api.UnitSpan) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.jobs == nil {
		t.jobs = map[uint64][]api.UnitSpan{}
	}
	spans, ok := t.jobs[job]
	if !ok {
		if len(t.order) == timelineJobs {
			delete(t.jobs, t.order[0])
			t.order = slices.Delete(t.order, 0, 1)
		}
		t.order = append(t.order, job)
	}
	if len(spans) < timelineSpans {
		t.jobs[job] = append(spans, sp)
	}
}

// get returns a copy of job's tries; false if none are kept.
func (t *timeline) get(job uint64) ([]api.UnitSpan, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	spans, ok := t.jobs[job]
	return slices.Clone(spans), ok
}

func (s *Server) getUnits(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	if _, err := s.db.Job(r.Context(), id); errors.Is(err, store.ErrNotFound) {
		return kindf(errNotFound, "no job %d on this server", id)
	} else if err != nil {
		return err
	}
	spans, kept := s.spans.get(id)
	if spans == nil {
		spans = []api.UnitSpan{}
	}
	// A job without tries yet (queued) is kept as far as it goes.
	if !kept && s.run(id) != nil {
		kept = true
	}
	return writeJSON(w, http.StatusOK, &api.UnitTimeline{Job: id, Kept: kept, Units: spans})
}
