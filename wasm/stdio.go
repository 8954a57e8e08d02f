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

// errOutputMemory is what a write returns to the module (as EIO) when
// stdout's buffer and linear memory together would pass Limits.Memory.
var errOutputMemory = errors.New("wasm: stdout and linear memory over the memory limit")

// output collects stdout up to limit bytes. A write past the limit keeps
// what fits, marks the run over and cancels it.
//
// The buffer is memory the unit makes the host hold, so it counts toward
// Limits.Memory with the linear memory (mem): a write that would make
// the buffer's capacity (less outputFree) and the linear memory pass
// memLimit fails, marks memOver and cancels the run; linearMemory refuses
// to grow past what the buffer leaves.
type output struct {
	buf      []byte
	limit    int64
	over     bool
	memOver  bool
	memLimit uint64        // bytes of Limits.Memory left after tables; 0 = not counted
	mem      *linearMemory // the run's linear memory, or nil
	guard    *hostGuard
	cancel   context.CancelFunc
}

// Write implements io.Writer for the module's stdout.
func (o *output) Write(p []byte) (int, error) {
	o.guard.check("fd_write to stdout")
	if o.over || o.memOver {
		return 0, errOutputCap
	}
	room := o.limit - int64(len(o.buf))
	n := len(p)
	if int64(n) > room {
		n = int(room)
		o.over = true
	}
	if len(o.buf)+n > cap(o.buf) {
		if !o.grow(n) {
			o.over = false
			o.memOver = true
			o.cancel()
			return 0, errOutputMemory
		}
	}
	// Copy in chunks, checking the run's context between them.
	for i := 0; i < n; i += hostChunk {
		if i > 0 {
			o.guard.check("fd_write to stdout")
		}
		o.buf = append(o.buf, p[i:min(n, i+hostChunk)]...)
	}
	if o.over {
		o.cancel()
		return n, errOutputCap
	}
	return n, nil
}

// outputFree is how much of stdout's buffer does not count toward
// Limits.Memory, as stderr's kept tail does not: a module that filled its
// memory can still print a small result.
const outputFree = 64 << 10

// counted returns the bytes of stdout's buffer that count toward
// Limits.Memory: its capacity beyond outputFree.
func (o *output) counted() uint64 {
	return uint64(max(cap(o.buf)-outputFree, 0))
}

// memUsed returns the bytes of linear memory the run holds.
func (o *output) memUsed() uint64 {
	if o.mem == nil {
		return 0
	}
	return uint64(len(o.mem.buf))
}

// grow makes room for n more bytes: it starts from a recycled buffer, or
// doubles, starting at minOutput, and never reserves past the limit, nor
// past what Limits.Memory leaves beside the linear memory. It returns
// false, and grows nothing, when n more bytes do not fit in the latter.
func (o *output) grow(n int) bool {
	need := int64(len(o.buf) + n)
	room := int64(-1) // what the memory limit leaves; -1 = not counted
	if o.memLimit > 0 {
		room = int64(o.memLimit) + outputFree - int64(o.memUsed())
		if need > room {
			return false
		}
	}
	if o.buf == nil {
		select {
		case b := <-recycled:
			if int64(cap(b)) >= need && (room < 0 || int64(cap(b)) <= room) {
				o.buf = b[:0]
				return true
			}
		default:
		}
	}
	c := max(need, 2*int64(cap(o.buf)), minOutput)
	c = min(c, max(o.limit, need))
	if room >= 0 {
		c = min(c, room)
	}
	buf := make([]byte, len(o.buf), c)
	copy(buf, o.buf)
	o.buf = buf
	return true
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
	guard *hostGuard
}

// Write implements io.Writer for the module's stderr; it never fails,
// but stops the run once its context is done (hostGuard): it looks at
// hostChunk bytes between checks, and copies at most tailSize.
func (t *tail) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i += hostChunk {
		t.guard.check("fd_write to stderr")
		t.crash.write(p[i:min(len(p), i+hostChunk)])
	}
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
