package sctpudp

import (
	"context"
	"testing"
	"time"
)

// TestSendTuner feeds the tuner writes at given rates and checks the send
// buffer it asks for: 64 KiB at 50 Mbit/s, about 10 ms of the rate at 100
// Mbit/s, 1 MiB at most, and back to 64 KiB once the sender is idle.
func TestSendTuner(t *testing.T) {
	var asked []int
	tu := newSendTuner(func(n int) error { asked = append(asked, n); return nil })
	now := time.Unix(1000, 0)
	// feed writes 1452-byte packets at rate bytes/s for d.
	feed := func(rate float64, d time.Duration) {
		const pkt = 1452
		step := time.Duration(float64(time.Second) * pkt / rate)
		for end := now.Add(d); now.Before(end); now = now.Add(step) {
			tu.wrote(pkt, now)
		}
	}
	for _, tc := range []struct {
		name     string
		rate     float64
		lo, high int
	}{
		{"50 Mbit/s", 6.25e6, autoSendMin, autoSendMin},
		{"100 Mbit/s", 12.5e6, 115e3, 135e3},
		{"1 Gbit/s", 125e6, autoSendMax, autoSendMax},
		{"25 Mbit/s", 3.125e6, autoSendMin, autoSendMin},
	} {
		feed(tc.rate, 500*time.Millisecond)
		if got := tu.size(); got < tc.lo || got > tc.high {
			t.Errorf("%s: send buffer %d, want %d..%d", tc.name, got, tc.lo, tc.high)
		}
	}
	// Idle for a second, then one packet: the window reads as idle.
	feed(12.5e6, 200*time.Millisecond)
	now = now.Add(time.Second)
	tu.wrote(1452, now)
	if got := tu.size(); got != autoSendMin {
		t.Errorf("after a second idle: send buffer %d, want %d", got, autoSendMin)
	}
	if len(asked) == 0 || asked[0] != autoSendMin {
		t.Errorf("first size asked %v, want %d first", asked, autoSendMin)
	}
	// A steady rate does not resize the socket on every window.
	n := len(asked)
	feed(12.5e6, 2*time.Second)
	if extra := len(asked) - n; extra > 1 {
		t.Errorf("a steady 100 Mbit/s for 2 s resized the buffer %d times, want at most 1", extra)
	}
}

// TestSendBufferFollowsRate sends bulk over loopback on a dialed
// association with the default (tuned) send buffer and one with a fixed
// one: the first grows above 64 KiB (loopback sends far above 50 Mbit/s),
// the second stays what was asked, and a listener's association reports
// its fixed 64 KiB.
func TestSendBufferFollowsRate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want func(int) bool
	}{
		{"tuned", Config{}, func(n int) bool { return n > autoSendMin && n <= autoSendMax }},
		{"fixed 96 KiB", Config{SendBuffer: 96 << 10}, func(n int) bool { return n == 96<<10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			k := Kind{Config: tc.cfg}
			ln, err := k.Listen(ctx, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			acc := make(chan *Stream, 1)
			go func() {
				s, err := ln.Accept()
				if err != nil {
					acc <- nil
					return
				}
				acc <- s.(*Stream)
				buf := make([]byte, 64<<10)
				for {
					if _, err := s.Read(buf); err != nil {
						return
					}
				}
			}()
			c, err := k.Dial(ctx, "", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			msg := make([]byte, 32<<10)
			deadline := time.Now().Add(300 * time.Millisecond)
			if tc.cfg.SendBuffer == 0 {
				deadline = time.Now().Add(3 * time.Second)
			}
			for time.Now().Before(deadline) {
				if _, err := c.Write(msg); err != nil {
					t.Fatal(err)
				}
				if tc.cfg.SendBuffer == 0 && c.(*Stream).Assoc().Stats().SendBuffer > autoSendMin {
					break
				}
			}
			if got := c.(*Stream).Assoc().Stats().SendBuffer; !tc.want(got) {
				t.Errorf("dialed association's send buffer %d after 3 s of bulk", got)
			}
			s := <-acc
			if s == nil {
				t.Fatal("accept failed")
			}
			if got, want := s.Assoc().Stats().SendBuffer, tc.cfg.fixedSendBuffer(); got != want {
				t.Errorf("listener's association reports send buffer %d, want %d", got, want)
			}
		})
	}
}
