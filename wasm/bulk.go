package wasm

import "encoding/binary"

// Long bulk memory instructions in slices, so that Go can preempt them.
//
// wazero lowers memory.fill and memory.copy to one native memset or
// memmove, which nothing can preempt: a goroutine running one keeps its P
// until it ends. The countdown (interrupt.go) goes to Go before a long
// one, but the instruction itself then runs whole: 128 MiB takes some
// 25-75 ms, 2 GiB 1-2 s. A worker lends every P it has to units (its
// GOMAXPROCS is its CPUs), so while every thread runs such fills nothing
// else of the worker runs: its data plane missed its heartbeats, the
// server took the path down (500 ms) and, with 2 GiB fills, heard no
// heartbeat for 3.6 s of the 5 s after which a worker is dead
// (BenchmarkBeatGapBulkFill in package worker, docs/benchmarks.md).
//
// So the rewrite also adds two functions, bulkFill(d, v, n) and
// bulkCopy(d, s, n), and sends every memory.fill and memory.copy longer
// than bulkSlice bytes there, after its charge:
//
//	global.get $n; i32.const bulkSlice; i32.gt_u
//	if (param i32 i32 i32)  call $bulkFill  else  memory.fill  end
//
// They do the same work bulkSlice bytes at a time, calling braid.tick
// (with 0: the whole length was charged before) between two slices: that
// call is where Go preempts the goroutine, so the worker's other
// goroutines wait for at most one slice (some 0.1-0.5 ms). An
// instruction out of bounds runs as the original, whole, and traps as it
// would have, having written nothing; memory.copy goes backwards when its
// destination is above its source, as memmove does, so an overlapping
// copy moves the same bytes. Short ones stay native: the test costs a
// compare and a branch.

// bulkSlice is the most bytes a memory.fill or memory.copy moves between
// two calls of braid.tick: 1 MiB, some 0.1-0.5 ms of memset, for a call
// of some 0.1-0.2 µs.
const bulkSlice = 1 << 20

// bulkType is the function type of bulkFill and bulkCopy, and the block
// type of the if that chooses them: [i32 i32 i32] -> [].
var bulkType = []byte{0x60, 3, 0x7f, 0x7f, 0x7f, 0}

// The locals of bulkFill and bulkCopy: the parameters, then k, the
// length of the slice under way.
const (
	bulkD = 0 // destination
	bulkV = 1 // bulkFill: the value; bulkCopy: the source
	bulkN = 2 // bytes left
	bulkK = 3 // this slice
)

// bulkFillBody returns the body of bulkFill(d, v, n), with tick the index
// of braid.tick.
func bulkFillBody(tick uint32) []byte {
	b := []byte{1, 1, 0x7f} // one more local, k: i32
	b = bulkBounds(b, bulkD)
	b = append(b, 0x04, 0x40, 0x20, bulkD, 0x20, bulkV, 0x20, bulkN, 0xfc, 11, 0, 0x0f, 0x0b) // if: the fill whole (it traps); return; end
	b = append(b, 0x03, 0x40)                                                                 // loop
	b = bulkSliceLen(b, tick)
	b = append(b, 0x20, bulkD, 0x20, bulkV, 0x20, bulkK, 0xfc, 11, 0) // memory.fill (d, v, k)
	b = bulkForward(b, bulkD)
	b = bulkNext(b)
	return append(b, 0x0b, 0x0b) // end (loop); end
}

// bulkCopyBody returns the body of bulkCopy(d, s, n): forwards where d <= s,
// else backwards, as memmove.
func bulkCopyBody(tick uint32) []byte {
	b := []byte{1, 1, 0x7f}
	b = bulkBounds(b, bulkD)
	b = bulkBounds(b, bulkV)
	b = append(b, 0x72)                                                                          // i32.or: either out of bounds
	b = append(b, 0x04, 0x40, 0x20, bulkD, 0x20, bulkV, 0x20, bulkN, 0xfc, 10, 0, 0, 0x0f, 0x0b) // if: the copy whole (it traps); return; end
	b = append(b, 0x20, bulkD, 0x20, bulkV, 0x4b, 0x04, 0x40)                                    // local.get d; local.get s; i32.gt_u; if: backwards
	b = append(b, 0x03, 0x40)                                                                    // loop
	b = bulkSliceLen(b, tick)
	b = append(b, 0x20, bulkN, 0x20, bulkK, 0x6b, 0x21, bulkN) // n -= k: the last k bytes go first
	b = append(b, 0x20, bulkD, 0x20, bulkN, 0x6a)              // d + n
	b = append(b, 0x20, bulkV, 0x20, bulkN, 0x6a)              // s + n
	b = append(b, 0x20, bulkK, 0xfc, 10, 0, 0)                 // memory.copy (d+n, s+n, k)
	b = append(b, 0x20, bulkN, 0x0d, 0, 0x0b)                  // br_if 0 while n > 0; end (loop)
	b = append(b, 0x05, 0x03, 0x40)                            // else: forwards; loop
	b = bulkSliceLen(b, tick)
	b = append(b, 0x20, bulkD, 0x20, bulkV, 0x20, bulkK, 0xfc, 10, 0, 0) // memory.copy (d, s, k)
	b = bulkForward(b, bulkD)
	b = bulkForward(b, bulkV)
	b = bulkNext(b)
	return append(b, 0x0b, 0x0b, 0x0b) // end (loop); end (if); end
}

// bulkBounds appends: local p + n > memory.size in bytes, in 64-bit
// arithmetic, an i32: 1 if the instruction would go out of bounds.
func bulkBounds(b []byte, p byte) []byte {
	b = append(b, 0x20, p, 0xad, 0x20, bulkN, 0xad, 0x7c) // local.get p; i64.extend_i32_u; local.get n; i64.extend_i32_u; i64.add
	b = append(b, 0x3f, 0, 0xad, 0x42, 16, 0x86)          // memory.size; i64.extend_i32_u; i64.const 16; i64.shl
	return append(b, 0x56)                                // i64.gt_u
}

// bulkSliceLen appends k = min(n, bulkSlice), then call $tick (0): where
// Go may preempt the run, or stop it.
func bulkSliceLen(b []byte, tick uint32) []byte {
	b = appendI32(b, bulkSlice)
	b = append(b, 0x20, bulkN, 0x20, bulkN)
	b = appendI32(b, bulkSlice)
	b = append(b, 0x4b, 0x1b, 0x21, bulkK) // i32.gt_u; select: n > slice ? slice : n; local.set k
	b = append(b, 0x42, 0, 0x10)           // i64.const 0; call
	return binary.AppendUvarint(b, uint64(tick))
}

// bulkForward appends local p += k.
func bulkForward(b []byte, p byte) []byte {
	return append(b, 0x20, p, 0x20, bulkK, 0x6a, 0x21, p)
}

// bulkNext appends n -= k, and loops again while n > 0.
func bulkNext(b []byte) []byte {
	return append(b, 0x20, bulkN, 0x20, bulkK, 0x6b, 0x22, bulkN, 0x0d, 0) // i32.sub; local.tee n; br_if 0
}

// appendI32 appends i32.const v.
func appendI32(b []byte, v int32) []byte {
	return appendSLEB(append(b, 0x41), int64(v))
}
