package perf

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/transport"
)

// serve starts a Server on two loopback addresses and returns the
// client's paths and config, and the tests it ran once ctx is done.
func serve(t *testing.T) ([]transport.Path, *transport.Config, func() []*Test) {
	t.Helper()
	cfg := &transport.Config{Key: []byte("perf-test-key-perf-test-key"), Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(t.Context())
	ln, err := transport.Listen(ctx, []string{"127.0.0.1:0", "127.0.0.1:0"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var paths []transport.Path
	for _, a := range ln.Addrs() {
		paths = append(paths, transport.Path{Remote: a.String()})
	}
	srv := NewServer(cfg)
	var mu sync.Mutex
	var tests []*Test
	srv.Done = func(tt *Test) { mu.Lock(); tests = append(tests, tt); mu.Unlock() }
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, false) }()
	stop := func() []*Test {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return tests
	}
	t.Cleanup(func() { cancel(); ln.Close() })
	return paths, cfg, stop
}

// A bulk test and a ping-pong test between Run and a Server: the figures
// agree between the two reports and the server's view, and bad options
// are refused before anything is dialed.
func TestRunServer(t *testing.T) {
	paths, cfg, stop := serve(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	var intervals int
	bulk := &Options{Paths: paths, Config: cfg, Mode: "bulk", Size: 64 << 10, Seconds: 1, Streams: 2, Interval: 0.25,
		OnInterval: func(i int, e Interval) { intervals++ }}
	rep, ip, err := Run(ctx, bulk)
	if err != nil {
		t.Fatalf("bulk: %v (%+v)", err, ip)
	}
	if rep.Bytes <= 0 || rep.Seconds < 0.9 || rep.Seconds > 1.5 || rep.ThroughputMbps != Mbps(rep.Bytes, rep.Seconds) || len(rep.PerPath) != 2 {
		t.Errorf("bulk report: %d bytes in %.3f s, %.1f Mbit/s, %d paths", rep.Bytes, rep.Seconds, rep.ThroughputMbps, len(rep.PerPath))
	}
	if ip.Error != "" || ip.End.SumReceived == nil || ip.End.SumReceived.Bytes != rep.Bytes || ip.Braid != rep || len(ip.End.Streams) != 2 {
		t.Errorf("iperf report: error %q, sum_received %+v, %d streams", ip.Error, ip.End.SumReceived, len(ip.End.Streams))
	}
	if intervals < 2 || len(rep.Intervals) != intervals {
		t.Errorf("%d intervals reported, %d in the report; want about 4", intervals, len(rep.Intervals))
	}

	const size, count = 8 << 10, 50
	pp := &Options{Paths: paths, Config: cfg, Mode: "pingpong", Size: size, Seconds: 30, Streams: 1, Count: count}
	rep, _, err = Run(ctx, pp)
	if err != nil {
		t.Fatalf("pingpong: %v", err)
	}
	if rep.PingPong == nil || rep.RoundTrips != count || rep.Bytes != size*count {
		t.Fatalf("pingpong report: %+v", rep)
	}
	want := EffectiveMbps(size, time.Duration(rep.RTTus*1e3))
	if d := rep.EffectiveMbps - want; d > 1e-6*want || d < -1e-6*want || !(rep.RTTMinUs <= rep.RTTP50us && rep.RTTP50us <= rep.RTTMaxUs) {
		t.Errorf("pingpong: effective %.3f Mbit/s, eq. 1 of mean RTT %.1f µs gives %.3f; rtt min %.1f p50 %.1f max %.1f",
			rep.EffectiveMbps, rep.RTTus, want, rep.RTTMinUs, rep.RTTP50us, rep.RTTMaxUs)
	}

	for _, bad := range []*Options{
		{Paths: paths, Config: cfg, Mode: "flood", Size: 1, Seconds: 1, Streams: 1},
		{Paths: paths, Config: cfg, Mode: "bulk", Size: 0, Seconds: 1, Streams: 1},
		{Paths: paths, Config: cfg, Mode: "bulk", Size: 1, Seconds: 1, Streams: 0},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", bad)
		}
	}
	if _, ip, err := Run(ctx, &Options{Mode: "bulk"}); err == nil || ip == nil || ip.Error == "" {
		t.Errorf("Run without paths: %v, %+v", err, ip)
	}

	tests := stop()
	if len(tests) != 2 {
		t.Fatalf("server saw %d tests, want 2", len(tests))
	}
	for _, tt := range tests {
		if tt.Err != nil || tt.Summary == nil || tt.Iperf == nil || tt.Iperf.Error != "" {
			t.Errorf("server's test %+v: %v", tt.Hello, tt.Err)
		}
		if tt.Hello.Mode == "pingpong" && tt.Result.Messages != count+1 { // with the warm-up
			t.Errorf("server echoed %d messages, want %d", tt.Result.Messages, count+1)
		}
	}
}

// A server refuses a test out of its bounds, and the client says why.
func TestRunRefused(t *testing.T) {
	paths, cfg, stop := serve(t)
	o := &Options{Paths: paths, Config: cfg, Mode: "bulk", Size: 2 << 30, Seconds: 1, Streams: 1} // over maxSize
	_, ip, err := Run(t.Context(), o)
	if err == nil || !strings.Contains(err.Error(), "server refused the test") || ip.Error == "" {
		t.Errorf("Run: %v, error field %q", err, ip.Error)
	}
	tests := stop()
	if len(tests) != 1 || tests[0].Err == nil || errors.Is(tests[0].Err, context.Canceled) {
		t.Errorf("server's tests: %+v", tests)
	}
}
