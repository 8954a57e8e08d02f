package wasm

import "github.com/tetratelabs/wazero/experimental"

// keepMemory is the largest linear memory kept for the next run; a larger
// one is left to the garbage collector so an idle Engine holds little.
const keepMemory = 4 << 20

// linearMemory backs the linear memory of one run with a Go slice that may
// not grow past limit. It implements experimental.MemoryAllocator and
// experimental.LinearMemory; one run uses it from one goroutine.
//
// Between runs buf keeps its capacity and is all zero, so the next run's
// memory needs neither an allocation nor zeroing unless it grows.
type linearMemory struct {
	buf     []byte
	limit   uint64 // bytes this run may use, a multiple of pageSize
	max     uint64 // min(limit, the module's declared maximum)
	refused bool   // a grow past max was refused
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
	return m
}

// Reallocate implements experimental.LinearMemory: it returns the memory
// grown to size bytes, or nil beyond the limit (memory.grow then returns -1
// and malloc returns NULL in the module).
func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		m.refused = true
		return nil
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

// recycle zeroes the memory for the next run, or drops it if large.
func (m *linearMemory) recycle() {
	if cap(m.buf) > keepMemory {
		m.buf = nil
		return
	}
	clear(m.buf)
	m.buf = m.buf[:0]
}
