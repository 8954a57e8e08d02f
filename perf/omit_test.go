package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
)

// With Omit (iperf3 -O) the warm-up is reported as omitted intervals and
// left out of the totals, on both ends: at a paced 40 Mbit/s a 1 s test
// after a 1 s warm-up counts about 1 s of data, not 2.
func TestOmit(t *testing.T) {
	paths, cfg, stop := serve(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, reverse := range []bool{false, true} {
		o := &Options{Paths: paths, Config: cfg, Mode: "bulk", Size: 32 << 10, Seconds: 1, Streams: 2, Interval: 0.5,
			Omit: 1, Bitrate: 40e6, Reverse: reverse}
		rep, ip, err := Run(ctx, o)
		if err != nil {
			t.Fatalf("reverse %v: %v", reverse, err)
		}
		if ip.Start.TestStart.Omit != 1 || ip.Start.TestStart.Duration != 1 {
			t.Errorf("reverse %v: test_start %+v", reverse, ip.Start.TestStart)
		}
		// 40 Mbit/s over the measured second: 5 MB; the warm-up's would
		// double it.
		const want = 40e6 / 8
		for name, s := range map[string]*IperfSpan{"sum_sent": ip.End.SumSent, "sum_received": ip.End.SumReceived} {
			if s == nil || float64(s.Bytes) < 0.7*want || float64(s.Bytes) > 1.3*want || s.Seconds < 0.9 || s.Seconds > 1.3 {
				t.Errorf("reverse %v: %s %+v, want about %.0f bytes in 1 s", reverse, name, s, want)
			}
		}
		if rep.Seconds < 0.9 || rep.Seconds > 1.3 || float64(rep.Bytes) > 1.3*want {
			t.Errorf("reverse %v: report %d bytes in %.2f s", reverse, rep.Bytes, rep.Seconds)
		}
		var pathBytes int64
		for _, p := range rep.PerPath {
			pathBytes += p.Bytes
		}
		if float64(pathBytes) > 1.5*want {
			t.Errorf("reverse %v: per-path bytes %d count the warm-up", reverse, pathBytes)
		}
		// Intervals: the warm-up's first, omitted, then the measured
		// ones counting from 0 again.
		var omitted, measured int
		for i, iv := range ip.Intervals {
			o := iv.Sum.Omitted != nil && *iv.Sum.Omitted
			switch {
			case o && measured > 0:
				t.Errorf("reverse %v: interval %d omitted after a measured one", reverse, i)
			case o:
				omitted++
			default:
				if measured == 0 && iv.Sum.Start != 0 {
					t.Errorf("reverse %v: first measured interval starts at %v, want 0", reverse, iv.Sum.Start)
				}
				measured++
			}
		}
		if omitted < 2 || measured < 1 {
			t.Errorf("reverse %v: %d omitted and %d measured intervals of 0.5 s, want 2 and 2", reverse, omitted, measured)
		}
		var textOmitted int
		for _, e := range rep.Intervals {
			if e.Omitted {
				textOmitted++
			}
		}
		if textOmitted < 1 {
			t.Errorf("reverse %v: braid's intervals %+v mark none omitted", reverse, rep.Intervals)
		}
	}
	for _, tt := range stop() {
		if tt.Err != nil || tt.Iperf.Start.TestStart.Omit != 1 {
			t.Errorf("server's test: %v, test_start %+v", tt.Err, tt.Iperf.Start.TestStart)
		}
	}
}

// ServerOutput: the client gets the server's own report of the test, as
// text from a server with Text and as JSON from one without.
func TestServerOutput(t *testing.T) {
	paths, cfg, stop := serve(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	o := &Options{Paths: paths, Config: cfg, Mode: "bulk", Size: 64 << 10, Seconds: 0.5, Streams: 1, ServerOutput: true}
	_, ip, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	so := ip.ServerOutputJSON
	if so == nil || ip.ServerOutputText != "" || so.End.SumReceived == nil || so.End.SumReceived.Bytes != ip.End.SumReceived.Bytes {
		t.Errorf("server output JSON %+v, text %q; client's sum_received %+v", so, ip.ServerOutputText, ip.End.SumReceived)
	}
	b, _ := json.Marshal(ip)
	if !strings.Contains(string(b), `"server_output_json":{"start"`) {
		t.Errorf("-J lacks server_output_json: %.300s", b)
	}
	o.ServerOutput = false
	if _, ip, err = Run(ctx, o); err != nil || ip.ServerOutputJSON != nil {
		t.Errorf("without ServerOutput: %v, %+v", err, ip.ServerOutputJSON)
	}
	stop()
}

// A client of another protocol version is refused with both versions
// named, not run with fields the server would ignore.
func TestVersionMismatch(t *testing.T) {
	paths, cfg, stop := serve(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sess, err := transport.Dial(ctx, paths, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctrl, err := sess.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := Hello{Version: Version - 1, Mode: "bulk", Size: 1 << 10, Seconds: 1, Streams: 1, Paths: 2, Bitrate: 1e6}
	if err := ctl.WriteJSON(ctx, ctrl, old); err != nil {
		t.Fatal(err)
	}
	var r Ready
	if err := ctl.ReadJSON(ctx, ctrl, 10*time.Second, &r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Error, fmt.Sprintf("version %d,", Version-1)) || !strings.Contains(r.Error, fmt.Sprintf("speaks %d", Version)) {
		t.Errorf("a version-%d hello: %q", Version-1, r.Error)
	}
	sess.Close()
	stop()
}
