package uml

import (
	"io"
	"os"
	"sync"
	"time"
)

// followEvery is how often Follow looks for new output.
const followEvery = 200 * time.Millisecond

// Follow copies what is appended to the file at path to w while a guest
// runs: every 200 ms it reads what was written since its last look (the
// file may not exist yet). The returned stop copies what is left and
// returns once the last write to w is done; call it exactly once, before
// the file is removed. A failing w ends the copying (the rest is lost to
// w, not to the file). Run uses it for Config.Output; package vmkernel's
// QEMU backend too.
func Follow(path string, w io.Writer) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var off int64
	var werr error
	copyNew := func() {
		if werr != nil {
			return
		}
		f, err := os.Open(path)
		if err != nil {
			return // not yet created
		}
		defer f.Close()
		// Bounded: one pass copies at most what the file holds now, in
		// 64 KiB reads.
		buf := make([]byte, 64<<10)
		for range 1 << 14 {
			n, err := f.ReadAt(buf, off)
			if n > 0 {
				if _, werr = w.Write(buf[:n]); werr != nil {
					return
				}
				off += int64(n)
			}
			if err != nil || n == 0 {
				return
			}
		}
	}
	wg.Go(func() {
		t := time.NewTicker(followEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				copyNew()
				return
			case <-t.C:
				copyNew()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
