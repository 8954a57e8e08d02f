package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWrites: writers and a reader at once (under -race, a
// Buffer without its lock fails), and nothing written is lost.
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 800) {
		t.Fatalf("%d bytes, want 800", len(got))
	}
	c := b.Bytes()
	c[0] = 'y'
	if b.String()[0] != 'x' {
		t.Fatal("Bytes returned the buffer itself, not a copy")
	}
}
