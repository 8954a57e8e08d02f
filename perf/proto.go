package perf

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/transport/channel"
)

// The perf control protocol. The client opens the session's first stream
// (the control stream) and exchanges JSON messages on it:
//
//	client                         server
//	Hello (the test)        ──▶
//	                        ◀──    Ready (error; baseline token and ports; braid join cookie)
//	[braid: a second session, the data session, whose first stream
//	 carries Hello{Join: cookie}]
//	[baseline: k plain TCP connections, then]
//	                        ◀──    Ready (go)
//	data on the data session's streams, or the connections
//	                        ◀──    Result (the server's counts)
//	Summary (the figures)   ──▶
//	                        ◀──    ServerOutput (if Hello.ServerOutput)
//	close
//
// Bulk: the sender writes messages of Size on Streams streams; the
// receiver counts what arrives for Seconds from the first byte, then
// closes the data session at once, dropping what is still queued (see
// bulk.go).
// Pingpong: the client writes a message, the server echoes it; Count round
// trips per stream or Seconds, whichever ends first.

// Version is the version of the perf control protocol. Version 2 runs
// the data of a braid test on a data session of its own, which joins the
// test with the cookie of Ready.Join. Version 3 adds Hello's Bitrate,
// Bytes, Omit, ServerOutput and Socket, which an older server would
// ignore.
const Version = 3

// Port is the port of perf addresses given without one.
const Port = 7201

// Bounds a server enforces on what a client asks for.
const (
	maxSize    = 1 << 30
	maxStreams = 1024
	MaxSeconds = 24 * 3600 // the longest test, in seconds
	maxCount   = 100_000_000
	// maxBaselineConns bounds the plain TCP connections of a
	// --tcp-baseline test (-P times the paths).
	maxBaselineConns = 256
)

// Hello is the client's first control message: the test to run.
type Hello struct {
	Version  int     `json:"version"`
	Mode     string  `json:"mode"` // "bulk" or "pingpong"
	Size     int64   `json:"size"`
	Seconds  float64 `json:"seconds"`
	Streams  int     `json:"streams"`
	Count    int     `json:"count"`
	Reverse  bool    `json:"reverse"`
	Baseline bool    `json:"baseline"`
	Paths    int     `json:"paths"`
	// Bitrate paces the bulk sender to this many bits per second in all
	// (iperf3 -b); 0: unlimited.
	Bitrate int64 `json:"bitrate,omitempty"`
	// Bytes, if not 0, ends a bulk test when the sender has sent this
	// many bytes, rounded up to whole messages (iperf3 -n, -k), instead
	// of after Seconds.
	Bytes int64 `json:"bytes,omitempty"`
	// Omit is a warm-up in seconds before the measured Seconds (iperf3
	// -O): what moves in it is reported as omitted intervals and left out
	// of the totals.
	Omit float64 `json:"omit,omitempty"`
	// ServerOutput asks the server to send its own report of the test
	// after the client's Summary (iperf3 --get-server-output).
	ServerOutput bool `json:"server_output,omitempty"`
	// Bidir runs a bulk test in both directions at once (iperf3
	// --bidir): Streams streams each way.
	Bidir bool `json:"bidir,omitempty"`
	// Socket is set on the data session's channel sockets at both ends
	// (iperf3 -C, -w).
	Socket channel.SocketOptions `json:"socket,omitzero"`
	// Join, alone, makes the session a test's data session: the cookie
	// of the test's Ready.
	Join []byte `json:"join,omitempty"`
}

func (h *Hello) validate() error {
	switch {
	case h.Version != Version:
		return fmt.Errorf("perf protocol version %d, this server speaks %d: use the same braid version on both hosts", h.Version, Version)
	case h.Mode != "bulk" && h.Mode != "pingpong":
		return fmt.Errorf("unknown mode %q (want bulk or pingpong)", h.Mode)
	case h.Size < 1 || h.Size > maxSize:
		return fmt.Errorf("size %d out of range 1..%d", h.Size, maxSize)
	case h.Streams < 1 || h.Streams > maxStreams:
		return fmt.Errorf("streams %d out of range 1..%d", h.Streams, maxStreams)
	case !(h.Seconds > 0 && h.Seconds <= MaxSeconds):
		return fmt.Errorf("time %v s out of range (0, %d]", h.Seconds, MaxSeconds)
	case h.Count < 0 || h.Count > maxCount:
		return fmt.Errorf("count %d out of range 0..%d", h.Count, maxCount)
	case h.Bytes < 0 || (h.Bytes > 0 && h.Mode != "bulk"):
		return fmt.Errorf("bytes %d: a byte count ends bulk tests only", h.Bytes)
	case h.Bytes > 0 && h.Bytes < int64(h.Streams)*h.Size:
		return fmt.Errorf("bytes %d: less than one %d-byte message on each of the %d streams", h.Bytes, h.Size, h.Streams)
	case !(h.Omit >= 0 && h.Omit <= MaxSeconds):
		return fmt.Errorf("omit %v s out of range [0, %d]", h.Omit, MaxSeconds)
	case h.Omit > 0 && h.Bytes > 0:
		return fmt.Errorf("omit %v s: a test ended by a byte count has no warm-up to omit", h.Omit)
	case h.Baseline && h.Streams*h.Paths > maxBaselineConns:
		return fmt.Errorf("-P %d over %d paths: --tcp-baseline would open %d plain TCP connections, more than %d", h.Streams, h.Paths, h.Streams*h.Paths, maxBaselineConns)
	case h.Omit > 0 && h.Baseline:
		return fmt.Errorf("omit %v s: --tcp-baseline has no warm-up to omit", h.Omit)
	case h.Bidir && (h.Mode != "bulk" || h.Reverse || h.Baseline || h.Bytes > 0):
		return errors.New("--bidir runs a bulk test both ways for a time: not with pingpong, --reverse, --tcp-baseline or a byte count")
	case h.Socket.Check() != nil:
		return h.Socket.Check()
	case !h.Socket.IsZero() && h.Baseline:
		return errors.New("congestion control and socket buffers (-C, -w) are set on braid's channels, not on --tcp-baseline's connections")
	case h.Bitrate < 0:
		return fmt.Errorf("bitrate %d: want bits per second, 0 for unlimited", h.Bitrate)
	case h.Paths < 1 || h.Paths > 64:
		return fmt.Errorf("paths %d out of range 1..64", h.Paths)
	case h.Baseline && h.Mode == "pingpong" && h.Size < int64(h.baselineConns()):
		return fmt.Errorf("size %d is smaller than the %d connections to split it over", h.Size, h.baselineConns())
	}
	return nil
}

// baselineConns is how many plain TCP connections a --tcp-baseline test
// opens: Streams (-P) on each path, as iperf3 -P opens that many; the
// i-th rides path i mod Paths.
func (h Hello) baselineConns() int { return h.Streams * h.Paths }

func (h *Hello) duration() time.Duration {
	if h.Bytes > 0 {
		return MaxSeconds * time.Second // the byte count ends it
	}
	return time.Duration(h.Seconds * float64(time.Second))
}

// omit is the warm-up before the measured duration.
func (h *Hello) omit() time.Duration { return time.Duration(h.Omit * float64(time.Second)) }

// Ready answers Hello. For a baseline test the first Ready
// carries the token and the port per path of the plain TCP listeners; a
// second one follows once every connection arrived.
type Ready struct {
	Error string `json:"error,omitempty"`
	// The server's settings, which shape what it sends (echoes, reverse).
	Stripe string `json:"stripe,omitempty"`
	Policy string `json:"policy,omitempty"`
	Frag   int    `json:"frag,omitempty"`
	Token  []byte `json:"token,omitempty"`
	// Join is the cookie of a braid test: the client dials a data session
	// and sends it in a Hello on its first stream.
	Join  []byte `json:"join,omitempty"`
	Ports []int  `json:"ports,omitempty"` // by path id
}

// Result is what the server saw.
type Result struct {
	Error string `json:"error,omitempty"`
	// Bytes and Messages of payload received (bulk), sent (reverse) or
	// echoed (pingpong).
	Bytes    int64 `json:"bytes"`
	Messages int64 `json:"messages"`
	// Seconds is the server's interval: from its ready message to the end
	// of the last stream (receiving) or to the peer's acknowledgement of
	// the last byte (sending).
	Seconds float64 `json:"seconds"`
	// Paths is the server's view of each path over the test.
	Paths []ServerPath `json:"paths"`
	// Stripe counts the server's striping control messages.
	Stripe transport.StripeStats `json:"stripe"`
	// StreamBytes counts payload per stream: received (bulk), sent
	// (reverse) or echoed (pingpong).
	StreamBytes []StreamBytes `json:"stream_bytes,omitempty"`
	// Rev is what the server sent in a --bidir test.
	Rev *Sent `json:"rev,omitempty"`
	// TCP is what the kernel measured of the server's TCP channels when
	// it sent (reverse).
	TCP *TCPFigures `json:"tcp,omitempty"`
	// Congestion is the congestion control of the server's first data
	// channel, for a TCP channel.
	Congestion string `json:"congestion,omitempty"`
	// CPUUser and CPUSys are the server process's CPU seconds over the
	// test.
	CPUUser float64 `json:"cpu_user_s,omitempty"`
	CPUSys  float64 `json:"cpu_sys_s,omitempty"`
	// at, when set, is the server's path statistics at the end of the
	// test, taken before the sender's queue drained.
	at []transport.PathStats
	// Conns counts payload per plain TCP connection of a baseline test:
	// received (bulk), sent (reverse) or echoed (pingpong).
	Conns []int64 `json:"conns,omitempty"`
}

// ServerOutput is the server's own report of a test, for a client that
// asked with Hello.ServerOutput: its iperf3-shaped JSON when the server
// prints JSON (-J), else its text lines.
type ServerOutput struct {
	JSON *IperfReport `json:"json,omitempty"`
	Text string       `json:"text,omitempty"`
}

// Sent is what a bulk sender wrote: payload, whole messages, and the
// seconds from its start to the receiver's closing; per stream.
type Sent struct {
	Bytes       int64         `json:"bytes"`
	Messages    int64         `json:"messages"`
	Seconds     float64       `json:"seconds"`
	StreamBytes []StreamBytes `json:"stream_bytes,omitempty"`
	// Retransmits counts the bytes the sender sent again on another path
	// after a path failed.
	Retransmits int64 `json:"retransmits"`
	// TCP is what the kernel measured of the sender's TCP channels.
	TCP *TCPFigures `json:"tcp,omitempty"`
}

// StreamBytes is one stream's payload.
type StreamBytes struct {
	ID    int   `json:"id"`
	Bytes int64 `json:"bytes"`
}

// ServerPath is one path as the server saw it.
type ServerPath struct {
	ID       int    `json:"id"`
	Remote   string `json:"remote"` // the client's address
	Local    string `json:"local"`
	Received int64  `json:"received"`
	Sent     int64  `json:"sent"`
	// DupReceived counts received bytes that were copies of bytes another
	// path carried too (included in Received).
	DupReceived int64 `json:"dup_received,omitempty"`
}

// Summary tells the server the client's figures for its log line.
type Summary struct {
	ThroughputMbps float64 `json:"throughput_mbps"`
	Seconds        float64 `json:"seconds"`
	Bytes          int64   `json:"bytes"`
	RTTus          float64 `json:"rtt_us,omitempty"`
	EffectiveMbps  float64 `json:"effective_mbps,omitempty"`
	// What the client sent in bulk and over how long, and its CPU
	// seconds, for the server's iperf3-shaped report.
	SentBytes   int64   `json:"sent_bytes,omitempty"`
	SentSeconds float64 `json:"sent_seconds,omitempty"`
	CPUUser     float64 `json:"cpu_user_s,omitempty"`
	CPUSys      float64 `json:"cpu_sys_s,omitempty"`
	// StreamBytes is the client's count per stream: sent (bulk and
	// pingpong) or received (reverse).
	StreamBytes []StreamBytes `json:"stream_bytes,omitempty"`
}

func stripeDelta(a, b transport.StripeStats) transport.StripeStats {
	return transport.StripeStats{Segments: b.Segments - a.Segments, Starts: b.Starts - a.Starts, Ends: b.Ends - a.Ends}
}

// fillPattern fills b with a cheap pseudo-random pattern so no layer can
// compress it.
func fillPattern(b []byte) {
	x := uint64(0x9e3779b97f4a7c15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}

// latest records the latest of several moments.
type latest struct {
	mu sync.Mutex
	t  time.Time
}

// mark records now.
func (l *latest) mark() {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.After(l.t) {
		l.t = now
	}
}

// markAt records t.
func (l *latest) markAt(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.After(l.t) {
		l.t = t
	}
}

func (l *latest) get() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t
}
