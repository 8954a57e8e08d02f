// Package syncbuf provides Buffer, a bytes.Buffer that several goroutines
// may write and read at once: the log sink of a test, or the output of a
// child process copied by one goroutine while another reads it.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer guarded by a mutex. The zero value is an empty
// buffer ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Bytes returns a copy of what was written so far.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}
