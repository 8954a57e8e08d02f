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
type busy struct {
	mu       sync.Mutex
	threads  int
	inFlight int
	mark     time.Time // the last change while inFlight > 0
	lent     time.Duration
	compute  time.Duration
	now      func() time.Time
}

func newBusy() *busy { return &busy{now: time.Now} }

// advance adds the thread time since the last mark, if units were out.
func (b *busy) advance() {
	t := b.now()
	if b.inFlight > 0 {
		b.lent += time.Duration(b.threads) * t.Sub(b.mark)
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

// back counts a unit's result, or its loss (compute 0).
func (b *busy) back(compute time.Duration) {
	b.mu.Lock()
	b.advance()
	if b.inFlight > 0 {
		b.inFlight--
	}
	b.compute += max(compute, 0)
	b.mu.Unlock()
}

// totals returns the compute time and the lent thread time so far.
func (b *busy) totals() (compute, lent time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance()
	return b.compute, b.lent
}
