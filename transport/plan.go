package transport

import (
	"math"
	"time"
)

// How a segment travels: whole on one path, or striped over every live
// path in fragments of a size that suits the paths' rates.
//
// A striped segment's fragments are at most as large as the slowest live
// path sends in about fragTime (the last fragment a slow path holds is
// what a message waits for, so the slower the path, the finer the split),
// and small enough that each path takes about fragsPerPath of them (so
// that the faster paths can take the slower ones' share near the end).
const (
	fragTime     = 2 * time.Millisecond
	fragsPerPath = 4
	// minFragment is the floor of the rate rule.
	minFragment = 4 << 10
	// minShare is the least each path must get of a striped segment (a
	// smaller share saves less than its frames and wake-ups cost, and on
	// shaped links a few KB leave in one burst anyway), and the floor of
	// the share rule: a segment of a few shares goes as one fragment per
	// path, not fragsPerPath smaller ones (an 8 KB message over two 100
	// Mbit/s paths: 0.45-0.48 ms round trips in 4 KiB fragments, 0.57-0.78
	// ms in 1 KiB ones).
	minShare = 4 << 10
	// maxFragment bounds fragments when Config.FragmentSize is zero;
	// defaultFragment applies while no live path's rate is known.
	maxFragment     = 1 << 20
	defaultFragment = 32 << 10
	// stripeCost is what striping a segment costs over sending it whole:
	// the frames that steer it, a wake-up of every path's writer and
	// reader, and the wait for the last of them. A segment is striped when
	// that delivers it sooner by more than this. Measured on loopback,
	// where striping saves nothing (BenchmarkPingPong/impl=braid/size=8KiB, whole
	// against striped=4KiB), the cost is about 15 us a message; this is
	// that with room for a loaded host, so that an 8 KB message stripes
	// over two 100 Mbit/s paths (saving about 300 us) but not over fast
	// ones.
	stripeCost = 100 * time.Microsecond
)

// fragBound returns the largest fragment for a segment striped now: the
// slowest live path's rate x fragTime, within [minFragment, the cap] (the
// cap is Config.FragmentSize, or maxFragment), or defaultFragment while no
// live path's rate is known. Caller holds s.mu.
func (s *Session) fragBound() int {
	limit := s.cfg.FragmentSize
	if limit == 0 {
		limit = maxFragment
	}
	floor := min(limit, minFragment)
	f, known := limit, false
	for _, p := range s.paths {
		if p == nil || p.conn == nil {
			continue
		}
		if r := p.speed(); r > 0 {
			f = min(f, max(int(r*fragTime.Seconds()), floor))
			known = true
		}
	}
	if !known {
		f = min(limit, defaultFragment)
	}
	return f
}

// plan decides how a segment of n bytes travels: striped in fragments of
// the size it returns, or whole (0). Caller holds s.mu.
func (s *Session) plan(n int) int {
	if s.cfg.Stripe == StripeOff {
		return 0
	}
	bound := s.fragBound()
	if s.cfg.StripeThreshold > 0 {
		if n <= s.cfg.StripeThreshold {
			return 0
		}
		return bound
	}
	live := s.livePaths()
	if len(live) < 2 {
		// One path: cut only so that a message of another stream can
		// overtake within about one fragment.
		if n <= 2*bound {
			return 0
		}
		return bound
	}
	if !stripeSaves(n, live) {
		return 0
	}
	k := fragsPerPath * len(live)
	frag := ((n+k-1)/k + 511) &^ 511
	return min(bound, max(frag, minShare))
}

// stripeSaves reports whether a segment of n bytes striped over the live
// paths would arrive sooner, by more than stripeCost, than whole on the
// path that delivers it first. Each path's time is its unacknowledged
// backlog plus the segment, over its rate, plus half its smallest recent round trip (the heartbeats' round
// trip without the queue of data ahead of them);
// striped, the paths share the backlogs and the segment at the sum of their
// rates, and the last fragment waits for the longest round trip. A path
// whose rate is not known yet counts at the mean of the others; with no
// rate known, segments above twice defaultFragment are striped.
// Caller holds s.mu.
func stripeSaves(n int, live []*path) bool {
	if n < len(live)*minShare {
		return false
	}
	var sum float64
	known := 0
	for _, p := range live {
		if r := p.planRate(); r > 0 {
			sum += r
			known++
		}
	}
	if known == 0 {
		return n > 2*defaultFragment
	}
	mean := sum / float64(known)
	sum += mean * float64(len(live)-known)
	whole := math.Inf(1)
	var backlog float64
	var rtt time.Duration
	for _, p := range live {
		r := p.planRate()
		if r <= 0 {
			r = mean
		}
		whole = min(whole, float64(p.unackedBytes+int64(n))/r+p.minRTT.Seconds()/2)
		backlog += float64(p.unackedBytes)
		rtt = max(rtt, p.minRTT)
	}
	striped := (backlog+float64(n))/sum + rtt.Seconds()/2
	return whole-striped > stripeCost.Seconds()
}
