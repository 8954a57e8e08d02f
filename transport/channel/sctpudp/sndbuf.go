package sctpudp

import (
	"sync"
	"time"
)

// The UDP socket's send buffer is pion's only backpressure from a slow
// link (Config.SendBuffer), and no fixed size fits every rate: one that
// covers a scheduling gap of the sender at 100 Mbit/s (128 KiB) overflows
// a 25 ms shaper queue at 50 Mbit/s, and 64 KiB, which fits 50 Mbit/s,
// leaves a 100 Mbit/s link idle whenever the sender waits for a core
// (docs/sctp.md, "sctp-udp bulk on tbf links"). TCP avoids this by
// refilling the device queue from softirq; over UDP the process must run.
// So by default a dialed association's socket holds about autoSendTime of
// the rate it has been sending at: 64 KiB up to about 50 Mbit/s, 125 KB at
// 100 Mbit/s, at most autoSendMax.
const (
	autoSendMin    = 64 << 10
	autoSendMax    = 1 << 20
	autoSendTime   = 10 * time.Millisecond
	autoSendWindow = 50 * time.Millisecond
)

// autoSendSize is the send buffer for a send rate in bytes/s.
func autoSendSize(rate float64) int {
	return min(max(int(rate*autoSendTime.Seconds()), autoSendMin), autoSendMax)
}

// sendTuner sizes a socket's send buffer from the rate written to it,
// measured over windows of at least autoSendWindow.
type sendTuner struct {
	set func(int) error // SO_SNDBUF

	mu    sync.Mutex
	start time.Time // of the current window; zero before the first write
	bytes int64     // written in the current window
	cur   int       // the size in force
}

func newSendTuner(set func(int) error) *sendTuner {
	t := &sendTuner{set: set, cur: autoSendMin}
	_ = set(autoSendMin)
	return t
}

// wrote records n bytes written at now, and resizes the buffer at the end
// of a window when the rate asks for a size more than a quarter away from
// the one in force. A window that spans idle time reads as a low rate, so
// the buffer shrinks back while nothing is sent.
func (t *sendTuner) wrote(n int, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.start.IsZero() {
		t.start = now
	}
	t.bytes += int64(n)
	dt := now.Sub(t.start)
	if dt < autoSendWindow {
		return
	}
	want := autoSendSize(float64(t.bytes) / dt.Seconds())
	t.start, t.bytes = now, 0
	if want > t.cur*5/4 || want < t.cur*3/4 {
		if t.set(want) == nil {
			t.cur = want
		}
	}
}

// size returns the send buffer in force, as asked of the kernel.
func (t *sendTuner) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur
}
