package transport

import (
	"testing"
	"time"
)

// TestIdlePathsProbedRarely checks that an idle session's paths are
// probed only when they fall silent, yet stay up with a round trip known.
// HeartbeatInterval 20 ms and PathTimeout 400 ms probe a silent path after
// 100 ms: over a second idle each side sends about ten probes a path
// where a probe every tick would be fifty. Checked by hand: with
// heartbeat probing every tick, the bound below fails (48-50 probes a
// path).
func TestIdlePathsProbedRarely(t *testing.T) {
	const tick = 20 * time.Millisecond
	c, s := pair(t, 2, func(c *Config) {
		c.HeartbeatInterval = tick
		c.PathTimeout = 400 * time.Millisecond
	})
	before := map[*Session][]PathStats{c: c.Stats(), s: s.Stats()}
	start := time.Now()
	time.Sleep(time.Second)
	elapsed := time.Since(start)
	for side, sess := range map[string]*Session{"client": c, "server": s} {
		for i, ps := range sess.Stats() {
			if ps.State != "up" || ps.Failovers != 0 {
				t.Errorf("%s path %d: %s after %d failovers; an idle path must stay up", side, i, ps.State, ps.Failovers)
			}
			if ps.RTT <= 0 {
				t.Errorf("%s path %d: no round trip measured", side, i)
			}
			probes := ps.Probes - before[sess][i].Probes
			// At most half a probe a tick, whatever the machine's load:
			// a late tick only lowers both counts.
			if limit := int64(elapsed / tick / 2); probes > limit {
				t.Errorf("%s path %d: %d probes in %v idle, want at most %d (one a tick would be %d)",
					side, i, probes, elapsed.Round(time.Millisecond), limit, elapsed/tick)
			}
			t.Logf("%s path %d: %d probes in %v idle", side, i, probes, elapsed.Round(time.Millisecond))
		}
	}
}
