package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
)

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress draws a transfer's progress: bytes, percent, MB/s, per-path
// Mbit/s and ETA. On a terminal it redraws one line; elsewhere it prints a
// line per second. Bytes count as done when the paths have put them on the
// wire, not when they were queued (a stream queues up to its flow-control
// window ahead).
type progress struct {
	w     io.Writer
	tty   bool
	total atomic.Int64 // 0: unknown
	done  atomic.Int64
	stats func() []transport.PathStats

	stopCh chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// startProgress starts drawing; stats may be nil.
func startProgress(w io.Writer, tty bool, total int64, stats func() []transport.PathStats) *progress {
	p := &progress{w: w, tty: tty, stats: stats, stopCh: make(chan struct{})}
	p.total.Store(total)
	p.wg.Go(p.run)
	return p
}

// add counts n more bytes done.
func (p *progress) add(n int64) { p.done.Add(n) }

// grow adds n bytes to the total: a receiver learns of files as they come.
func (p *progress) grow(n int64) { p.total.Add(n) }

// stop draws the final state and ends the line.
func (p *progress) stop() {
	p.once.Do(func() { close(p.stopCh) })
	p.wg.Wait()
}

func (p *progress) run() {
	every := time.Second
	if p.tty {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	start := time.Now()
	last := start
	var prevPaths []int64
	var base int64 // wire bytes sent before the transfer
	if p.stats != nil {
		prevPaths = pathSent(p.stats())
		for _, n := range prevPaths {
			base += n
		}
	}
	var pathRates []float64
	for {
		var now time.Time
		final := false
		select {
		case now = <-t.C:
		case <-p.stopCh:
			now, final = time.Now(), true
		}
		done := p.done.Load()
		if p.stats != nil {
			cur := pathSent(p.stats())
			wire := -base
			for _, n := range cur {
				wire += n
			}
			if !final {
				done = min(done, wire)
			}
			// Per-path rates over the last second or so.
			if dt := now.Sub(last).Seconds(); dt >= 0.9 || pathRates == nil {
				pathRates = pathRates[:0]
				for i, c := range cur {
					var q int64
					if i < len(prevPaths) {
						q = prevPaths[i]
					}
					pathRates = append(pathRates, ctl.Mbps(c-q, dt))
				}
				prevPaths, last = cur, now
			}
		}
		p.draw(done, now.Sub(start), pathRates, final)
		if final {
			return
		}
	}
}

func pathSent(ps []transport.PathStats) []int64 {
	out := make([]int64, len(ps))
	for i, s := range ps {
		out[i] = s.BytesSent
	}
	return out
}

func (p *progress) draw(done int64, elapsed time.Duration, pathRates []float64, final bool) {
	total := p.total.Load()
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	rate := 0.0 // bytes/s
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	eta := "--:--"
	if rate > 0 && done < total {
		eta = fmtClock(time.Duration(float64(total-done) / rate * float64(time.Second)))
	} else if done >= total {
		eta = fmtClock(elapsed)
	}
	var b strings.Builder
	if total > 0 {
		fmt.Fprintf(&b, "%10s / %-10s %3.0f%%  %7.1f MB/s", formatBytes(done), formatBytes(total), pct, rate/1e6)
	} else {
		fmt.Fprintf(&b, "%10s  %7.1f MB/s", formatBytes(done), rate/1e6) // the size is not known
	}
	if len(pathRates) > 0 {
		b.WriteString("  [")
		for i, r := range pathRates {
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "p%d %.0f", i, r)
		}
		b.WriteString(" Mbit/s]")
	}
	switch {
	case total <= 0 && !final:
	case done >= total || final:
		fmt.Fprintf(&b, "  in %s", fmtClock(elapsed))
	default:
		fmt.Fprintf(&b, "  ETA %s", eta)
	}
	switch {
	case p.tty && final:
		fmt.Fprintf(p.w, "\r%s\033[K\n", b.String())
	case p.tty:
		fmt.Fprintf(p.w, "\r%s\033[K", b.String())
	default:
		fmt.Fprintln(p.w, b.String())
	}
}

func fmtClock(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// progressReader counts what is read through it into a progress.
type progressReader struct {
	r io.Reader
	p *progress
}

func (r progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.add(int64(n))
	return n, err
}

// progressWriter counts what is written through it into a progress, which
// may be nil.
type progressWriter struct {
	w io.Writer
	p *progress
}

// SetSize sets the total once the size is known (client.Get calls it).
func (w progressWriter) SetSize(n int64) {
	if w.p != nil && w.p.total.Load() == 0 {
		w.p.total.Store(n)
	}
}

func (w progressWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	if w.p != nil {
		w.p.add(int64(n))
	}
	return n, err
}
