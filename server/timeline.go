package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/store"
)

// Bounds of the unit tries the server keeps for the dashboard's
// timeline: in memory, those of the most recent jobs; of each job, as
// many tries as a job may have units (its later tries are not kept).
// A job's tries are stored when it ends, so those of older jobs are read
// from the store: at most timelineSpans of them, which encode in a few
// megabytes (65,536 synthetic tries: 2.1 MB compressed).
const (
	timelineJobs  = 64
	timelineSpans = ops.MaxUnits
)

// timeline keeps the tries of the units of the most recent jobs, in
// memory: what GET /v1/jobs/{id}/units answers for them.
type timeline struct {
	mu    sync.Mutex
	jobs  map[uint64][]span
	order []uint64 // jobs from the oldest kept
}

// span is a try as it came back: the worker's timing is placed on the
// server's clock when the try is read (clk's estimate improves with
// every result of the session).
type span struct {
	api.UnitSpan
	clk    *workerClock // nil if the worker gave no timing
	timing api.Timing
}

// add keeps one try of a unit of job.
func (t *timeline) add(job uint64, sp span) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.jobs == nil {
		t.jobs = map[uint64][]span{}
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

// get returns job's tries with their times placed; false if none are
// kept.
func (t *timeline) get(job uint64) ([]api.UnitSpan, bool) {
	t.mu.Lock()
	spans, ok := t.jobs[job]
	spans = spans[:len(spans):len(spans)] // add appends beyond: a stable snapshot
	t.mu.Unlock()
	if !ok {
		return nil, false
	}
	out := make([]api.UnitSpan, len(spans))
	for i, sp := range spans {
		out[i] = sp.UnitSpan
		out[i].Thread = -1
		if sp.clk != nil {
			origin, errNanos := sp.clk.origin()
			out[i].Thread = int(sp.timing.Thread)
			out[i].Started = origin.Add(time.Duration(sp.timing.Started)).UTC()
			out[i].Ended = origin.Add(time.Duration(sp.timing.Ended)).UTC()
			out[i].PlaceErrNanos = errNanos
		}
	}
	return out, true
}

// workerClock places the instants a worker reports for the units of one
// session (nanoseconds since the session opened, on the worker's
// monotonic clock: see api.Timing) on the server's clock. The worker's
// clock is not trusted to agree with the server's: the session's origin
// is placed from causality alone. A unit the server sent at S was
// received by the worker after S, and a result the worker sent was read
// by the server at R after that, so the origin lies in
// [S - Received, R - Sent]; each result narrows the interval, and its
// middle is the estimate. All tries of the session move with the one
// origin, so their order and gaps are exactly as the worker measured.
type workerClock struct {
	base time.Time // the server's clock (monotonic) when the session began

	mu     sync.Mutex
	lo, hi int64 // the origin's bounds, in nanoseconds after base
	n      int
}

func newWorkerClock() *workerClock { return &workerClock{base: time.Now()} }

// observe narrows the origin with a unit sent at sent and answered at
// recv (both time.Now, with their monotonic readings). It reports false
// for a timing that contradicts itself, which is then not used.
func (c *workerClock) observe(sent, recv time.Time, t api.Timing) bool {
	if !t.Timed() || t.Started < t.Received || t.Ended < t.Started || t.Sent < t.Ended {
		return false
	}
	lo := int64(sent.Sub(c.base)) - t.Received
	hi := int64(recv.Sub(c.base)) - t.Sent
	if hi < lo {
		// The worker took longer than the round trip: its clock runs
		// faster than ours, or it lies.
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 || max(lo, c.lo) > min(hi, c.hi) {
		// The first result, or the clocks drifted apart over a long
		// session (rates differ by parts per million): start again.
		c.lo, c.hi = lo, hi
	} else {
		c.lo, c.hi = max(lo, c.lo), min(hi, c.hi)
	}
	c.n++
	return true
}

// origin returns the estimate of the session's origin on the server's
// clock and how far off it may be, in nanoseconds.
func (c *workerClock) origin() (time.Time, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(time.Duration(c.lo + (c.hi-c.lo)/2)), (c.hi - c.lo) / 2
}

// saveTimeline stores the tries of a job that ended, for
// GET /v1/jobs/{id}/units after it left memory or the server restarted.
func (s *Server) saveTimeline(job uint64) {
	spans, ok := s.spans.get(job)
	if !ok {
		return
	}
	data, err := encodeSpans(spans)
	if err != nil {
		s.log.Warn("encoding a job's timeline failed", "job", job, "err", err)
		return
	}
	s.persist(func(ctx context.Context) error { return s.db.SaveTimeline(ctx, job, data) })
}

// encodeSpans encodes a timeline for the store: gzip-compressed JSON.
func encodeSpans(spans []api.UnitSpan) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(spans); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeSpans reverses encodeSpans, reading at most what a timeline of
// timelineSpans tries may take.
func decodeSpans(data []byte) ([]api.UnitSpan, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var spans []api.UnitSpan
	if err := json.NewDecoder(io.LimitReader(zr, 4*store.MaxTimeline)).Decode(&spans); err != nil {
		return nil, err
	}
	if len(spans) > timelineSpans {
		return nil, fmt.Errorf("%d tries, more than the %d kept", len(spans), timelineSpans)
	}
	return spans, nil
}

func (s *Server) getUnits(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	if _, err := s.visibleJob(r.Context(), caller(r), id); err != nil {
		return err
	}
	spans, kept := s.spans.get(id)
	if !kept {
		data, err := s.db.Timeline(r.Context(), id)
		switch {
		case err == nil:
			if spans, err = decodeSpans(data); err != nil {
				return fmt.Errorf("the stored timeline of job %d is unreadable: %w", id, err)
			}
			kept = true
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
	}
	if spans == nil {
		spans = []api.UnitSpan{}
	}
	// A job without tries yet (queued) is kept as far as it goes.
	if !kept && s.lc.Job(id) != nil {
		kept = true
	}
	return writeJSON(w, http.StatusOK, &api.UnitTimeline{Job: id, Kept: kept, Units: spans})
}
