package server

import (
	"sync"
	"time"
)

// busy measures how a worker used the threads it lends the server: the
// compute time its results report against the thread time it had work,
// that is its threads times the time it had at least one unit in flight.
// Their ratio is the worker's compute fraction (the paper's measure of a
// system that keeps its workers fed); time with nothing in flight is the
// jobs' absence, not the system's overhead, and does not count.
//
// It also counts the tries the compute time is the sum of: every result
// the worker sent back (first, second or failed, and tries stopped by a
// preemption). A worker can compute without delivering a unit first (its
// backup copies lost the race), so the tries, not the units credited to
// it, are what its compute share is made of.
type busy struct {
	mu       sync.Mutex
	threads  int
	inFlight int
	mark     time.Time // the last change while inFlight > 0
	use      usage
	now      func() time.Time
}

// usage is what busy measured over a session.
type usage struct {
	// compute is the compute time the worker's results report, and lent
	// its threads times the time it had at least one unit in flight.
	compute, lent time.Duration
	// tries counts the results whose compute time is in compute.
	tries uint64
}

func newBusy() *busy { return &busy{now: time.Now} }

// advance adds the thread time since the last mark, if units were out.
func (b *busy) advance() {
	t := b.now()
	if b.inFlight > 0 {
		b.use.lent += time.Duration(b.threads) * t.Sub(b.mark)
	}
	b.mark = t
}

// setThreads records how many streams (lent threads) the worker has now.
func (b *busy) setThreads(n int) {
	b.mu.Lock()
	b.advance()
	b.threads = n
	b.mu.Unlock()
}

// sent counts a unit going out.
func (b *busy) sent() {
	b.mu.Lock()
	b.advance()
	b.inFlight++
	b.mu.Unlock()
}

// back counts a unit's result: a try that took compute.
func (b *busy) back(compute time.Duration) {
	b.mu.Lock()
	b.advance()
	if b.inFlight > 0 {
		b.inFlight--
	}
	b.use.compute += max(compute, 0)
	b.use.tries++
	b.mu.Unlock()
}

// lost counts a unit that left without a result (its stream broke).
func (b *busy) lost() {
	b.mu.Lock()
	b.advance()
	if b.inFlight > 0 {
		b.inFlight--
	}
	b.mu.Unlock()
}

// totals returns the figures so far.
func (b *busy) totals() usage {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance()
	return b.use
}
