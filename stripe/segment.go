package stripe

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
)

// Mode selects how a segment's fragments are handed out.
type Mode uint8

// Striping modes.
const (
	// Enhanced gives each pair of workers a partition that one sweeps
	// upwards and the other downwards, so fragments need no sequence
	// header: a path announces where its counter starts with a Start
	// control message and the receiver counts from there. Free pairs help
	// busy ones by splitting what is left of their partition.
	Enhanced Mode = iota
	// Basic hands out indices from one shared counter; every fragment
	// carries its index and no control messages are used.
	Basic
)

func (m Mode) String() string {
	switch m {
	case Enhanced:
		return "enhanced"
	case Basic:
		return "basic"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Dir is the direction in which a path's fragment counter moves (the
// paper's counterMode). Its values match the direction byte of the wire
// Start frame.
type Dir uint8

// Counter directions.
const (
	Inc Dir = iota // left to right: i, i+1, i+2, ...
	Dec            // right to left: i, i-1, i-2, ...
)

func (d Dir) String() string {
	switch d {
	case Inc:
		return "inc"
	case Dec:
		return "dec"
	}
	return fmt.Sprintf("dir(%d)", uint8(d))
}

// step is the index delta between consecutive fragments in direction d.
func (d Dir) step() int {
	if d == Dec {
		return -1
	}
	return 1
}

// Worker describes one sending path.
type Worker struct {
	ID   int     // caller's path id; unique within a segment
	Rate float64 // measured bytes/s of the path; 0 means unknown
}

// Claim is the answer to [Segment.Claim].
type Claim struct {
	// Index is the fragment to send. Valid only when Claim reported ok.
	Index int
	// Start (Enhanced only) means the path's receiver cannot predict Index:
	// send a Start control message carrying Index as the first fragment and
	// Dir as the counter mode before the fragment itself.
	Start bool
	// Dir is the direction of the path's counter after this fragment. In
	// Basic mode it is always Inc and carries no meaning.
	Dir Dir
	// End (Enhanced only, ok false) means the path has sent fragments of
	// this segment since its last Start and must now send an End control
	// message: it has nothing more to send here.
	End bool
}

// Stats counts what a segment has handed out.
type Stats struct {
	Starts  int         // Claims returned with Start set
	Ends    int         // Claims returned with End set
	Claimed map[int]int // fragments claimed per worker id: the paper's C(t)
}

// worker is the segment's view of one path.
type worker struct {
	id      int
	rate    float64    // effective rate: Worker.Rate, or the mean if unknown
	part    *partition // where it claims next; nil when free
	dir     Dir
	claimed int  // C(t): fragments claimed in this segment
	removed bool // its path died; it claims nothing until Join
	idle    bool // its last Claim failed: never handed work by others

	// The receiver's counter for this path, as the receiver will see it.
	synced bool // a Start has been issued and no End since
	rxNext int  // index the receiver assigns to the next plain fragment
	rxDir  Dir
}

// partition is a contiguous range of unsent fragments [lo, hi] worked by
// at most one incrementing and one decrementing worker.
type partition struct {
	lo, hi   int // next index for the Inc and the Dec worker
	inc, dec *worker
}

func (p *partition) unsent() int { return max(0, p.hi-p.lo+1) }

func (p *partition) detach(w *worker) {
	if p.inc == w {
		p.inc = nil
	}
	if p.dec == w {
		p.dec = nil
	}
}

// partner returns the other worker of p, or nil.
func (p *partition) partner(w *worker) *worker {
	if p.inc == w {
		return p.dec
	}
	return p.inc
}

// Segment hands out the fragments of one striped message to the workers
// (paths) that send it. Its methods are safe for concurrent use.
type Segment struct {
	mu       sync.Mutex
	n        int
	mode     Mode
	next     int // Basic: the shared counter
	parts    []*partition
	workers  map[int]*worker
	meanRate float64 // rate assumed for workers whose rate is unknown
	starts   int
	ends     int
}

// NewSegment plans a segment of n fragments, indices 0 to n-1, over the
// given live workers; their order does not matter and a repeated ID is
// ignored.
//
// In Enhanced mode the workers are sorted by rate, fastest first, and
// neighbours are paired: the first two share the first partition (the
// faster sweeping Inc from its left end, the other Dec from its right
// end), the next two the second, and so on; with an odd count the slowest
// worker gets a partition of its own that it sweeps Inc. Pairing
// neighbours keeps the two threads of a pair at similar speeds, so they
// meet near the middle of their partition, and it leaves the slowest path,
// not a fast one, alone on the smallest partition, the one no partner
// shortens from the other end. Partitions are contiguous, in that order,
// and sized in proportion to each pair's summed rate. Unknown rates count
// as the mean of the known ones (all unknown: equal partitions).
//
// With no workers the whole segment is one partition that workers joining
// later through Claim or Join take up.
func NewSegment(n int, mode Mode, workers []Worker) *Segment {
	s := &Segment{n: max(n, 0), mode: mode, workers: make(map[int]*worker, len(workers))}
	var known, sum float64
	var ws []*worker
	for _, w := range workers {
		if _, dup := s.workers[w.ID]; dup {
			continue
		}
		wk := &worker{id: w.ID, rate: w.Rate}
		s.workers[w.ID] = wk
		ws = append(ws, wk)
		if w.Rate > 0 {
			known++
			sum += w.Rate
		}
	}
	s.meanRate = 1
	if known > 0 {
		s.meanRate = sum / known
	}
	for _, wk := range ws {
		if !(wk.rate > 0) {
			wk.rate = s.meanRate
		}
	}
	if mode != Enhanced {
		return s
	}
	slices.SortFunc(ws, func(a, b *worker) int {
		if c := cmp.Compare(b.rate, a.rate); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	if len(ws) == 0 {
		s.parts = []*partition{{lo: 0, hi: s.n - 1}}
		return s
	}
	var groups [][]*worker
	var total float64
	for i := 0; i < len(ws); i += 2 {
		g := ws[i:min(i+2, len(ws))]
		groups = append(groups, g)
		for _, w := range g {
			total += w.rate
		}
	}
	var cum float64
	lo := 0
	for i, g := range groups {
		for _, w := range g {
			cum += w.rate
		}
		hi := s.n - 1
		if i < len(groups)-1 {
			hi = int(float64(s.n)*cum/total+0.5) - 1
			hi = min(max(hi, lo-1), s.n-1)
		}
		p := &partition{lo: lo, hi: hi}
		s.assign(g[0], p, Inc)
		if len(g) == 2 {
			s.assign(g[1], p, Dec)
		}
		s.parts = append(s.parts, p)
		lo = hi + 1
	}
	return s
}

func (s *Segment) assign(w *worker, p *partition, d Dir) {
	w.part, w.dir = p, d
	if d == Inc {
		p.inc = w
	} else {
		p.dec = w
	}
}

// add registers a worker that was not part of the plan.
func (s *Segment) add(id int, rate float64) *worker {
	if !(rate > 0) {
		rate = s.meanRate
	}
	w := &worker{id: id, rate: rate}
	s.workers[id] = w
	return w
}

// Claim returns the next fragment worker w should send in this segment.
// It reports ok false when w has nothing to send here now; the caller
// moves on to another segment or waits. When ok is false only c.End is
// meaningful: if set, w must send an End control message for the segment
// on its path (Enhanced mode, once after the last fragment of each run
// that began with a Start).
//
// An id the segment has never seen joins as a free worker with unknown
// rate and helps the busiest partition. A removed worker claims nothing
// until it is re-admitted with Join.
//
// A worker whose last Claim succeeded must call Claim again, until it
// fails: a partner that ran out of work may have handed it part of a busy
// partition. A failed Claim is not final either: fragments a dead path
// had not claimed wait for helpers, so after a Remove every worker that
// got ok false should call Claim again while Unsent is above zero. If it
// then gets a fragment, that fragment has Start set, even if the path
// already sent End for the segment.
//
// Start is computed per segment: it assumes the receiver's counter on w's
// path still belongs to this segment. A caller that sent fragments of
// another segment on the path in between must send a Start (c.Index,
// c.Dir) even when c.Start is false.
func (s *Segment) Claim(w int) (c Claim, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wk := s.workers[w]
	if wk == nil {
		wk = s.add(w, 0)
	}
	if wk.removed {
		return Claim{}, false
	}
	if s.mode == Basic {
		if s.next >= s.n {
			wk.idle = true
			return Claim{}, false
		}
		i := s.next
		s.next++
		wk.claimed++
		wk.idle = false
		return Claim{Index: i, Dir: Inc}, true
	}
	if wk.part == nil || wk.part.unsent() == 0 {
		s.help(wk)
	}
	p := wk.part
	if p == nil || p.unsent() == 0 {
		wk.idle = true
		if wk.synced {
			wk.synced = false
			s.ends++
			return Claim{End: true}, false
		}
		return Claim{}, false
	}
	wk.idle = false
	var i int
	if wk.dir == Inc {
		i = p.lo
		p.lo++
	} else {
		i = p.hi
		p.hi--
	}
	c = Claim{Index: i, Dir: wk.dir}
	if !wk.synced || wk.rxNext != i || wk.rxDir != wk.dir {
		c.Start = true
		s.starts++
	}
	wk.synced, wk.rxNext, wk.rxDir = true, i+wk.dir.step(), wk.dir
	wk.claimed++
	return c, true
}

// help finds new work for w, whose partition is exhausted or who has
// none, and for w's partner in an exhausted partition unless that partner
// already stopped claiming. The free workers, busiest first, go one or
// two at a time to the partition busiest returns: a missing direction is
// filled by one worker, a complete pair is split with two (splitPair) or,
// if only one is left, with one (splitSingle). A worker left without work
// gets no partition.
func (s *Segment) help(w *worker) {
	free := []*worker{w}
	if old := w.part; old != nil {
		if pt := old.partner(w); pt != nil && !pt.idle {
			old.detach(pt)
			pt.part = nil
			free = append(free, pt)
		}
		old.detach(w)
		w.part = nil
	}
	s.compact()
	// Strategy 2 needs to know which free thread is busier.
	slices.SortFunc(free, busier)
	for len(free) > 0 {
		b := s.busiest()
		if b == nil {
			return
		}
		switch {
		case b.inc == nil:
			s.assign(free[0], b, Inc)
			free = free[1:]
		case b.dec == nil:
			s.assign(free[0], b, Dec)
			free = free[1:]
		case len(free) >= 2:
			s.splitPair(b, free[0], free[1])
			free = free[2:]
		default:
			s.splitSingle(b, free[0])
			free = free[1:]
		}
	}
}

// busier orders workers by contribution, most first, then by rate, then
// by id.
func busier(a, b *worker) int {
	if c := cmp.Compare(b.claimed, a.claimed); c != 0 {
		return c
	}
	if c := cmp.Compare(b.rate, a.rate); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// compact drops exhausted partitions nobody works on any more.
func (s *Segment) compact() {
	s.parts = slices.DeleteFunc(s.parts, func(p *partition) bool {
		return p.unsent() == 0 && p.inc == nil && p.dec == nil
	})
}

// busiest returns the partition a free worker should help (strategy 1:
// the one with the most unsent fragments), or nil. A partition with a
// single unsent fragment is left to its own workers; one without workers
// is always a candidate.
func (s *Segment) busiest() *partition {
	var best *partition
	for _, p := range s.parts {
		u := p.unsent()
		if u == 0 || (u == 1 && (p.inc != nil || p.dec != nil)) {
			continue
		}
		if best == nil || u > best.unsent() {
			best = p
		}
	}
	return best
}

// splitPair divides b, worked by a busy pair, with two free workers, f1
// the busier (paper sec. 5, strategies 2 and 3). The busy Inc worker
// keeps the left part and the busy Dec worker the right part, both
// without moving; the less busy of them (fewer fragments; on a tie the
// slower, then the Inc worker) is teamed with f1.
func (s *Segment) splitPair(b *partition, f1, f2 *worker) {
	til, tdr := b.inc, b.dec
	tdl, tir := f2, f1 // tdr sent fewer: it gets the busier helper
	if til.claimed < tdr.claimed || (til.claimed == tdr.claimed && til.rate <= tdr.rate) {
		tdl, tir = f1, f2
	}
	l := float64(til.claimed + tdl.claimed)
	r := float64(tir.claimed + tdr.claimed)
	if l+r == 0 {
		l, r = til.rate+tdl.rate, tir.rate+tdr.rate
	}
	_, pdl, pir := split(b.lo, b.hi, l, r)
	right := &partition{lo: pir, hi: b.hi}
	b.hi = pdl
	s.assign(tdl, b, Dec)
	s.assign(tir, right, Inc)
	right.dec = tdr
	tdr.part = right
	s.insertAfter(b, right)
}

// splitSingle divides b, worked by a busy pair, with one free worker h:
// h works the left part downwards with the busy Inc worker, and the busy
// Dec worker keeps the right part alone. The split weighs the left part
// by C(t_il)+C(h) and the right part by C(t_dr). The right part then
// lacks an Inc worker, which the next free worker supplies.
func (s *Segment) splitSingle(b *partition, h *worker) {
	til, tdr := b.inc, b.dec
	l := float64(til.claimed + h.claimed)
	r := float64(tdr.claimed)
	if l+r == 0 {
		l, r = til.rate+h.rate, tdr.rate
	}
	_, pdl, pir := split(b.lo, b.hi, l, r)
	right := &partition{lo: pir, hi: b.hi, dec: tdr}
	tdr.part = right
	b.hi = pdl
	b.dec = nil
	s.assign(h, b, Dec)
	s.insertAfter(b, right)
}

func (s *Segment) insertAfter(p, q *partition) {
	i := slices.Index(s.parts, p)
	s.parts = slices.Insert(s.parts, i+1, q)
}

// Remove drops worker w because its path died. Fragments it had not
// claimed stay unsent and go to the others: its partner keeps sweeping and
// free workers join the partition in w's direction. Fragments w had
// already claimed are not handed out again; the caller retransmits them.
// Removing an unknown or removed worker does nothing.
func (s *Segment) Remove(w int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wk := s.workers[w]
	if wk == nil || wk.removed {
		return
	}
	wk.removed, wk.idle, wk.synced = true, true, false
	if wk.part != nil {
		wk.part.detach(wk)
		wk.part = nil
	}
}

// Join (re-)admits worker w, for instance a path that came back after
// Remove, as a free worker that helps at its next Claim. For a worker
// already live it only updates the rate.
func (s *Segment) Join(w Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wk := s.workers[w.ID]
	if wk == nil {
		s.add(w.ID, w.Rate)
		return
	}
	if w.Rate > 0 {
		wk.rate = w.Rate
	}
	if wk.removed {
		wk.removed, wk.idle, wk.synced = false, false, false
	}
}

// Len returns the number of fragments in the segment.
func (s *Segment) Len() int { return s.n }

// Unsent returns how many fragments nobody has claimed yet.
func (s *Segment) Unsent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode == Basic {
		return s.n - s.next
	}
	u := 0
	for _, p := range s.parts {
		u += p.unsent()
	}
	return u
}

// Stats returns the control messages issued so far and each worker's
// contribution.
func (s *Segment) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Starts: s.starts, Ends: s.ends, Claimed: make(map[int]int, len(s.workers))}
	for id, w := range s.workers {
		st.Claimed[id] = w.claimed
	}
	return st
}
