package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/braid-hpc/braid/store"
)

// A job's final state must reach the job store, or the job would show as
// running until the server restarts. When the write fails (the disk is
// full, say), the job's end is kept here, shown in its status, and
// written again with backoff until it succeeds or the Lifecycle shuts
// down; a job whose end was never written resumes at the next start.

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
// as unsaved and written again in the background. It returns the error
// of the first write if that was ErrFenced (the job is another
// server's: nothing is kept), nil otherwise.
func (l *Lifecycle) saveEnd(id uint64, u unsaved) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := u.save(ctx)
	cancel()
	if errors.Is(err, store.ErrFenced) {
		return err
	}
	if err == nil || errors.Is(err, store.ErrConflict) {
		return nil
	}
	u.err, u.at = err, time.Now().UTC()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unsaved[id] = u
	l.log.Error("recording the end of a job failed; it shows as ended and the server keeps trying",
		"job", id, "state", u.state, "err", err)
	if l.saving {
		return nil
	}
	// Not while shutting down (the job resumes at the next start), nor
	// before Start (which starts the loop).
	if l.goBG(l.saveLoop) {
		l.saving = true
	}
	return nil
}

// saveLoop writes the unsaved ends until none is left or the Lifecycle
// shuts down.
func (l *Lifecycle) saveLoop() {
	wait := saveFirst
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-l.stop:
			l.mu.Lock()
			l.saving = false
			l.mu.Unlock()
			return
		}
		l.mu.Lock()
		todo := make(map[uint64]unsaved, len(l.unsaved))
		for id, u := range l.unsaved {
			todo[id] = u
		}
		l.mu.Unlock()
		for id, u := range todo {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := u.save(ctx)
			cancel()
			l.mu.Lock()
			if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrFenced) {
				delete(l.unsaved, id)
				if err == nil {
					l.log.Info("recorded the end of a job at last", "job", id, "state", u.state)
				} else {
					l.log.Warn("the end of a job was not recorded: the job database has another", "job", id, "state", u.state, "err", err)
				}
			} else if cur, ok := l.unsaved[id]; ok {
				cur.err = err
				l.unsaved[id] = cur
			}
			l.mu.Unlock()
		}
		l.mu.Lock()
		if len(l.unsaved) == 0 {
			l.saving = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		wait = min(2*wait, saveMax)
		t.Reset(wait)
	}
}

// UnsavedIn returns the jobs whose unsaved end is state.
func (l *Lifecycle) UnsavedIn(state store.JobState) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []uint64
	for id, u := range l.unsaved {
		if u.state == state {
			ids = append(ids, id)
		}
	}
	return ids
}

// UnsavedEnds returns the final state of each job whose end is unsaved.
func (l *Lifecycle) UnsavedEnds() map[uint64]store.JobState {
	l.mu.Lock()
	defer l.mu.Unlock()
	ends := make(map[uint64]store.JobState, len(l.unsaved))
	for id, u := range l.unsaved {
		ends[id] = u.state
	}
	return ends
}

// Overlay gives a job record whose end is unsaved that end, and returns
// a note saying so ("" for any other job).
func (l *Lifecycle) Overlay(j *store.Job) (note string) {
	if j.State.Final() {
		return ""
	}
	l.mu.Lock()
	u, ok := l.unsaved[j.ID]
	l.mu.Unlock()
	if !ok {
		return ""
	}
	j.State, j.Error, j.Output, j.Finished, j.Running = u.state, u.msg, u.output, u.at, 0
	return fmt.Sprintf("not yet recorded in the job database (%v); the server keeps trying", u.err)
}

func joinIDs(ids []uint64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(parts, ", ")
}
