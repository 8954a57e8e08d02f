package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/braid-hpc/braid/store"
)

// maxBatch bounds the results one transaction records.
const maxBatch = 2048

// gather is how long a transaction waits for more results when fewer
// than fill are queued. A transaction costs about as much as a hundred
// rows, so at a few hundred results a second, one per result would keep
// a core busy; a flush never waits.
const (
	gather = 5 * time.Millisecond
	fill   = 128
)

// recorder writes unit results to the job store in batches: whatever
// arrived while the last transaction ran, or within gather of the first,
// goes into the next one. A transaction per result would cap the server
// at a few thousand units a second; a batch costs about one row write per
// result.
type recorder struct {
	db   resultStore
	log  *slog.Logger
	in   chan recItem
	done chan struct{}
	// gather is the package's gather; tests lengthen it.
	gather time.Duration
	// hurry cuts a gathering short: a flush or the close is waiting.
	hurry chan struct{}
	// tries and backoff: a batch the store refuses is written again
	// after backoff, doubling, tries times in all.
	tries   int
	backoff time.Duration
	// lost, if set, receives a batch the store refused tries times and
	// the last error: those results are not recorded.
	lost func([]store.UnitResult, error)
	// stop, if set, ends the retries of a store that cannot be reached
	// (the Lifecycle shuts down).
	stop <-chan struct{}
}

// maxUnreachableWait bounds the backoff while the store cannot be
// reached.
const maxUnreachableWait = 2 * time.Second

// Defaults of recorder.tries and recorder.backoff: a store that refuses
// a batch for about 3s (a full disk) loses it.
const (
	recordTries   = 6
	recordBackoff = 100 * time.Millisecond
)

// recItem is a result to record or, if flush is set, a marker: flush
// receives the outcome of the batch that recorded everything before it.
type recItem struct {
	res   store.UnitResult
	flush chan error
}

// resultStore is where a recorder writes.
type resultStore interface {
	FinishUnits(ctx context.Context, rs []store.UnitResult) (counted []bool, err error)
}

func newRecorder(db resultStore, log *slog.Logger) *recorder {
	return &recorder{db: db, log: log, in: make(chan recItem, 4*maxBatch), done: make(chan struct{}), gather: gather,
		hurry: make(chan struct{}, 1), tries: recordTries, backoff: recordBackoff}
}

// add queues a result. It blocks while the queue is full, which slows the
// streams down to what the store takes. It must not be called after close.
func (r *recorder) add(res store.UnitResult) { r.in <- recItem{res: res} }

// flush waits until every result added before it is recorded.
func (r *recorder) flush(ctx context.Context) error {
	ch := make(chan error, 1)
	select {
	case r.in <- recItem{flush: ch}:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.hasten()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close records what is queued and stops the recorder.
func (r *recorder) close() {
	close(r.in)
	r.hasten()
	<-r.done
}

func (r *recorder) hasten() {
	select {
	case r.hurry <- struct{}{}:
	default:
	}
}

func (r *recorder) run() {
	defer close(r.done)
	batch := make([]store.UnitResult, 0, maxBatch)
	var waiters []chan error
	take := func(it recItem) {
		if it.flush != nil {
			waiters = append(waiters, it.flush)
		} else {
			batch = append(batch, it.res)
		}
	}
	// drain takes what is queued now, without waiting.
	closed := false
	drain := func() {
		for len(batch) < maxBatch {
			select {
			case it, ok := <-r.in:
				if !ok {
					closed = true
					return
				}
				take(it)
			default:
				return
			}
		}
	}
	timer := time.NewTimer(r.gather)
	timer.Stop()
	for it := range r.in {
		take(it)
		drain()
		if len(batch) < fill && len(waiters) == 0 && !closed {
			// One sleep per batch, not a wake-up per result: at high
			// rates waking for each would cost more than it saves.
			timer.Reset(r.gather)
			select {
			case <-timer.C:
			case <-r.hurry:
			}
			timer.Stop()
			drain()
		}
		var err error
		if len(batch) > 0 {
			err = r.record(batch)
		}
		for _, w := range waiters {
			w <- err
		}
		batch, waiters = batch[:0], waiters[:0]
	}
}

// record writes a batch, again after a backoff while the store refuses
// it (a full disk may clear), and hands it to lost after the last try.
// A store that cannot be reached (the database is down or restarting)
// is tried until it answers or the Lifecycle shuts down: the streams
// wait meanwhile (add blocks once the queue is full), and no job fails
// for an outage.
func (r *recorder) record(batch []store.UnitResult) error {
	wait := r.backoff
	var err error
	for try := 1; ; try++ {
		if _, err = r.db.FinishUnits(context.Background(), batch); err == nil {
			if try > 1 {
				r.log.Info("recorded unit results at last", "units", len(batch), "tries", try)
			}
			return nil
		}
		if errors.Is(err, store.ErrClosed) {
			break
		}
		unreachable := store.IsUnavailable(err)
		if !unreachable && try >= r.tries {
			break
		}
		if unreachable {
			wait = min(wait, maxUnreachableWait)
		}
		if try <= r.tries || try%10 == 0 {
			r.log.Warn("recording unit results failed; trying again", "units", len(batch), "try", try, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.stop:
			t.Stop()
			return err // shutting down: the units run again at the next start
		}
		wait *= 2
	}
	r.log.Error("recording unit results failed; their jobs fail", "units", len(batch), "err", err)
	if r.lost != nil {
		r.lost(slices.Clone(batch), err)
	}
	return err
}
