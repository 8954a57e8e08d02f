package cli

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/braid-hpc/braid/perf"
	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/channel/ksctp"
	"github.com/braid-hpc/braid/transport/channel/sctpudp"
)

func sctpChannel(t *testing.T, transport string, args ...string) (channel.Kind, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := addSCTPFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return f.channel(transport)
}

func TestSCTPFlags(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name      string
		transport string
		args      []string
		want      channel.Kind // nil with err "": no knobs
		err       string
	}{
		{"none", "sctp-udp", nil, nil, ""},
		{"none over tcp", "tcp", nil, nil, ""},
		{"sctp-udp", "sctp-udp", []string{
			"--sctp-mtu", "1200", "--sctp-zero-checksum", "--sctp-sndbuf", "256K", "--sctp-rcvbuf", "2M",
			"--sctp-rwnd", "8M", "--sctp-stream-sndbuf", "1M", "--sctp-max-msg", "32K", "--sctp-rto-max", "200ms", "--sctp-nodelay",
		}, sctpudp.Kind{Config: sctpudp.Config{
			MTU: 1200, ZeroChecksum: true, SendBuffer: 256 << 10, ReceiveBuffer: 2 << 20,
			MaxReceiveBuffer: 8 << 20, StreamSendBuffer: 1 << 20, MaxMessageSize: 32 << 10, RTOMax: 200 * ms,
		}}, ""},
		{"sctp", "sctp", []string{
			"--sctp-nodelay=false", "--sctp-sack-delay", "40ms", "--sctp-sack-freq", "7", "--sctp-max-burst", "16",
			"--sctp-maxseg", "8K", "--sctp-rto-initial", "300ms", "--sctp-rto-min", "20ms", "--sctp-rto-max", "900ms",
			"--sctp-sndbuf", "1M", "--sctp-rcvbuf", "4M",
		}, ksctp.Kind{Config: ksctp.Config{
			Nagle: true, SACKDelay: 40 * ms, SACKFreq: 7, MaxBurst: 16, MaxSeg: 8 << 10,
			RTOInitial: 300 * ms, RTOMin: 20 * ms, RTOMax: 900 * ms, SendBuffer: 1 << 20, ReceiveBuffer: 4 << 20,
		}}, ""},
		{"sctp no burst limit", "sctp", []string{"--sctp-max-burst", "0"}, ksctp.Kind{Config: ksctp.Config{MaxBurst: -1}}, ""},
		{"sctp no delayed sack", "sctp", []string{"--sctp-sack-freq", "1"}, ksctp.Kind{Config: ksctp.Config{SACKFreq: 1}}, ""},
		{"sctp failover", "sctp", []string{"--sctp-hb-interval", "1s", "--sctp-path-max-retrans", "4", "--sctp-pf-threshold", "1"},
			ksctp.Kind{Config: ksctp.Config{HeartbeatInterval: time.Second, PathMaxRetrans: 4, PFThreshold: 1}}, ""},
		{"sctp pf at first timeout", "sctp", []string{"--sctp-pf-threshold", "0"}, ksctp.Kind{Config: ksctp.Config{PFThreshold: -1}}, ""},
		{"pf threshold over pion", "sctp-udp", []string{"--sctp-pf-threshold", "1"}, nil, "--sctp-pf-threshold: --transport sctp-udp cannot honour it: an sctp-udp association has one address"},
		{"pf threshold too large", "sctp", []string{"--sctp-pf-threshold", "70000"}, nil, "--sctp-pf-threshold: ksctp: PFThreshold 70000 out of range"},

		{"knobs over tcp", "tcp", []string{"--sctp-mtu", "1200"}, nil, "--sctp-mtu: --transport tcp has no SCTP knobs: they apply to --transport sctp or sctp-udp"},
		{"knobs over mptcp", "mptcp", []string{"--sctp-sack-freq", "2"}, nil, "--transport mptcp has no SCTP knobs"},
		{"sack freq over pion", "sctp-udp", []string{"--sctp-sack-freq", "7"}, nil, "--sctp-sack-freq: --transport sctp-udp cannot honour it: pion acknowledges every second packet or after 200 ms"},
		{"sack delay over pion", "sctp-udp", []string{"--sctp-sack-delay", "10ms"}, nil, "--sctp-sack-delay: --transport sctp-udp cannot honour it"},
		{"max burst over pion", "sctp-udp", []string{"--sctp-max-burst", "4"}, nil, "--sctp-max-burst: --transport sctp-udp cannot honour it: pion has no Max.Burst"},
		{"maxseg over pion", "sctp-udp", []string{"--sctp-maxseg", "1000"}, nil, "pion fragments at the MTU: set --sctp-mtu"},
		{"rto min over pion", "sctp-udp", []string{"--sctp-rto-min", "10ms"}, nil, "--sctp-rto-min: --transport sctp-udp cannot honour it"},
		{"nagle over pion", "sctp-udp", []string{"--sctp-nodelay=false"}, nil, "--sctp-nodelay=false: --transport sctp-udp cannot hold messages back"},
		{"mtu over kernel", "sctp", []string{"--sctp-mtu", "1200"}, nil, "--sctp-mtu: --transport sctp (kernel SCTP) cannot honour it: the kernel finds the path MTU itself: set the fragmentation point with --sctp-maxseg"},
		{"zero checksum over kernel", "sctp", []string{"--sctp-zero-checksum"}, nil, "--sctp-zero-checksum: --transport sctp (kernel SCTP) cannot honour it"},
		{"rwnd over kernel", "sctp", []string{"--sctp-rwnd", "1M"}, nil, "set --sctp-rcvbuf"},

		{"mtu too large", "sctp-udp", []string{"--sctp-mtu", "9000"}, nil, "--sctp-mtu: sctpudp: MTU 9000 out of range [256, 8192]"},
		{"bad size", "sctp-udp", []string{"--sctp-mtu", "lots"}, nil, "--sctp-mtu: bad size \"lots\""},
		{"rwnd below mtu", "sctp-udp", []string{"--sctp-rwnd", "1000", "--sctp-mtu", "1452"}, nil, "--sctp-mtu, --sctp-rwnd: sctpudp: MaxReceiveBuffer 1000 out of range [65536, 1 GiB]"},
		{"rwnd below a message", "sctp-udp", []string{"--sctp-rwnd", "32K"}, nil, "--sctp-rwnd: sctpudp: MaxReceiveBuffer 32768 out of range [65536, 1 GiB]: the receive window must hold one packet (MTU 8192) and one whole message (MaxMessageSize 65536)"},
		{"rto max too small", "sctp-udp", []string{"--sctp-rto-max", "1ms"}, nil, "--sctp-rto-max: sctpudp: RTOMax 1ms out of range [10ms, 24h0m0s]"},
		{"sack delay too long", "sctp", []string{"--sctp-sack-delay", "600ms"}, nil, "--sctp-sack-delay: ksctp: SACKDelay 600ms out of range [1ms, 500ms]"},
		{"sack freq negative", "sctp", []string{"--sctp-sack-freq", "-1"}, nil, "--sctp-sack-freq: ksctp: SACKFreq -1 out of range"},
		{"max burst negative", "sctp", []string{"--sctp-max-burst", "-3"}, nil, "--sctp-max-burst: -3 packets: want 1 to 65535, or 0 for no limit"},
		{"maxseg too small", "sctp", []string{"--sctp-maxseg", "100"}, nil, "--sctp-maxseg: ksctp: MaxSeg 100 out of range [512, 65516]"},
		{"rto max below kernel min", "sctp", []string{"--sctp-rto-max", "500ms"}, nil, "--sctp-rto-max: ksctp: RTOMin 1s above RTOMax 500ms"},
		{"rto min above max", "sctp", []string{"--sctp-rto-min", "2s", "--sctp-rto-max", "1s"}, nil, "--sctp-rto-max, --sctp-rto-min: ksctp: RTOMin 2s above RTOMax 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sctpChannel(t, tc.transport, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("channel kind %#v, want %#v", got, tc.want)
			}
		})
	}
}

// The help of every command that takes --transport lists the knobs.
func TestSCTPFlagsHelp(t *testing.T) {
	for _, cmd := range []string{"perf", "send", "recv", "server", "worker"} {
		code, out, _ := runCmd(t, 10*time.Second, cmd, "-h")
		if code != 0 {
			t.Fatalf("%s -h: exit %d", cmd, code)
		}
		for _, k := range sctpKnobs {
			if !strings.Contains(out, "-"+k.name) {
				t.Errorf("%s -h lacks -%s", cmd, k.name)
			}
		}
	}
}

func TestSCTPFlagsRefused(t *testing.T) {
	t.Setenv("BRAID_KEY", testKey)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"perf", "-c", "127.0.0.1:9", "--sctp-mtu", "1200"}, "--transport tcp has no SCTP knobs"},
		{[]string{"perf", "-c", "127.0.0.1:9", "--transport", "sctp-udp", "--sctp-sack-freq", "7"}, "--sctp-sack-freq: --transport sctp-udp cannot honour it"},
		{[]string{"send", "--transport", "sctp", "--sctp-zero-checksum", "--to", "127.0.0.1:9", "x"}, "--sctp-zero-checksum: --transport sctp (kernel SCTP) cannot honour it"},
		{[]string{"server", "--data", t.TempDir(), "--sctp-mtu", "1200"}, "--transport tcp has no SCTP knobs"},
		{[]string{"worker", "--server", "http://127.0.0.1:9", "--transport", "sctp-udp", "--sctp-mtu", "100"}, "--sctp-mtu: sctpudp: MTU 100 out of range"},
	} {
		code, _, errs := runCmd(t, 10*time.Second, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// braid perf over sctp-udp with knobs on both ends: the server with
// 1200-byte packets, the client with 8192-byte ones, zero checksum on both
// (so it is in use), an RTO cap and per-stream send buffers.
func TestPerfSCTPKnobs(t *testing.T) {
	checkLeaks(t)
	t.Setenv("BRAID_KEY", testKey)
	srv := start(t, "perf", "-s", "--listen", "127.0.0.1:0", "--transport", "sctp-udp",
		"--sctp-mtu", "1200", "--sctp-zero-checksum", "--sctp-rwnd", "2M")
	addr := srv.listening(t)
	for _, args := range [][]string{
		{"--time", "0.5", "-P", "2"},
		{"--mode", "pingpong", "-l", "100K", "--count", "10"},
	} {
		code, out, errs := runCmd(t, 30*time.Second, append([]string{"perf", "-c", addr, "--json", "--transport", "sctp-udp",
			"--sctp-mtu", "8192", "--sctp-zero-checksum", "--sctp-rto-max", "200ms", "--sctp-stream-sndbuf", "256K", "--sctp-sndbuf", "256K"}, args...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errs)
		}
		var ip perf.IperfReport
		if err := json.Unmarshal([]byte(out), &ip); err != nil || ip.Braid == nil {
			t.Fatalf("%v\n%s", err, out)
		}
		rep := ip.Braid
		if rep.Transport != "sctp-udp" || rep.ThroughputMbps <= 0 || rep.Bytes <= 0 {
			t.Errorf("%q: transport %q, %v Mbit/s, %d bytes", args, rep.Transport, rep.ThroughputMbps, rep.Bytes)
		}
	}
	srv.cancel()
	if code := srv.wait(t, 10*time.Second); code != 0 {
		t.Errorf("server exit %d: %s", code, srv.err.String())
	}
}
