package server

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/braid-hpc/braid/store"
)

// beats batches the workers' heartbeats into few store writes. The first
// beat of a batch wakes the writer, which waits a quarter of the
// heartbeat interval (at most 250 ms) for more and then writes them all in
// one transaction; a later beat of the same worker replaces its earlier
// one. A cluster of 1,000 workers beating once a second then costs the
// store about four writes a second, not 1,000.
//
// Liveness does not wait for the write: a heartbeat marks its peer seen
// at once, and only the figures `braid workers`, the dashboard and other
// servers read from the store lag, by the batch's wait.
type beats struct {
	mu      sync.Mutex
	pending map[string]store.Beat
	kick    chan struct{} // one token: a batch is waiting
}

func newBeats() *beats {
	return &beats{pending: map[string]store.Beat{}, kick: make(chan struct{}, 1)}
}

// add queues b for the next write.
func (bs *beats) add(b store.Beat) {
	bs.mu.Lock()
	bs.pending[b.Worker] = b
	bs.mu.Unlock()
	select {
	case bs.kick <- struct{}{}:
	default:
	}
}

// take removes and returns the beats queued.
func (bs *beats) take() map[string]store.Beat {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if len(bs.pending) == 0 {
		return nil
	}
	out := bs.pending
	bs.pending = make(map[string]store.Beat, len(out))
	return out
}

// putBack queues again the beats of a failed write that no newer beat
// replaced, so that a database outage loses only figures made stale.
func (bs *beats) putBack(failed map[string]store.Beat) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for id, b := range failed {
		if _, newer := bs.pending[id]; !newer {
			bs.pending[id] = b
		}
	}
}

// beatWait is how long the writer gathers beats before a write.
func (s *Server) beatWait() time.Duration {
	return min(s.cfg.HeartbeatInterval/4, 250*time.Millisecond)
}

// writeBeats writes batches of heartbeats until the server stops, and
// then the last batch.
func (s *Server) writeBeats() {
	for {
		select {
		case <-s.stop:
			s.flushBeats()
			return
		case <-s.beats.kick:
		}
		select {
		case <-s.stop:
		case <-time.After(s.beatWait()):
		}
		s.flushBeats()
	}
}

// flushBeats writes the beats queued in one batch.
func (s *Server) flushBeats() {
	batch := s.beats.take()
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.beatDB.Heartbeats(ctx, slices.Collect(maps.Values(batch))); err != nil {
		s.beats.putBack(batch)
		s.log.Warn("recording workers' heartbeats failed; they are kept for the next write", "workers", len(batch), "err", err)
	}
}
