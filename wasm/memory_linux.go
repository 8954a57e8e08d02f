package wasm

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// reserve maps size bytes of address space with no access: it costs no
// memory, counts toward no commit limit, and faults if touched.
func reserve(size uint64) ([]byte, error) {
	if uint64(int(size)) != size || int(size) < 0 {
		return nil, fmt.Errorf("wasm: cannot reserve %d bytes of address space here", size)
	}
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("wasm: reserve %d bytes of address space: %w", size, err)
	}
	return mem, nil
}

// commit makes b, page-aligned within a reserved region, readable and
// writable; its pages are zero until written.
func commit(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.Mprotect(b, unix.PROT_READ|unix.PROT_WRITE)
}

// discard hands the pages of b back to the kernel; they read as zero when
// touched again.
func discard(b []byte) {
	if len(b) > 0 {
		unix.Madvise(b, unix.MADV_DONTNEED)
	}
}

// release unmaps a region from reserve.
func release(mem []byte) { unix.Munmap(mem) }
