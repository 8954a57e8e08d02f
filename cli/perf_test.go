package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/perf"
)

func TestPerf(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	srv := start(t, "perf", "-s", "--listen", "127.0.0.1:0,127.0.0.2:0")
	addrs := srv.listening(t)

	tests := []struct {
		name  string
		args  []string
		trips int // pingpong round trips expected
	}{
		{"bulk", []string{"-t", "1", "-P", "2"}, 0},
		{"bulk-reverse", []string{"--time", "0.5", "-R"}, 0},
		{"bulk-basic", []string{"-t0.5", "--stripe", "basic", "-l", "256K", "--frag", "16K"}, 0},
		{"pingpong", []string{"--mode", "pingpong", "--length", "256K", "--count", "20"}, 20},
		{"pingpong-streams", []string{"--mode", "pingpong", "-l", "100K", "--count", "10", "--parallel", "3", "--path-policy", "round-robin"}, 30},
		{"baseline-bulk", []string{"--tcp-baseline", "-t", "0.5", "-B", "127.0.0.1,127.0.0.1"}, 0},
		{"baseline-reverse", []string{"--tcp-baseline", "-R", "-t", "0.5"}, 0},
		{"baseline-pingpong", []string{"--tcp-baseline", "--mode", "pingpong", "-l", "1000001", "--count", "20"}, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCmd(t, 30*time.Second, append([]string{"perf", "-c", addrs, "-J"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var top map[string]json.RawMessage
			if err := json.Unmarshal([]byte(out), &top); err != nil {
				t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
			}
			out = string(top["braid"])
			var raw map[string]any
			if err := json.Unmarshal([]byte(out), &raw); err != nil {
				t.Fatalf("no braid section: %v\n%s", err, out)
			}
			for _, k := range []string{"mode", "size", "paths", "streams", "stripe", "transport", "seconds", "throughput_mbps",
				"per_path", "cpu_user_s", "cpu_sys_s", "control_messages"} {
				if _, ok := raw[k]; !ok {
					t.Errorf("JSON lacks %q", k)
				}
			}
			var rep perf.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Paths != 2 || rep.ThroughputMbps <= 0 || rep.Seconds <= 0 || rep.Bytes <= 0 {
				t.Errorf("paths %d, throughput %v Mbit/s, %v s, %d bytes", rep.Paths, rep.ThroughputMbps, rep.Seconds, rep.Bytes)
			}
			if len(rep.PerPath) != 2 {
				t.Fatalf("per_path has %d entries, want 2", len(rep.PerPath))
			}
			var sum int64
			for _, p := range rep.PerPath {
				if p.Bytes <= 0 || p.Mbps <= 0 || p.Remote == "" || p.Local == "" {
					t.Errorf("per_path entry %+v", p)
				}
				sum += p.Bytes
			}
			if rep.Mode == "bulk" && !rep.Baseline {
				// Wire bytes less duplicates: the payload plus a little
				// framing, plus what had arrived at the deadline but not
				// yet in order (at most a stream window, 16 MiB, per
				// stream). The counters and the receiver's count are read
				// at slightly different moments, hence 0.98.
				if float64(sum) < 0.98*float64(rep.Bytes) || float64(sum) > 1.05*float64(rep.Bytes)+float64(rep.Streams)*(16<<20) {
					t.Errorf("per-path bytes add up to %d for %d bytes of payload", sum, rep.Bytes)
				}
				if rep.Control.Segments == 0 {
					t.Errorf("no striped segments: %+v", rep.Control)
				}
			}
			if (rep.Mode == "pingpong") != (rep.PingPong != nil) {
				t.Errorf("mode %s with round-trip figures %+v", rep.Mode, rep.PingPong)
			}
			if rep.Mode == "pingpong" {
				for _, k := range []string{"rtt_us", "rtt_p50_us", "rtt_p99_us", "effective_mbps"} {
					if _, ok := raw[k]; !ok {
						t.Errorf("JSON lacks %q", k)
					}
				}
				if rep.RTTus <= 0 || rep.RTTP50us <= 0 || rep.RTTP99us < rep.RTTP50us || rep.EffectiveMbps <= 0 {
					t.Errorf("rtt mean %v p50 %v p99 %v effective %v", rep.RTTus, rep.RTTP50us, rep.RTTP99us, rep.EffectiveMbps)
				}
				if rep.RoundTrips != tt.trips {
					t.Errorf("%d round trips, want %d", rep.RoundTrips, tt.trips)
				}
				// Eq. 1 from the mean RTT.
				if eff := 8 * float64(rep.Size) / 1e6 / (rep.RTTus / 1e6 / 2); eff < 0.999*rep.EffectiveMbps || eff > 1.001*rep.EffectiveMbps {
					t.Errorf("effective %v Mbit/s, eq. 1 gives %v", rep.EffectiveMbps, eff)
				}
			}
			if rep.Baseline && (rep.Stripe != "manual" || rep.Transport != "tcp") {
				t.Errorf("baseline reports stripe %q transport %q", rep.Stripe, rep.Transport)
			}
		})
	}
	srv.cancel()
	if code := srv.wait(t, 10*time.Second); code != 0 {
		t.Errorf("server exit %d: %s", code, srv.err.String())
	}
	lines := strings.Count(srv.out.String(), " from ")
	if lines != len(tests) {
		t.Errorf("server printed %d test lines for %d tests:\n%s", lines, len(tests), srv.out.String())
	}
}

func TestPerfHuman(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	srv := start(t, "perf", "-s", "--once", "--listen", "127.0.0.1:0,127.0.0.2:0")
	addrs := srv.listening(t)
	code, out, errs := runCmd(t, 30*time.Second, "perf", "-c", addrs, "--time", "2.5", "--length", "64K", "--paths")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"bulk over 2 paths", "[  0.0-  1.0 ]", "[  1.0-  2.0 ]", "throughput:", "PATH", "MBIT/S", "striping control:", "client cpu:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if errs != "" {
		t.Errorf("unexpected stderr: %s", errs)
	}
	if code := srv.wait(t, 10*time.Second); code != 0 {
		t.Errorf("--once server exit %d: %s", code, srv.err.String())
	}
	if !strings.Contains(srv.out.String(), "Mbit/s") {
		t.Errorf("server line missing:\n%s", srv.out.String())
	}
}

func TestPerfErrors(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	srv := start(t, "perf", "-s", "--listen", "127.0.0.1:0")
	addr := srv.listening(t)
	wrongKey := t.TempDir() + "/key"
	if err := os.WriteFile(wrongKey, []byte("some-other-cluster-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  string
		code int
		want string
	}{
		{"wrong key", []string{"-c", addr, "--key-file", wrongKey}, testKey, 1, "authentication failed"},
		{"no key", []string{"-c", addr}, "", 2, "BRAID_KEY"},
		{"neither -s nor -c", nil, testKey, 2, "either -s"},
		{"bad mode", []string{"-c", addr, "--mode", "sideways"}, testKey, 2, "unknown mode"},
		{"bad size", []string{"-c", addr, "-l", "lots"}, testKey, 2, "bad size"},
		{"from mismatch", []string{"-c", addr, "--from", "127.0.0.1,127.0.0.2"}, testKey, 2, "--from has 2"},
		{"bad stripe", []string{"-c", addr, "--stripe", "zigzag"}, testKey, 2, "unknown stripe mode"},
		{"reverse pingpong", []string{"-c", addr, "--mode", "pingpong", "--reverse"}, testKey, 2, "bulk mode only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("BRAID_KEY", tt.env)
			code, _, errs := runCmd(t, 20*time.Second, append([]string{"perf"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errs, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errs, tt.code, tt.want)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"65536", 65536, true}, {"64K", 64 << 10, true}, {"64k", 64 << 10, true}, {"4M", 4 << 20, true},
		{"4MiB", 4 << 20, true}, {"1G", 1 << 30, true}, {"2KB", 2048, true}, {"0", 0, true},
		{"", 0, false}, {"M", 0, false}, {"-1", 0, false}, {"1.5M", 0, false}, {"lots", 0, false}, {"99999999999T", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// The text report as an iperf3 user reads it: interval lines however
// short the test (-t 2, -i 0.5 -t 1, -n), each stream's sender and
// receiver totals and their sum, the -n byte count in the header instead
// of a duration, and the note, once, that braid encrypts (iperf3 does
// not), which --insecure-plaintext drops.
func TestPerfTextLikeIperf3(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	srv := start(t, "perf", "-s", "--listen", "127.0.0.1:0")
	addr := srv.listening(t)
	srvPlain := start(t, "perf", "-s", "--listen", "127.0.0.1:0", "--insecure-plaintext")
	addrPlain := srvPlain.listening(t)
	// An interval line per stream, and [SUM] with several: "[  3]  0.00-1.00  sec    481.0 MiB    4033.5 Mbit/s".
	// The sender's lines add Retr and Cwnd ([SUM] Retr only), as iperf3's
	// sender prints them: "[  3]  0.00-1.00  sec  481.0 MiB  4033.5 Mbit/s      0     1.2 MiB".
	interval := regexp.MustCompile(`(?m)^\[\s*(\d+|SUM)\]\s+[\d.]+-[\d.]+\s+sec\s+[\d.]+ [KMG]?i?B\s+[\d.]+ Mbit/s(\s+\d+)?(\s+[\d.]+ [KMG]?i?B)?\s*$`)
	stream := regexp.MustCompile(`(?m)^\[\s*(\d+|SUM)\]\s+[\d.]+-[\d.]+\s+sec\s+[\d.]+ [KMG]?i?B\s+[\d.]+ Mbit/s\s+(?:\d+\s+)?(sender|receiver)$`)
	for _, tc := range []struct {
		args      []string
		intervals int // at least
		streams   int
		header    string
		plain     bool
		receiver  bool // -R: this side receives, its lines have no Retr nor Cwnd
	}{
		{[]string{"-t", "2", "-P", "2", "-l", "64K"}, 2, 2, "2 streams, 64.0 KiB messages, 2s,", false, false},
		{[]string{"-i", "0.5", "-t", "1", "-l", "64K"}, 2, 1, "1 stream, 64.0 KiB messages, 1s,", false, false},
		{[]string{"-n", "20M", "-P", "2", "-l", "64K"}, 1, 2, "2 streams, 64.0 KiB messages, 20.0 MiB,", false, false},
		{[]string{"-t", "1", "-l", "64K", "--insecure-plaintext"}, 1, 1, "1 stream, 64.0 KiB messages, 1s,", true, false},
		{[]string{"-t", "1", "-P", "2", "-l", "64K", "-R"}, 1, 2, "2 streams, 64.0 KiB messages, 1s,", false, true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			a := addr
			if tc.plain {
				a = addrPlain
			}
			code, out, errs := runCmd(t, 30*time.Second, append([]string{"perf", "-c", a}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if !strings.Contains(out, tc.header) {
				t.Errorf("header lacks %q:\n%s", tc.header, out)
			}
			ivs := interval.FindAllStringSubmatch(out, -1)
			perStream := map[string]int{}
			for _, m := range ivs {
				perStream[m[1]]++
				// Retr on every sender line, Cwnd on every stream's
				// (not [SUM]'s); neither on the receiver's.
				retr, cwnd := m[2] != "", m[3] != ""
				if tc.receiver && (retr || cwnd) || !tc.receiver && (!retr || cwnd != (m[1] != "SUM")) {
					t.Errorf("interval line %q (receiver %v): want Retr and Cwnd on a sender's stream, Retr on its [SUM], none on a receiver's", m[0], tc.receiver)
				}
			}
			if want := map[bool]string{false: "Retr        Cwnd", true: "Bitrate\n"}[tc.receiver]; !strings.Contains(out, want) {
				t.Errorf("the interval heading lacks %q:\n%s", want, out)
			}
			if len(perStream) != tc.streams+map[bool]int{false: 0, true: 1}[tc.streams > 1] {
				t.Errorf("interval lines of %d streams and sums (%v), want %d streams and [SUM] if several:\n%s", len(perStream), perStream, tc.streams, out)
			}
			for id, n := range perStream {
				if n < tc.intervals {
					t.Errorf("stream %s has %d interval lines, want at least %d:\n%s", id, n, tc.intervals, out)
				}
			}
			if strings.Contains(out, "[ seconds ]") {
				t.Errorf("per-path interval lines without --paths:\n%s", out)
			}
			lines := stream.FindAllStringSubmatch(out, -1)
			want := 2 * tc.streams
			if tc.streams > 1 {
				want += 2 // [SUM] sender and receiver
			}
			if len(lines) != want {
				t.Errorf("%d stream total lines, want %d (sender and receiver of each stream, and the sums):\n%s", len(lines), want, out)
			}
			if n := strings.Count(out, "encrypted"); n != map[bool]int{false: 1, true: 0}[tc.plain] {
				t.Errorf("the encryption note is printed %d times (plaintext %v):\n%s", n, tc.plain, out)
			}
			// The client dials a control and a data session: the
			// plaintext warning is one, all the same.
			if n := strings.Count(errs, "INSECURE"); n != map[bool]int{false: 0, true: 1}[tc.plain] {
				t.Errorf("the plaintext warning is printed %d times (plaintext %v):\n%s", n, tc.plain, errs)
			}
			// The [SUM] sender line has the channels' retransmits, as
			// iperf3's has its sockets' total.
			if tc.streams > 1 && !regexp.MustCompile(`(?m)^\[SUM\].* \d+  sender$`).MatchString(out) {
				t.Errorf("the [SUM] sender line has no Retr:\n%s", out)
			}
		})
	}
}

// --get-server-output returns the server's own report, as iperf3's
// server_output_text: the streams it accepted, its interval lines per
// stream and its totals per stream, not a one-line summary.
func TestPerfServerOutputText(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	srv := start(t, "perf", "-s", "--listen", "127.0.0.1:0")
	addr := srv.listening(t)
	code, out, errs := runCmd(t, 30*time.Second, "perf", "-c", addr, "-P", "2", "-t", "1.5", "-l", "64K", "--get-server-output")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	_, so, ok := strings.Cut(out, "\nServer output:\n")
	if !ok {
		t.Fatalf("no server output:\n%s", out)
	}
	for _, re := range []string{
		`(?m)^Accepted connection from 127\.0\.0\.1:\d+$`,
		`(?m)^\[\s*\d+\] local 127\.0\.0\.1 port \d+ connected to 127\.0\.0\.1 port \d+$`,
		`(?m)^\[SUM\]\s+0\.00-1\.00\s+sec\s+[\d.]+ [KMG]?i?B\s+[\d.]+ Mbit/s$`,
		`(?m)^\[SUM\]\s+0\.00-[\d.]+\s+sec\s+[\d.]+ [KMG]?i?B\s+[\d.]+ Mbit/s\s+receiver$`,
	} {
		if !regexp.MustCompile(re).MatchString(so) {
			t.Errorf("server output lacks %s:\n%s", re, so)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^\[\s*\d+\] local `).FindAllString(so, -1)); n != 2 {
		t.Errorf("server output lists %d streams, want 2 (-P 2):\n%s", n, so)
	}
}

// --tcp-baseline -P N opens N plain TCP connections (on each path), as
// iperf3 -P N: a line per connection and [SUM] in every interval, with
// the sender's Retr and Cwnd of each connection's own socket; each
// connection's sender and receiver totals and their sums; and -J with N
// streams in start.connected, the intervals and end.streams, adding up.
func TestPerfBaselineParallel(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	srv := start(t, "perf", "-s", "--listen", "127.0.0.1:0")
	addr := srv.listening(t)
	interval := regexp.MustCompile(`(?m)^\[\s*(\d+|SUM)\]\s+[\d.]+-[\d.]+\s+sec\s+[\d.]+ [KMG]?i?B\s+[\d.]+ Mbit/s(\s+\d+)?(\s+[\d.]+ [KMG]?i?B)?\s*$`)
	total := regexp.MustCompile(`(?m)^\[\s*(\d+|SUM)\]\s+[\d.]+-[\d.]+\s+sec\s+[\d.]+ [KMG]?i?B\s+[\d.]+ Mbit/s\s+(\d+\s+)?(sender|receiver)$`)
	for _, tc := range []struct {
		args     []string
		conns    int
		receiver bool // -R: the client receives; no Retr nor Cwnd on its lines
	}{
		{[]string{"-P", "3", "-t", "1.2", "-l", "64K"}, 3, false},
		{[]string{"-P", "2", "-t", "1", "-l", "64K", "-B", "127.0.0.1,127.0.0.1", "-c", addr + "," + addr}, 4, false},
		{[]string{"-P", "2", "-t", "1", "-l", "64K", "-R"}, 2, true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"perf", "-c", addr, "--tcp-baseline"}, tc.args...)
			code, out, errs := runCmd(t, 30*time.Second, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s\n%s", code, errs, out)
			}
			if want := fmt.Sprintf("as %d plain TCP connections", tc.conns); !strings.Contains(out, want) {
				t.Errorf("header lacks %q:\n%s", want, out)
			}
			per := map[string]int{}
			for _, m := range interval.FindAllStringSubmatch(out, -1) {
				per[m[1]]++
				retr, cwnd := m[2] != "", m[3] != ""
				if tc.receiver && (retr || cwnd) || !tc.receiver && (!retr || cwnd != (m[1] != "SUM")) {
					t.Errorf("interval line %q (receiver %v): want Retr and Cwnd on a sender's connection, Retr on its [SUM], none on a receiver's", m[0], tc.receiver)
				}
			}
			if len(per) != tc.conns+1 || per["SUM"] < 1 {
				t.Errorf("interval lines of %v, want %d connections (0..%d) and [SUM]:\n%s", per, tc.conns, tc.conns-1, out)
			}
			for id := range tc.conns {
				if per[fmt.Sprint(id)] != per["SUM"] {
					t.Errorf("connection %d has %d interval lines, [SUM] %d:\n%s", id, per[fmt.Sprint(id)], per["SUM"], out)
				}
			}
			lines := total.FindAllStringSubmatch(out, -1)
			if len(lines) != 2*tc.conns+2 {
				t.Errorf("%d total lines, want %d (sender and receiver of each connection and of [SUM]):\n%s", len(lines), 2*tc.conns+2, out)
			}
			for _, m := range lines {
				if m[3] == "sender" && (m[2] != "") == tc.receiver {
					t.Errorf("total line %q (receiver %v): Retr on the sender's lines only when this side sent", m[0], tc.receiver)
				}
			}

			// The same test with -J: N streams everywhere, adding up.
			code, js, errs := runCmd(t, 30*time.Second, append(args, "-J")...)
			if code != 0 {
				t.Fatalf("-J: exit %d: %s", code, errs)
			}
			var r iperf3JSON
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				t.Fatalf("not one JSON object: %v\n%s", err, js)
			}
			if r.Start.TestStart.NumStreams != tc.conns || len(r.Start.Connected) != tc.conns || len(r.End.Streams) != tc.conns {
				t.Errorf("num_streams %d, %d connected, %d end.streams; want %d", r.Start.TestStart.NumStreams, len(r.Start.Connected), len(r.End.Streams), tc.conns)
			}
			for i, c := range r.Start.Connected {
				if c.Socket != i || len(c.Paths) != 1 {
					t.Errorf("start.connected[%d] = %+v; want socket %d on one path", i, c, i)
				}
			}
			var sent, recv int64
			for i, s := range r.End.Streams {
				if s.Sender.Socket != i || s.Sender.Bytes <= 0 || s.Receiver.Bytes <= 0 {
					t.Errorf("end.streams[%d] = %+v", i, s)
				}
				sent += s.Sender.Bytes
				recv += s.Receiver.Bytes
			}
			if sent != r.End.SumSent.Bytes || recv != r.End.SumReceived.Bytes || recv <= 0 {
				t.Errorf("end.streams add up to %d sent, %d received; sums %d, %d", sent, recv, r.End.SumSent.Bytes, r.End.SumReceived.Bytes)
			}
			if len(r.Intervals) == 0 {
				t.Fatalf("no intervals:\n%s", js)
			}
			for _, iv := range r.Intervals {
				var n int64
				for _, s := range iv.Streams {
					n += s.Bytes
					if tc.receiver != (s.SendCwnd == nil) {
						t.Errorf("interval stream %d: snd_cwnd %v (receiver %v)", s.Socket, s.SendCwnd, tc.receiver)
					}
				}
				if len(iv.Streams) != tc.conns || n != iv.Sum.Bytes {
					t.Errorf("interval of %d streams adding up to %d, sum %d; want %d streams", len(iv.Streams), n, iv.Sum.Bytes, tc.conns)
				}
			}
		})
	}
}
