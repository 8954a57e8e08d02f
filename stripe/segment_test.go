package stripe

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// want is one expected Claim outcome.
type want struct {
	w     int
	index int
	start bool
	dir   Dir
}

func expect(t *testing.T, r *recorder, steps []want) {
	t.Helper()
	for _, st := range steps {
		c, ok := r.claim(st.w)
		if !ok {
			t.Fatalf("worker %d: Claim failed, want index %d", st.w, st.index)
		}
		if c.Index != st.index || c.Start != st.start || c.Dir != st.dir {
			t.Fatalf("worker %d: Claim = {%d start=%v %v}, want {%d start=%v %v}",
				st.w, c.Index, c.Start, c.Dir, st.index, st.start, st.dir)
		}
	}
}

// drainAll lets every id claim round-robin until a full round fails.
func drainAll(r *recorder, ids []int) {
	for {
		progress := false
		for _, w := range ids {
			if _, ok := r.claim(w); ok {
				progress = true
			}
		}
		if !progress {
			return
		}
	}
}

// TestPaperExample drives a segment into the state of the paper's
// Fig. 9 and checks the rearrangement of sec. 5. The paper numbers
// fragments 1 to 40; a Segment numbers them 0 to 39, so every position
// below is the paper's minus one: P(t_il)=4, P(t_dr)=17, P(t_dl)=9,
// P(t_ir)=10 are the paper's 5, 18, 10 and 11, and U(left part) is 6.
func TestPaperExample(t *testing.T) {
	// Whichever thread of the free pair notices the end of partition 2
	// reassigns both, so the result must not depend on which one it is.
	for _, finder := range []int{3, 4} {
		t.Run(fmt.Sprintf("found by t%d", finder), func(t *testing.T) {
			s := NewSegment(40, Enhanced, []Worker{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}})
			r := newRecorder(s, 40, Enhanced)
			// Partition 1 is [0,19] for t1 (Inc) and t2 (Dec),
			// partition 2 is [20,39] for t3 (Inc) and t4 (Dec).
			steps := []want{
				{1, 0, true, Inc}, {2, 19, true, Dec}, {3, 20, true, Inc}, {4, 39, true, Dec},
				{1, 1, false, Inc}, {2, 18, false, Dec},
				{1, 2, false, Inc}, {1, 3, false, Inc},
			}
			for i := range 11 {
				steps = append(steps, want{3, 21 + i, false, Inc})
			}
			for i := range 7 {
				steps = append(steps, want{4, 38 - i, false, Dec})
			}
			expect(t, r, steps)
			st := s.Stats()
			if got, wantC := st.Claimed, map[int]int{1: 4, 2: 2, 3: 12, 4: 8}; !maps.Equal(got, wantC) {
				t.Fatalf("contributions %v, want %v", got, wantC)
			}
			if s.Unsent() != 14 { // eq. 2: P(t_dr) - P(t_il) + 1
				t.Fatalf("Unsent() = %d, want 14", s.Unsent())
			}
			// Strategy 2: t2 (C=2) sent fewer than t1 (C=4), so it gets
			// the busier free thread t3 (C=12): t_il=t1, t_dl=t4,
			// t_ir=t3, t_dr=t2. Strategy 3: U(left) = int(14*12/26) = 6.
			after := map[int]want{
				3: {3, 10, true, Inc},  // t_ir starts at P(t_ir)
				4: {4, 9, true, Dec},   // t_dl starts at P(t_dl)
				1: {1, 4, false, Inc},  // t_il keeps going
				2: {2, 17, false, Dec}, // t_dr keeps going
			}
			order := []int{finder, 7 - finder, 1, 2}
			for _, w := range order {
				expect(t, r, []want{after[w]})
			}
			// The rearranged partitions of Fig. 9(b), after the four
			// claims above.
			if got, wantP := partitions(s), []string{"5-8 1/4", "11-16 3/2"}; !slices.Equal(got, wantP) {
				t.Fatalf("partitions %q, want %q", got, wantP)
			}
			if st := s.Stats(); st.Starts != 6 {
				t.Errorf("Starts %d, want 6", st.Starts)
			}
			drainAll(r, []int{1, 2, 3, 4})
			r.check(t, []int{1, 2, 3, 4})
		})
	}
}

// partitions describes s's partitions as "lo-hi inc/dec" with the
// worker ids, "-" for none.
func partitions(s *Segment) []string {
	name := func(w *worker) string {
		if w == nil {
			return "-"
		}
		return fmt.Sprint(w.id)
	}
	var out []string
	for _, p := range s.parts {
		out = append(out, fmt.Sprintf("%d-%d %s/%s", p.lo, p.hi, name(p.inc), name(p.dec)))
	}
	return out
}

func TestTwoPaths(t *testing.T) {
	tests := []struct {
		name string
		n    int
		pick func(step int) int // which worker claims at each step
	}{
		{"alternate", 10, func(i int) int { return i % 2 }},
		{"one fast", 10, func(i int) int { return min(i%5, 1) }},
		{"one fragment", 1, func(i int) int { return i % 2 }},
		{"only worker 1", 7, func(int) int { return 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSegment(tt.n, Enhanced, []Worker{{ID: 0}, {ID: 1}})
			r := newRecorder(s, tt.n, Enhanced)
			next := [2]int{0, tt.n - 1}
			for i := 0; s.Unsent() > 0; i++ {
				w := tt.pick(i)
				c, ok := r.claim(w)
				if !ok {
					t.Fatalf("worker %d: Claim failed with %d unsent", w, s.Unsent())
				}
				if c.Index != next[w] || c.Dir != Dir(w) {
					t.Fatalf("worker %d: got %d %v, want %d %v", w, c.Index, c.Dir, next[w], Dir(w))
				}
				next[w] += Dir(w).step()
			}
			for w := range 2 {
				c, ok := r.claim(w)
				if ok {
					t.Fatalf("worker %d: claimed %d after the paths met", w, c.Index)
				}
				if sent := r.s.Stats().Claimed[w] > 0; c.End != sent {
					t.Errorf("worker %d: End = %v, want %v", w, c.End, sent)
				}
				if c, _ := r.claim(w); c.End {
					t.Errorf("worker %d: End issued twice", w)
				}
			}
			r.check(t, []int{0, 1})
		})
	}
}

func TestBasic(t *testing.T) {
	s := NewSegment(6, Basic, []Worker{{ID: 7}, {ID: 9}})
	r := newRecorder(s, 6, Basic)
	for i, w := range []int{7, 9, 9, 7, 42, 9} { // 42 joins late
		c, ok := r.claim(w)
		if !ok || c.Index != i || c.Start || c.End {
			t.Fatalf("claim %d by %d = %+v, %v; want index %d", i, w, c, ok, i)
		}
	}
	r.check(t, []int{7, 9, 42})
	if st := s.Stats(); st.Starts != 0 || st.Ends != 0 || st.Claimed[9] != 3 || st.Claimed[42] != 1 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		workers []Worker
		want    []string // partitions as "lo-hi inc/dec"
	}{
		{"equal pairs", 40, []Worker{{ID: 4}, {ID: 3}, {ID: 2}, {ID: 1}}, []string{"0-19 1/2", "20-39 3/4"}},
		{"by rate", 100, []Worker{{ID: 1, Rate: 1}, {ID: 2, Rate: 3}, {ID: 3, Rate: 4}, {ID: 4, Rate: 2}},
			[]string{"0-69 3/2", "70-99 4/1"}},
		{"odd", 50, []Worker{{ID: 1, Rate: 2}, {ID: 2, Rate: 2}, {ID: 3, Rate: 1}}, []string{"0-39 1/2", "40-49 3/-"}},
		{"unknown is mean", 60, []Worker{{ID: 1, Rate: 4}, {ID: 2}, {ID: 3}, {ID: 4, Rate: 2}},
			[]string{"0-34 1/2", "35-59 3/4"}},
		{"single", 5, []Worker{{ID: 8}}, []string{"0-4 8/-"}},
		{"none", 5, nil, []string{"0-4 -/-"}},
		{"fewer fragments than pairs", 1, []Worker{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}}, []string{"0-0 1/2", "1-0 3/4"}},
		{"duplicate ignored", 10, []Worker{{ID: 1}, {ID: 1, Rate: 9}, {ID: 2}}, []string{"0-9 1/2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSegment(tt.n, Enhanced, tt.workers)
			if got := partitions(s); !slices.Equal(got, tt.want) {
				t.Errorf("partitions %q, want %q", got, tt.want)
			}
		})
	}
}

// TestHelpers covers free workers that are not a pair: an odd path, a
// partner that died, and a path that joins late.
func TestHelpers(t *testing.T) {
	t.Run("odd path joins the pair from the middle", func(t *testing.T) {
		// Pair 1/2 on [0,39], path 3 alone on [40,49].
		s := NewSegment(50, Enhanced, []Worker{{ID: 1, Rate: 2}, {ID: 2, Rate: 2}, {ID: 3, Rate: 1}})
		r := newRecorder(s, 50, Enhanced)
		for range 10 {
			r.claim(3)
		}
		r.claim(1)
		r.claim(2)
		// 3 is free alone: it splits [1,38] with contributions
		// C(t_il)=1 + C(3)=10 against C(t_dr)=1: U(left) = int(38*11/12) = 34.
		expect(t, r, []want{{3, 34, true, Dec}, {1, 1, false, Inc}, {2, 38, false, Dec}})
		drainAll(r, []int{1, 2, 3})
		r.check(t, []int{1, 2, 3})
	})
	t.Run("free pair fills the lone path's missing direction", func(t *testing.T) {
		s := NewSegment(50, Enhanced, []Worker{{ID: 1, Rate: 2}, {ID: 2, Rate: 2}, {ID: 3, Rate: 1}})
		r := newRecorder(s, 50, Enhanced)
		for range 20 {
			r.claim(1)
			r.claim(2)
		}
		r.claim(3) // 40; [41,49] left, no Dec worker
		// 1 finds [0,39] done; both 1 and 2 are free. The busier
		// (tie on C and rate: lower id) takes Dec from the far end,
		// the other splits the now complete pair alone.
		expect(t, r, []want{{1, 49, true, Dec}})
		c, ok := r.claim(2)
		if !ok || !c.Start || c.Dir != Dec {
			t.Fatalf("second free worker: %+v %v, want a Start Dec", c, ok)
		}
		drainAll(r, []int{1, 2, 3})
		r.check(t, []int{1, 2, 3})
	})
	t.Run("partner dies", func(t *testing.T) {
		s := NewSegment(40, Enhanced, []Worker{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}})
		r := newRecorder(s, 40, Enhanced)
		r.claim(1)
		r.claim(2) // 19
		s.Remove(2)
		if _, ok := r.claim(2); ok {
			t.Fatal("removed worker claimed")
		}
		// 1 keeps sweeping alone.
		for i := range 10 {
			r.claim(3)
			expect(t, r, []want{{4, 39 - i, i == 0, Dec}})
		}
		// 3 and 4 are free: the busier (tie: lower id) fills the gap,
		// the other splits what is left alone, as t_dl.
		expect(t, r, []want{{3, 18, true, Dec}, {1, 1, false, Inc}})
		c, ok := r.claim(4)
		if !ok || c.Index < 2 || c.Index > 17 || !c.Start || c.Dir != Dec {
			t.Fatalf("second helper: %+v %v", c, ok)
		}
		drainAll(r, []int{1, 3, 4})
		r.check(t, []int{1, 2, 3, 4})
	})
	t.Run("late joiner", func(t *testing.T) {
		s := NewSegment(30, Enhanced, []Worker{{ID: 1}, {ID: 2}})
		r := newRecorder(s, 30, Enhanced)
		r.claim(1)
		r.claim(2)
		// 9 was not planned: it splits [1,28] alone.
		c, ok := r.claim(9)
		if !ok || !c.Start || c.Dir != Dec {
			t.Fatalf("joiner: %+v %v", c, ok)
		}
		drainAll(r, []int{1, 2, 9})
		r.check(t, []int{1, 2, 9})
	})
	t.Run("everyone dies but one", func(t *testing.T) {
		s := NewSegment(100, Enhanced, []Worker{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}, {ID: 5}})
		r := newRecorder(s, 100, Enhanced)
		for w := 1; w <= 5; w++ {
			r.claim(w)
		}
		for w := 1; w <= 4; w++ {
			s.Remove(w)
		}
		drainAll(r, []int{5})
		r.check(t, []int{1, 2, 3, 4, 5})
	})
	t.Run("rejoin after remove", func(t *testing.T) {
		s := NewSegment(20, Enhanced, []Worker{{ID: 1}, {ID: 2}})
		r := newRecorder(s, 20, Enhanced)
		r.claim(1)
		s.Remove(1)
		if _, ok := r.claim(1); ok {
			t.Fatal("removed worker claimed before Join")
		}
		s.Join(Worker{ID: 1, Rate: 5})
		// 1 is free and the partition lacks an Inc worker: it rejoins
		// at the left end with a fresh Start.
		expect(t, r, []want{{1, 1, true, Inc}})
		drainAll(r, []int{1, 2})
		r.check(t, []int{1, 2})
	})
	t.Run("end then more work", func(t *testing.T) {
		// 1 and 2 finish their partition and get End while 3 and 4
		// are busy; then 3 dies and its fragments go to 1.
		s := NewSegment(20, Enhanced, []Worker{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}})
		r := newRecorder(s, 20, Enhanced)
		r.claim(3)
		r.claim(4) // partition 2 is [10,19]: 10 and 19 gone
		for range 5 {
			r.claim(1)
			r.claim(2)
		}
		// [11,18] has 8 unsent: 1 and 2 split it with 3 and 4.
		r.claim(1)
		r.claim(2)
		drainAll(r, []int{1, 2, 3, 4})
		r.check(t, []int{1, 2, 3, 4})

		s = NewSegment(4, Enhanced, []Worker{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}})
		r = newRecorder(s, 4, Enhanced)
		r.claim(1)
		r.claim(2)
		r.claim(3) // 2; 3 is left to sweep up from 3
		for _, w := range []int{1, 2} {
			if c, ok := r.claim(w); ok || !c.End {
				t.Fatalf("worker %d: %+v %v, want End", w, c, ok)
			}
		}
		s.Remove(3)
		if _, ok := r.claim(1); ok {
			t.Fatal("worker 1 took the last fragment from worker 4")
		}
		s.Remove(4) // index 3 is orphaned
		expect(t, r, []want{{1, 3, true, Inc}})
		if c, ok := r.claim(1); ok || !c.End {
			t.Fatalf("worker 1: %+v %v, want a second End", c, ok)
		}
		r.check(t, []int{1, 2, 3, 4})
	})
}

// TestProperties runs random segments with random speeds, removals and
// late joiners and checks exactly-once delivery and, for Enhanced, that
// receivers reconstruct every index from Start messages alone.
func TestProperties(t *testing.T) {
	runs := 150
	if testing.Short() {
		runs = 30
	}
	for _, mode := range []Mode{Enhanced, Basic} {
		t.Run(mode.String(), func(t *testing.T) {
			for seed := range uint64(runs) {
				rng := rand.New(rand.NewPCG(seed, uint64(mode)))
				n := 1 + rng.IntN(5000)
				k := 1 + rng.IntN(6)
				known := rng.IntN(2) == 0
				var ws []Worker
				var speed []float64
				for i := range k + rng.IntN(2) { // maybe one late joiner
					v := 0.05 + rng.Float64()
					w := Worker{ID: 10 + i}
					if known {
						w.Rate = v * 1e6
					}
					ws = append(ws, w)
					speed = append(speed, v)
				}
				remove := map[int]bool{}
				for _, w := range ws[:k-1] { // never all of the plan
					if rng.IntN(3) == 0 {
						remove[w.ID] = true
					}
				}
				name := fmt.Sprintf("seed=%d/n=%d/k=%d/joiners=%d/removed=%d", seed, n, k, len(ws)-k, len(remove))
				t.Run(name, func(t *testing.T) {
					r := randomRun(t, rng, n, mode, ws, k, speed, remove)
					ids := make([]int, len(ws))
					for i, w := range ws {
						ids[i] = w.ID
					}
					r.check(t, ids)
				})
			}
		})
	}
}

// TestConcurrent has k goroutines claim from one segment while another
// removes a path; the race detector watches, the recorder checks.
func TestConcurrent(t *testing.T) {
	for _, mode := range []Mode{Enhanced, Basic} {
		for _, k := range []int{2, 3, 6} {
			t.Run(fmt.Sprintf("%v/paths=%d", mode, k), func(t *testing.T) {
				const n = 4000
				ws := make([]Worker, k)
				for i := range ws {
					ws[i] = Worker{ID: i}
				}
				s := NewSegment(n, mode, ws)
				streams := make([][]event, k)
				var removed atomic.Bool
				var wg sync.WaitGroup
				for i := range k {
					wg.Go(func() {
						for {
							c, ok := s.Claim(i)
							if !ok {
								if c.End {
									streams[i] = append(streams[i], event{kind: 'e'})
								}
								if s.Unsent() == 0 || (i == 0 && removed.Load()) {
									return
								}
								runtime.Gosched()
								continue
							}
							if c.Start {
								streams[i] = append(streams[i], event{kind: 's', index: c.Index, dir: c.Dir})
							}
							streams[i] = append(streams[i], event{kind: 'f', index: c.Index})
						}
					})
				}
				wg.Go(func() {
					for s.Unsent() > n/2 {
						runtime.Gosched()
					}
					removed.Store(true)
					s.Remove(0)
				})
				wg.Wait()
				r := newRecorder(s, n, mode)
				for i, evs := range streams {
					r.streams[i] = evs
					for _, e := range evs {
						if e.kind != 'f' {
							continue
						}
						if o := r.owner[e.index]; o >= 0 {
							t.Fatalf("index %d claimed by %d and %d", e.index, o, i)
						}
						r.owner[e.index] = i
					}
				}
				r.check(t, slices.Collect(maps.Keys(s.Stats().Claimed)))
			})
		}
	}
}

// TestLoadBalance checks that faster paths send proportionally more and
// that all paths finish at about the same time.
func TestLoadBalance(t *testing.T) {
	tests := []struct {
		name  string
		speed []float64
	}{
		{"2 paths 4:1", []float64{4, 1}},
		{"2 paths 1:4", []float64{1, 4}},
		{"3 paths 3:2:1", []float64{3, 2, 1}},
		{"3 paths 1:1:5", []float64{1, 1, 5}},
		{"4 paths 4:3:2:1", []float64{4, 3, 2, 1}},
		{"4 paths 1:8:1:1", []float64{1, 8, 1, 1}},
		{"4 paths equal", []float64{1, 1, 1, 1}},
		{"6 paths", []float64{1, 2, 3, 4, 5, 6}},
	}
	const n = 1000
	for _, mode := range []Mode{Enhanced, Basic} {
		for _, tt := range tests {
			for _, known := range []bool{false, true} {
				rates := make([]float64, len(tt.speed))
				if known {
					rates = tt.speed
				}
				t.Run(fmt.Sprintf("%v/%s/rates known=%v", mode, tt.name, known), func(t *testing.T) {
					res := timedRun(t, n, mode, rates, fixedSpeed(tt.speed))
					var sum float64
					for _, v := range tt.speed {
						sum += v
					}
					slowest := 1 / slices.Min(tt.speed)
					lo, hi := slices.Min(res.finish), slices.Max(res.finish)
					for i, v := range tt.speed {
						share := float64(res.count[i]) / n
						if math.Abs(share-v/sum) > 0.02 {
							t.Errorf("path %d (speed %g): %.1f%% of fragments, want %.1f%%", i, v, 100*share, 100*v/sum)
						}
					}
					if hi-lo > 2*slowest+1e-9 {
						t.Errorf("finish times %v: spread %.2f, more than two fragment times (%.2f) of the slowest path", res.finish, hi-lo, 2*slowest)
					}
					t.Logf("counts %v finish %.1f..%.1f (ideal %.1f) starts %d", res.count, lo, hi, n/sum, res.stats.Starts)
				})
			}
		}
	}
}

// TestControlMessages counts Start messages for the paper's setting of
// sec. 5.2 (4 paths, 1024 fragments of 2 KB) over 1000 runs, with idle
// and with randomly loaded networks, and compares with eq. 10.
func TestControlMessages(t *testing.T) {
	const k, n = 4, 1024
	runs := 1000
	if testing.Short() {
		runs = 100
	}
	bound := eq10(k, n)
	tests := []struct {
		name  string
		known bool // Rates given to NewSegment (the initial speeds)
		speed func(rng *rand.Rand) ([]float64, func(int, float64) float64)
	}{
		{"equal", false, func(*rand.Rand) ([]float64, func(int, float64) float64) {
			v := []float64{1, 1, 1, 1}
			return v, fixedSpeed(v)
		}},
		{"equal with 5% jitter", false, func(rng *rand.Rand) ([]float64, func(int, float64) float64) {
			return []float64{1, 1, 1, 1}, func(int, float64) float64 { return 0.95 + 0.1*rng.Float64() }
		}},
		{"random load, rates unknown", false, func(rng *rand.Rand) ([]float64, func(int, float64) float64) {
			return loadedSpeed(rng, k, 0.1, 1.0/64)
		}},
		{"random load, initial rates known", true, func(rng *rand.Rand) ([]float64, func(int, float64) float64) {
			return loadedSpeed(rng, k, 0.1, 1.0/64)
		}},
		{"random fixed speeds, rates unknown", false, func(rng *rand.Rand) ([]float64, func(int, float64) float64) {
			return loadedSpeed(rng, k, 0.1, 0)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, 2))
			var sum, sumSq float64
			lo, hi := math.MaxInt, 0
			for range runs {
				initial, frag := tt.speed(rng)
				rates := make([]float64, k)
				if tt.known {
					rates = initial
				}
				res := timedRun(t, n, Enhanced, rates, frag)
				st := res.stats.Starts
				sum += float64(st)
				sumSq += float64(st * st)
				lo, hi = min(lo, st), max(hi, st)
				if res.stats.Ends != k {
					t.Fatalf("%d Ends, want %d", res.stats.Ends, k)
				}
			}
			mean := sum / float64(runs)
			variance := sumSq/float64(runs) - mean*mean
			t.Logf("k=%d n=%d runs=%d: Starts mean %.2f variance %.2f range %d..%d; eq. 10 gives %.1f; Basic sends %d headers",
				k, n, runs, mean, variance, lo, hi, bound, n)
			if mean < k || mean >= 3*bound {
				t.Errorf("mean Starts %.2f outside [%d, 3*eq10 = %.1f)", mean, k, 3*bound)
			}
		})
	}
}

func BenchmarkClaim(b *testing.B) {
	const n = 1024
	for _, mode := range []Mode{Enhanced, Basic} {
		for _, k := range []int{2, 4, 6} {
			b.Run(fmt.Sprintf("mode=%v/paths=%d", mode, k), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 1))
				ws := make([]Worker, k)
				for i := range ws {
					ws[i] = Worker{ID: i}
				}
				now := make([]float64, k)
				speed := make([]float64, k)
				done := make([]bool, k)
				var starts, msgs int
				b.ReportAllocs()
				for b.Loop() {
					s := NewSegment(n, mode, ws)
					for i := range k {
						now[i], done[i], speed[i] = 0, false, 0.1+0.9*rng.Float64()
					}
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
						if _, ok := s.Claim(i); !ok {
							done[i] = true
							continue
						}
						if rng.IntN(64) == 0 {
							speed[i] = 0.1 + 0.9*rng.Float64()
						}
						now[i] += 1 / speed[i]
					}
					starts += s.Stats().Starts
					msgs++
				}
				b.ReportMetric(float64(starts)/float64(msgs), "starts/msg")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs*n), "ns/frag")
			})
		}
	}
}
