package stripe

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// event is what one path puts on its channel, as the receiver sees it.
// A fragment carries no index on the wire; index here is the truth the
// sender knows, which the receiver must reproduce without reading it.
type event struct {
	kind  byte // 's' Start, 'f' fragment, 'e' End
	index int  // Start: first fragment; fragment: true index (hidden)
	dir   Dir  // Start only
}

// recorder drives a Segment the way the transport would and keeps what
// every path sent, so the properties of a run can be checked at the end.
type recorder struct {
	s       *Segment
	n       int
	mode    Mode
	owner   []int // worker that claimed each index, -1 if none
	streams map[int][]event
	err     error
}

func newRecorder(s *Segment, n int, mode Mode) *recorder {
	r := &recorder{s: s, n: n, mode: mode, owner: make([]int, n), streams: map[int][]event{}}
	for i := range r.owner {
		r.owner[i] = -1
	}
	return r
}

// claim calls Claim for w and records the outcome.
func (r *recorder) claim(w int) (Claim, bool) {
	c, ok := r.s.Claim(w)
	if !ok {
		if c.End {
			if r.mode == Basic {
				r.fail("basic mode issued End to worker %d", w)
			}
			r.streams[w] = append(r.streams[w], event{kind: 'e'})
		}
		return c, false
	}
	if c.End {
		r.fail("worker %d: End set on a successful claim", w)
	}
	if c.Index < 0 || c.Index >= r.n {
		r.fail("worker %d claimed index %d outside [0,%d)", w, c.Index, r.n)
		return c, true
	}
	if o := r.owner[c.Index]; o >= 0 {
		r.fail("index %d claimed twice: by %d and by %d", c.Index, o, w)
	}
	r.owner[c.Index] = w
	if c.Start {
		if r.mode == Basic {
			r.fail("basic mode issued Start to worker %d", w)
		}
		r.streams[w] = append(r.streams[w], event{kind: 's', index: c.Index, dir: c.Dir})
	}
	r.streams[w] = append(r.streams[w], event{kind: 'f', index: c.Index})
	return c, true
}

func (r *recorder) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

// check verifies a finished run: no error while claiming, every index
// claimed exactly once, nothing left unsent, no further claims possible,
// and (Enhanced) every path's stream decodes to the true indices.
func (r *recorder) check(t testing.TB, ids []int) {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	for i, o := range r.owner {
		if o < 0 {
			t.Fatalf("index %d never claimed (unsent %d)", i, r.s.Unsent())
		}
	}
	if u := r.s.Unsent(); u != 0 {
		t.Fatalf("Unsent() = %d after every index was claimed", u)
	}
	for _, w := range ids {
		if c, ok := r.s.Claim(w); ok {
			t.Fatalf("worker %d claimed %d after every index was claimed", w, c.Index)
		}
	}
	if r.mode == Enhanced {
		if err := decode(r.streams); err != nil {
			t.Fatal(err)
		}
	}
}

// decode plays the receiver: per path it keeps a counter set by Start and
// advanced by each fragment, and checks that the counter names the
// fragment the sender really sent.
func decode(streams map[int][]event) error {
	for w, evs := range streams {
		synced, next, step := false, 0, 0
		for j, e := range evs {
			switch e.kind {
			case 's':
				synced, next, step = true, e.index, e.dir.step()
			case 'f':
				if !synced {
					return fmt.Errorf("path %d event %d: fragment %d without Start", w, j, e.index)
				}
				if next != e.index {
					return fmt.Errorf("path %d event %d: receiver places fragment at %d, sender sent %d", w, j, next, e.index)
				}
				next += step
			case 'e':
				if !synced {
					return fmt.Errorf("path %d event %d: End without Start", w, j)
				}
				synced = false
			}
		}
	}
	return nil
}

// randomRun interleaves claims by live workers, each step picking one
// with probability proportional to its speed. Workers in remove are
// removed at random steps (at least one worker always survives); a worker
// whose Claim fails goes idle and is woken, as the transport would, when
// a Remove leaves fragments for helpers. Only ws[:planned] are given to
// NewSegment; the others join through their first Claim.
func randomRun(t testing.TB, rng *rand.Rand, n int, mode Mode, ws []Worker, planned int, speed []float64, remove map[int]bool) *recorder {
	t.Helper()
	s := NewSegment(n, mode, ws[:planned])
	r := newRecorder(s, n, mode)
	live := map[int]bool{}
	idle := map[int]bool{}
	for _, w := range ws {
		live[w.ID] = true
	}
	spd := map[int]float64{}
	for i, w := range ws {
		spd[w.ID] = speed[i]
	}
	pending := []int{}
	for _, w := range ws {
		if remove[w.ID] {
			pending = append(pending, w.ID)
		}
	}
	for steps := 0; ; steps++ {
		if steps > 20*n+1000 {
			t.Fatalf("no progress after %d steps: unsent %d", steps, s.Unsent())
		}
		if len(pending) > 0 && len(live) > 1 && rng.IntN(max(n/4, 2)) == 0 {
			w := pending[0]
			pending = pending[1:]
			s.Remove(w)
			delete(live, w)
			clear(idle)
		}
		var total float64
		for w := range live {
			if !idle[w] {
				total += spd[w]
			}
		}
		if total == 0 {
			break
		}
		x := rng.Float64() * total
		pick := -1
		for _, w := range ws { // fixed order for reproducibility
			if !live[w.ID] || idle[w.ID] {
				continue
			}
			pick = w.ID
			if x -= spd[w.ID]; x < 0 {
				break
			}
		}
		if _, ok := r.claim(pick); !ok {
			idle[pick] = true
		}
	}
	return r
}

// timed is the outcome of a discrete-event run.
type timed struct {
	count  []int     // fragments per worker
	finish []float64 // when each worker's last fragment was done
	stats  Stats
}

// timedRun simulates k paths sending a segment: path i needs
// frag(i, t) time units for a fragment started at t, and claims its next
// fragment as soon as the previous one is done. Ties go to the lowest
// index. Worker ids are 0..k-1.
func timedRun(t testing.TB, n int, mode Mode, rates []float64, frag func(i int, t float64) float64) timed {
	t.Helper()
	k := len(rates)
	ws := make([]Worker, k)
	for i := range ws {
		ws[i] = Worker{ID: i, Rate: rates[i]}
	}
	s := NewSegment(n, mode, ws)
	r := newRecorder(s, n, mode)
	now := make([]float64, k)
	done := make([]bool, k)
	res := timed{count: make([]int, k), finish: make([]float64, k)}
	for {
		i := -1
		for j := range k {
			if !done[j] && (i < 0 || now[j] < now[i]) {
				i = j
			}
		}
		if i < 0 {
			break
		}
		if _, ok := r.claim(i); !ok {
			done[i] = true
			res.finish[i] = now[i]
			continue
		}
		res.count[i]++
		now[i] += frag(i, now[i])
	}
	ids := make([]int, k)
	for i := range ids {
		ids[i] = i
	}
	r.check(t, ids)
	res.stats = s.Stats()
	return res
}

// fixedSpeed returns a fragment-time function for constant speeds.
func fixedSpeed(speed []float64) func(int, float64) float64 {
	return func(i int, _ float64) float64 { return 1 / speed[i] }
}

// loadedSpeed models randomly loaded networks: each path starts at a
// random speed in [lo, 1] and, before each fragment, with probability p
// its load changes to a new random speed.
func loadedSpeed(rng *rand.Rand, k int, lo, p float64) (initial []float64, frag func(int, float64) float64) {
	cur := make([]float64, k)
	for i := range cur {
		cur[i] = lo + (1-lo)*rng.Float64()
	}
	initial = append([]float64(nil), cur...)
	return initial, func(i int, _ float64) float64 {
		if rng.Float64() < p {
			cur[i] = lo + (1-lo)*rng.Float64()
		}
		return 1 / cur[i]
	}
}

// eq10 is the paper's average-case estimate of Start messages.
func eq10(k, n int) float64 {
	return float64(k) + float64(k)/2*(math.Log(float64(n))/math.Log(4)-1)
}
