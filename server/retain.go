package server

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/braid-hpc/braid/lifecycle"
	"github.com/braid-hpc/braid/store"
)

// Blob lifetimes. Uploads stay until a client deletes them. A job's
// intermediate blobs (its units' results and the tile data Split made)
// are removed when it ends; its output stays for Config.Retain, then the
// sweep removes it and marks it expired (410 Gone on fetch). A blob goes
// only if nothing else needs it (store.Meta.BlobKept, the active jobs,
// the pins): blobs are content-addressed, so one may be an upload, a
// result and an output at once.
//
// Pins close the race between removing a blob and making it needed:
// whoever stores a blob that something will refer to pins its ID first
// and unpins it once the reference is visible (in the store or in an
// active run); removal holds pinMu while it checks and deletes.

// pin marks ids as about to be referred to.
func (s *Server) pin(ids ...string) {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	if s.pins == nil {
		s.pins = map[string]int{}
	}
	for _, id := range ids {
		s.pins[id]++
	}
}

func (s *Server) unpin(ids ...string) {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	for _, id := range ids {
		if s.pins[id]--; s.pins[id] <= 0 {
			delete(s.pins, id)
		}
	}
}

// unpinUnits undoes the pins of splitJob: the input and the units' data.
func (s *Server) unpinUnits(input string, units []store.Unit) {
	ids := []string{input}
	seen := map[string]bool{input: true}
	for _, u := range units {
		if u.Blob != "" && !seen[u.Blob] {
			seen[u.Blob] = true
			ids = append(ids, u.Blob)
		}
	}
	s.unpin(ids...)
}

// activeBlobs returns the blobs the active jobs refer to in memory.
func (s *Server) activeBlobs() map[string]bool {
	ids := map[string]bool{}
	for _, j := range s.lc.Jobs() {
		ids[j.Rec.Input] = true
		for _, u := range j.Units {
			ids[u.Blob] = true
		}
		results, _, _ := j.Blobs()
		for _, id := range results {
			ids[id] = true
		}
	}
	return ids
}

// dropIntermediates removes, in the background, the blobs of a job that
// ended which nothing else needs; its input and output stay.
func (s *Server) dropIntermediates(j *lifecycle.Job) {
	results, spare, output := j.Blobs()
	ids := make([]string, 0, len(j.Units)+len(results)+len(spare))
	// The units of a job over a dataset read its members, which stay,
	// also where a result has the bytes of one.
	in, isDataset, err := s.dataset(context.Background(), j.Rec.Input)
	if err == nil && !isDataset {
		for _, u := range j.Units {
			ids = append(ids, u.Blob)
		}
	}
	ids = append(append(ids, results...), spare...)
	keep := map[string]bool{"": true, output: true, j.Rec.Input: true}
	for _, m := range in.Members {
		keep[m.Blob] = true
	}
	// An output dataset's members may have the bytes of a result.
	if d, ok, err := s.dataset(context.Background(), output); err == nil && ok {
		for _, m := range d.Members {
			keep[m.Blob] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return // the next start resumes nothing of it; the blobs stay
	}
	s.bg.Go(func() {
		if s.shared {
			// Another server may be storing the same bytes (blobs are
			// content-addressed) for a job whose units it has not
			// recorded yet: wait until it has.
			t := time.NewTimer(s.dropGrace())
			select {
			case <-s.stop:
				t.Stop()
				return // the blobs stay
			case <-t.C:
			}
		}
		ctx, cancel := s.lifetime()
		defer cancel()
		n, bytes := s.dropBlobs(ctx, j.ID, ids, keep, nil)
		if n > 0 {
			s.log.Info("removed the intermediate blobs of a job that ended", "job", j.ID, "blobs", n, "bytes", bytes)
		}
	})
}

// dropBlobs removes the blobs of ids, but those in keep and those that
// something needs besides job; it returns how many it removed and their
// bytes. The index of members of those in datasets (manifests) goes with
// them, under pinMu, so that a manifest stored again meanwhile (pinned
// first) keeps its new index. It asks the store about dropBatchSize
// blobs at once, and holds pinMu for one batch at a time.
func (s *Server) dropBlobs(ctx context.Context, job uint64, ids []string, keep, datasets map[string]bool) (n int, bytes int64) {
	todo := make([]string, 0, len(ids))
	seen := map[string]bool{}
	for _, id := range ids {
		if !keep[id] && !seen[id] && store.ValidID(id) {
			seen[id] = true
			todo = append(todo, id)
		}
	}
	for len(todo) > 0 && ctx.Err() == nil {
		batch := todo[:min(len(todo), dropBatchSize)]
		todo = todo[len(batch):]
		bn, bb := s.dropBatch(ctx, job, batch, datasets)
		n, bytes = n+bn, bytes+bb
	}
	return n, bytes
}

// dropBatchSize is how many blobs dropBlobs checks and removes under
// pinMu at once.
const dropBatchSize = 500

// dropBatch is dropBlobs of at most dropBatchSize distinct, valid ids.
func (s *Server) dropBatch(ctx context.Context, job uint64, ids []string, datasets map[string]bool) (n int, bytes int64) {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	active := s.activeBlobs()
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return active[id] || s.pins[id] > 0 })
	if len(ids) == 0 {
		return 0, 0
	}
	kept, err := s.db.KeptBlobs(ctx, ids, job)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("could not tell whether blobs are still needed; they stay", "job", job, "blobs", len(ids), "err", err)
		}
		return 0, 0
	}
	for _, id := range ids {
		if kept[id] != "" {
			continue
		}
		info, err := s.blobs.Stat(id)
		if err == nil {
			err = s.blobs.Delete(id)
		}
		s.known.forget(id)
		if err != nil {
			if !errors.Is(err, store.ErrNotFound) {
				s.log.Warn("removing a blob failed", "job", job, "blob", id, "err", err)
			}
			continue
		}
		if datasets[id] {
			s.forgetDataset(ctx, id)
		}
		n++
		bytes += info.Size
	}
	return n, bytes
}

// forgetDataset removes the index of the members of dataset id, whose
// manifest was removed. A failure is only logged: the rows left stay
// true (a manifest's ID names its content) and keep nothing while the
// dataset does not live.
func (s *Server) forgetDataset(ctx context.Context, id string) {
	if err := s.db.RemoveDataset(ctx, id); err != nil && ctx.Err() == nil {
		s.log.Warn("forgetting the members of a removed dataset failed; they stay in the index", "blob", id, "err", err)
	}
}

// dropGrace is how long a server sharing its blob store waits before it
// removes the intermediate blobs of a job that ended: time enough for
// the other servers to record the units whose results are the same
// bytes.
func (s *Server) dropGrace() time.Duration { return max(10*time.Second, 2*s.cfg.TakeoverAfter) }

// sweepEvery is how often the sweep looks for expired outputs, given the
// retention period.
func sweepEvery(retain time.Duration) time.Duration {
	return min(max(retain/4, 10*time.Millisecond), time.Minute)
}

// sweep removes the outputs older than Config.Retain until the server
// stops.
func (s *Server) sweep() {
	t := time.NewTicker(sweepEvery(s.cfg.Retain))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := s.lifetime()
		if !s.singleton(ctx, "retention", 2*sweepEvery(s.cfg.Retain)) {
			cancel()
			continue // another server sharing the database sweeps
		}
		if err := s.expire(ctx, time.Now().Add(-s.cfg.Retain)); err != nil && ctx.Err() == nil {
			s.log.Warn("removing expired outputs failed; the next sweep tries again", "err", err)
		}
		cancel()
	}
}

// expire removes the outputs of the jobs that finished before t and
// marks them expired.
func (s *Server) expire(ctx context.Context, t time.Time) error {
	for {
		due, err := s.db.DueOutputs(ctx, t, 100)
		if err != nil || len(due) == 0 {
			return err
		}
		for _, j := range due {
			ids := []string{j.Output}
			// An output dataset's members go with it, but those another
			// dataset lists.
			var datasets map[string]bool
			if d, ok, err := s.dataset(ctx, j.Output); err == nil && ok {
				ids = append(ids, memberBlobs(d)...)
				datasets = map[string]bool{j.Output: true}
			}
			n, bytes := s.dropBlobs(ctx, j.ID, ids, nil, datasets)
			if err := s.db.ExpireOutput(ctx, j.ID); err != nil {
				return err
			}
			s.log.Info("job output expired", "job", j.ID, "blob", j.Output, "removed", n > 0, "bytes", bytes,
				"finished", j.Finished)
		}
	}
}

// goneError is the 410 of a blob that was job j's output and expired.
func (s *Server) goneError(j store.Job) error {
	return kindf(errGone, "blob %s was the output of job %d, removed on %s after the server's retention period (braid server --retain %v); submit the job again to make it anew",
		j.Output, j.ID, j.Expired.Format(time.RFC3339), s.cfg.Retain)
}

// expiredOutput returns the 410 of blob id if it was an expired output.
func (s *Server) expiredOutput(ctx context.Context, id string) error {
	j, err := s.db.ExpiredOutput(ctx, id)
	if err != nil {
		return nil
	}
	return s.goneError(j)
}
