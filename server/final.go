package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/braid-hpc/braid/store"
)

// A job's final state must reach the job store, or the job would show as
// running until the server restarts. When the write fails (the disk is
// full, say), the job's end is kept here, shown in its status, and
// written again with backoff until it succeeds or the server stops; a
// job whose end was never written resumes at the next start.

// unsaved is a job's end that the store has not taken yet.
type unsaved struct {
	state  store.JobState
	msg    string
	output string
	at     time.Time
	err    error // of the last write
	save   func(ctx context.Context) error
}

// Backoff of the writes of unsaved ends.
const (
	saveFirst = 100 * time.Millisecond
	saveMax   = 5 * time.Second
)

// saveEnd writes job id's end with save; if that fails, the end is kept
// as unsaved and written again in the background.
func (s *Server) saveEnd(id uint64, u unsaved) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := u.save(ctx)
	cancel()
	if err == nil || errors.Is(err, store.ErrConflict) {
		return
	}
	u.err, u.at = err, time.Now().UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unsaved == nil {
		s.unsaved = map[uint64]unsaved{}
	}
	s.unsaved[id] = u
	s.log.Error("recording the end of a job failed; it shows as ended and the server keeps trying",
		"job", id, "state", u.state, "err", err)
	if s.saving || s.closing || !s.started {
		return // the loop runs, or the job resumes at the next start
	}
	s.saving = true
	s.bg.Go(s.saveLoop)
}

// saveLoop writes the unsaved ends until none is left or the server
// stops.
func (s *Server) saveLoop() {
	wait := saveFirst
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.stop:
			s.mu.Lock()
			s.saving = false
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		todo := make(map[uint64]unsaved, len(s.unsaved))
		for id, u := range s.unsaved {
			todo[id] = u
		}
		s.mu.Unlock()
		for id, u := range todo {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := u.save(ctx)
			cancel()
			s.mu.Lock()
			if err == nil || errors.Is(err, store.ErrConflict) {
				delete(s.unsaved, id)
				s.log.Info("recorded the end of a job at last", "job", id, "state", u.state)
			} else if cur, ok := s.unsaved[id]; ok {
				cur.err = err
				s.unsaved[id] = cur
			}
			s.mu.Unlock()
		}
		s.mu.Lock()
		if len(s.unsaved) == 0 {
			s.saving = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		wait = min(2*wait, saveMax)
		t.Reset(wait)
	}
}

// unsavedIn returns the jobs whose unsaved end is state.
func (s *Server) unsavedIn(state store.JobState) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []uint64
	for id, u := range s.unsaved {
		if u.state == state {
			ids = append(ids, id)
		}
	}
	return ids
}

// overlay gives the status of a job whose end is unsaved that end.
func (s *Server) overlay(j *store.Job) (note string) {
	if j.State.Final() {
		return ""
	}
	s.mu.Lock()
	u, ok := s.unsaved[j.ID]
	s.mu.Unlock()
	if !ok {
		return ""
	}
	j.State, j.Error, j.Output, j.Finished, j.Running = u.state, u.msg, u.output, u.at, 0
	return fmt.Sprintf("not yet recorded in the job database (%v); the server keeps trying", u.err)
}

// resultsLost fails the jobs whose results the recorder could not
// record: the store refused them for long (a full disk), so the jobs
// cannot be finished from what the store holds.
func (s *Server) resultsLost(rs []store.UnitResult, err error) {
	if s.isClosing() {
		return // the results are lost with the process anyway; units run again at the next start
	}
	units := map[uint64][]uint64{}
	var order []uint64
	for _, r := range rs {
		if _, ok := units[r.Job]; !ok {
			order = append(order, r.Job)
		}
		units[r.Job] = append(units[r.Job], r.ID)
	}
	for _, id := range order {
		r := s.run(id)
		if r == nil {
			continue
		}
		what := "the results of units " + joinIDs(units[id])
		if len(units[id]) == 1 {
			what = "the result of unit " + joinIDs(units[id])
		}
		s.endJob(r, store.JobFailed, fmt.Sprintf("recording %s in the job database failed: %v; free space on the server's data disk, then submit the job again", what, err))
	}
}
