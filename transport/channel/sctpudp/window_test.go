package sctpudp

import (
	"strings"
	"testing"
	"time"
)

// TestWindowHoldsMessage: SCTP delivers a message only once it is whole,
// so a receive window smaller than a message would stall the association
// for good. Such a configuration is refused with a clear error, and the
// smallest window accepted (one message) still moves data.
func TestWindowHoldsMessage(t *testing.T) {
	err := (Config{MTU: 4096, MaxReceiveBuffer: 32 << 10}).Validate()
	if err == nil || !strings.Contains(err.Error(), "one whole message (MaxMessageSize 65536)") {
		t.Fatalf("a 32 KiB window under 64 KiB messages: %v; want it refused, naming MaxMessageSize", err)
	}
	k := Kind{Config: Config{MTU: 4096, MaxReceiveBuffer: 64 << 10}}
	c, s, _ := pair(t, k)
	type result struct {
		n   int64
		sum [32]byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, sum, err := recvHashed(s)
		done <- result{n, sum, err}
	}()
	want, err := sendHashed(c, 1, 4<<20, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case r := <-done:
		if r.err != nil || r.n != 4<<20 || r.sum != want {
			t.Fatalf("received %d bytes (%v), sha256 match %v", r.n, r.err, r.sum == want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("4 MiB over a one-message window did not arrive in 30 s")
	}
}
