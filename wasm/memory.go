package wasm

import (
	"runtime"

	"github.com/tetratelabs/wazero/experimental"
)

// keepMemory is the largest linear memory kept resident for the next run;
// a larger one is handed back to the kernel (or the garbage collector) so
// an idle Engine holds little.
const keepMemory = 4 << 20

// linearMemory backs the linear memory of one run and refuses to grow it
// past its limit. It implements experimental.MemoryAllocator and
// experimental.LinearMemory; one run uses it from one goroutine. Its zero
// value is ready for reset.
//
// Where the platform allows (Linux, see memory_linux.go), the memory is a
// region of address space reserved once, MaxMemory bytes with no access,
// and made readable and writable as the module grows: growing never moves
// or copies the memory, so the host holds at most the pages the module
// touched, never an old and a new buffer at once. Elsewhere, or if the
// reservation fails, it is a Go slice that doubles (a grow copies, so the
// host holds up to 1.5 times the limit for a moment).
//
// Between runs the memory is all zero: a small one is cleared and stays
// resident, so the next run's memory needs no allocation nor page faults.
type linearMemory struct {
	reg     *region // the reserved address space, or nil for a Go slice
	noMap   bool    // reserving failed once: use Go slices
	buf     []byte  // the memory, as wazero sees it
	limit   uint64  // bytes this run may use, a multiple of pageSize
	max     uint64  // min(limit, the module's declared maximum)
	refused bool    // a grow past max was refused
	// out is the run's stdout, whose buffer counts toward limit too
	// (output); nil = not counted.
	out *output
}

// region is address space reserved for linear memory: mem, of which the
// first rw bytes are readable and writable.
type region struct {
	mem []byte
	rw  uint64
}

var (
	_ experimental.MemoryAllocator = (*linearMemory)(nil)
	_ experimental.LinearMemory    = (*linearMemory)(nil)
)

// reset prepares m for a run with the given limit.
func (m *linearMemory) reset(limit uint64) {
	m.limit = limit
	m.max = limit
	m.refused = false
}

// Allocate implements experimental.MemoryAllocator. wazero calls it once
// per instantiation; max is what the module declares (4 GiB if nothing).
func (m *linearMemory) Allocate(_, max uint64) experimental.LinearMemory {
	m.max = min(m.limit, max)
	if m.reg == nil && !m.noMap {
		mem, err := reserve(MaxMemory)
		if err != nil {
			m.noMap = true
		} else {
			m.reg = &region{mem: mem}
			m.buf = nil
			runtime.AddCleanup(m.reg, func(mem []byte) { release(mem) }, mem)
		}
	}
	return m
}

// Reallocate implements experimental.LinearMemory: it returns the memory
// grown to size bytes, or nil beyond the limit (memory.grow then returns -1
// and malloc returns NULL in the module).
func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > m.max || (m.out != nil && size+m.out.counted() > m.limit) {
		m.refused = true
		return nil
	}
	if r := m.reg; r != nil {
		if size > r.rw {
			if err := commit(r.mem[r.rw:size]); err != nil {
				m.refused = true // the kernel refused the memory: as if over the limit
				return nil
			}
			r.rw = size
		}
		m.buf = r.mem[:size:size]
		return m.buf
	}
	if size <= uint64(cap(m.buf)) {
		// Bytes past len were never written: the slice is zero there.
		m.buf = m.buf[:size]
		return m.buf
	}
	// Double, but never reserve past what the run may use.
	c := max(size, 2*uint64(cap(m.buf)))
	c = min(c, m.max)
	buf := make([]byte, size, c)
	copy(buf, m.buf)
	m.buf = buf
	return buf
}

// Free implements experimental.LinearMemory. It does nothing: wazero may
// call it from the goroutine that closes the runtime, so the run itself
// recycles the memory once its module is closed (see recycle).
func (m *linearMemory) Free() {}

// recycle zeroes the memory for the next run: a small one by clearing it,
// a large one by handing its pages back (they read as zero when touched
// again).
func (m *linearMemory) recycle() {
	if r := m.reg; r != nil {
		if len(m.buf) > keepMemory {
			discard(r.mem[:r.rw])
		} else {
			clear(m.buf)
		}
		m.buf = nil
		return
	}
	if cap(m.buf) > keepMemory {
		m.buf = nil
		return
	}
	clear(m.buf)
	m.buf = m.buf[:0]
}
