package ctl

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/braid-hpc/braid/transport"
)

func TestMbps(t *testing.T) {
	for _, tc := range []struct {
		bytes   int64
		seconds float64
		want    float64
	}{{125_000_000, 1, 1000}, {1_000_000, 8, 1}, {5, 0, 0}, {5, -1, 0}} {
		if got := Mbps(tc.bytes, tc.seconds); got != tc.want {
			t.Errorf("Mbps(%d, %v) = %v, want %v", tc.bytes, tc.seconds, got, tc.want)
		}
	}
}

// A session closed with CloseSession is Closing under its log id for a
// while; JSON messages go both ways on a stream.
func TestCloseSessionAndJSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cfg := &transport.Config{Key: []byte("ctl-test-key-ctl-test-key"), Logger: slog.New(slog.DiscardHandler)}
	ln, err := transport.Listen(ctx, []string{"127.0.0.1:0"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan map[string]int, 1)
	go func() {
		s, err := ln.Accept(ctx)
		if err != nil {
			got <- nil
			return
		}
		defer s.Close()
		st, err := s.AcceptStream(ctx)
		if err != nil {
			got <- nil
			return
		}
		var v map[string]int
		if err := ReadJSONWhileBusy(ctx, st, SessionMoving(s), 5*time.Second, &v); err != nil {
			t.Error(err)
		}
		got <- v
	}()
	sess, err := transport.Dial(ctx, []transport.Path{{Remote: ln.Addrs()[0].String()}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sess.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(ctx, st, map[string]int{"n": 7}); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v["n"] != 7 {
		t.Errorf("read %v, want n=7", v)
	}
	id := sess.ID()
	if Closing(id) || Closing("") {
		t.Error("Closing before CloseSession")
	}
	if err := CloseSession(ctx, sess, false, 0); err != nil {
		t.Fatal(err)
	}
	if !Closing(id) || !Closing(id[:8]) {
		t.Errorf("Closing(%q) false after CloseSession", id)
	}
}
