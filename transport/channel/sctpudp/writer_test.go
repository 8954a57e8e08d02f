package sctpudp

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// TestPacketWriter checks that queued packets leave in order, that close
// sends what was queued before it returns, and that a send error comes
// back from the next write.
func TestPacketWriter(t *testing.T) {
	checkLeaks(t)
	var mu sync.Mutex
	var sent []byte
	release := make(chan struct{})
	failed := errors.New("send failed")
	w := newPacketWriter(func(pkts [][]byte) error {
		<-release
		mu.Lock()
		defer mu.Unlock()
		for _, p := range pkts {
			sent = append(sent, p...)
		}
		return nil
	})
	const n = 3 * writeQueue // more than the queue: writes wait for sends
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := w.write([]byte{byte(i)}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("writes still blocked after 10 s")
	}
	w.close()
	mu.Lock()
	if len(sent) != n {
		t.Fatalf("%d packets sent by close, want %d", len(sent), n)
	}
	for i, b := range sent {
		if b != byte(i) {
			t.Fatalf("packet %d is %d: out of order", i, b)
		}
	}
	mu.Unlock()
	if _, err := w.write([]byte{1}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after close: %v, want net.ErrClosed", err)
	}

	w = newPacketWriter(func([][]byte) error { return failed })
	defer w.close()
	if _, err := w.write([]byte{1}); err != nil {
		t.Fatalf("first write: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := w.write([]byte{2})
		if errors.Is(err, failed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("write after a failed send: %v, want %v", err, failed)
		}
		time.Sleep(time.Millisecond)
	}
}
