package wasm

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"
)

// errOutputCap is what a write past Limits.Output returns to the module
// (as EIO) before its run is stopped.
var errOutputCap = errors.New("wasm: stdout over the output limit")

// minOutput is the first allocation of a stdout buffer.
const minOutput = 512

// output collects stdout up to limit bytes. A write past the limit keeps
// what fits, marks the run over and cancels it.
type output struct {
	buf    []byte
	limit  int64
	over   bool
	cancel context.CancelFunc
}

// Write implements io.Writer for the module's stdout.
func (o *output) Write(p []byte) (int, error) {
	if o.over {
		return 0, errOutputCap
	}
	room := o.limit - int64(len(o.buf))
	n := len(p)
	if int64(n) > room {
		n = int(room)
		o.over = true
	}
	if len(o.buf)+n > cap(o.buf) {
		o.grow(n)
	}
	o.buf = append(o.buf, p[:n]...)
	if o.over {
		o.cancel()
		return n, errOutputCap
	}
	return n, nil
}

// grow makes room for n more bytes: it starts from a recycled buffer, or
// doubles, starting at minOutput, and never reserves past the limit.
func (o *output) grow(n int) {
	need := int64(len(o.buf) + n)
	if o.buf == nil {
		select {
		case b := <-recycled:
			if int64(cap(b)) >= need {
				o.buf = b[:0]
				return
			}
		default:
		}
	}
	c := max(need, 2*int64(cap(o.buf)), minOutput)
	c = min(c, max(o.limit, need))
	buf := make([]byte, len(o.buf), c)
	copy(buf, o.buf)
	o.buf = buf
}

// Recycling outputs: at most recycleCount buffers of at most recycleMax
// bytes each wait for a run.
const (
	recycleCount = 32
	recycleMax   = 1 << 20
)

// recycled holds outputs handed back with Recycle.
var recycled = make(chan []byte, recycleCount)

// Recycle hands back an output that Module.Run returned, once the caller
// is done with it (its bytes are then overwritten by a later run), to
// save an allocation a run. Recycling is optional; an output of more than
// 1 MiB is left to the garbage collector.
func Recycle(out []byte) {
	if cap(out) == 0 || cap(out) > recycleMax {
		return
	}
	select {
	case recycled <- out[:0]:
	default:
	}
}

// tailSize is how much of stderr a run keeps: its last bytes.
const tailSize = 2 << 10

// tail keeps the last tailSize bytes written to it in buf, which holds at
// most 2*tailSize bytes: it slides its tail down when full.
type tail struct {
	buf   []byte
	cut   bool // bytes were dropped before buf
	crash goCrash
}

// Write implements io.Writer for the module's stderr; it never fails.
func (t *tail) Write(p []byte) (int, error) {
	t.crash.write(p)
	n := len(p)
	if n >= tailSize {
		if t.buf == nil {
			t.buf = make([]byte, 0, 2*tailSize)
		}
		t.buf = append(t.buf[:0], p[n-tailSize:]...)
		t.cut = true
		return n, nil
	}
	if t.buf == nil {
		t.buf = make([]byte, 0, 2*tailSize)
	}
	if len(t.buf)+n > cap(t.buf) {
		keep := tailSize - n // keep + n == tailSize <= cap
		t.buf = t.buf[:copy(t.buf, t.buf[len(t.buf)-keep:])]
		t.cut = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the kept tail as valid UTF-8; for a Go program that
// crashed, its crash message without the goroutine stacks (goCrash).
func (t *tail) String() string {
	if s, ok := t.crash.summary(); ok {
		return s
	}
	if len(t.buf) == 0 {
		return ""
	}
	b := t.buf[max(0, len(t.buf)-tailSize):]
	if t.cut || len(b) < len(t.buf) {
		// Drop the continuation bytes of a rune cut in two.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// reset empties t for the next run, keeping its buffer.
func (t *tail) reset() {
	t.buf = t.buf[:0]
	t.cut = false
	t.crash.reset()
}
