package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/braid-hpc/braid/perf"
	"github.com/braid-hpc/braid/transport"
)

func init() {
	register(&command{
		name:    "perf",
		summary: "measure throughput and round-trip time over every path (like iperf3)",
		run:     runPerf,
	})
}

const perfSynopsis = `-s [--listen A1,A2,...] | -c B1,B2,... [-B A1,A2,...] [flags]`

const perfDescription = `
Measures a braid session between two hosts, like iperf3, with iperf3's
flags: -s, -c, -p, -t, -P, -R, -J, -i, -l, -B, -1 and more (below).
Start a server on one host with one address per network (or, without
--listen, on every address), then a client on the other with the server's address on each network (the
i-th -B/--from address is the local source of the i-th path). Addresses
without a port use --port, 7201 by default.

  server:  braid perf -s --listen 10.1.0.2,10.2.0.2
  client:  braid perf -c 10.1.0.2,10.2.0.2 -t 10 -P 4
           braid perf -c 10.1.0.2,10.2.0.2 -R -J > result.json
           braid perf -c 10.1.0.2,10.2.0.2 --mode pingpong -l 1M --count 100

Modes:
  bulk      the client writes messages of --length on --parallel streams;
            the server counts what arrives for --time seconds from the
            first byte, then ends the test, dropping what is still queued,
            so the test lasts --time however fast the link, and throughput
            is receiver bytes over that interval (-R: the server sends, the
            client counts).
  pingpong  the client writes a message of --length, the server echoes it;
            --count round trips per stream or --time, whichever ends first,
            after one warm-up round trip. Effective bandwidth is the paper's
            eq. 1: (8*size/1e6) / (RTT/2) Mbit/s with RTT the mean round trip;
            throughput is payload in both directions over the elapsed time.

--tcp-baseline measures plain TCP connections striped by hand instead of
braid, -P of them on each path (one by default; on one path, -P N opens N
connections, as iperf3 -P N), with the same size and time: in bulk each
connection sends its own bytes, and its lines are those of an iperf3
stream (a line per connection, then [SUM]); in pingpong each message is
split into as many equal parts as connections, sent in parallel and
echoed. The server needs no extra flag: the braid
control session asks it to open plain TCP listeners, on an ephemeral port of
each address the paths arrived on (or on that port plus
--baseline-port-offset, for firewalls), which it closes after the test. The
connections prove themselves with a token sent over the braid session.

More of iperf3's flags, so that an iperf3 script runs with the binary
name changed: -n/--bytes and -k/--blockcount end a bulk test after a byte
or message count instead of --time; -b/--bitrate paces the bulk sender;
-f/--format sets the text report's unit; -T/--title prefixes every line;
--logfile sends the output to a file; -4/-6 accept only IPv4/IPv6
addresses; --connect-timeout is in milliseconds; -v/--version prints the
version and -V/--verbose (or -d/--debug) logs path events, as iperf3 has
them. -C/--congestion and -w/--window set the
congestion control and the socket buffers of every data channel at both
ends (tcp and mptcp channels). -Z, -N and --forceflush are accepted:
braid's bulk senders always write without a copy, its TCP channels always
set TCP_NODELAY, output is never buffered. --bidir runs
a bulk test both ways at once. -O/--omit
runs a warm-up first and leaves it out of the totals; --get-server-output
prints the server's own report of the test after the client's: with a
text server, its line for the test, the streams it accepted, its interval
lines per stream and its totals (iperf3's server_output_text); with a -J
server, its JSON (server_output_json). -D/--daemon
runs the server in the background (the command returns once it listens)
and -I/--pidfile writes its pid, removed when it exits; -u fails with the
reason (braid measures reliable streams).

--stripe, --path-policy and --frag shape what each side sends: the server's
own flags apply to its echoes and to -R data, so start it with the same ones
(the client warns when they differ).

Output: a header; every --interval seconds a line per stream (bytes and
rate) and, with several streams, their [SUM], as iperf3 prints them; on
the sending side over TCP each line adds Retr (segments retransmitted in
the interval) and Cwnd (the congestion window at its end). A braid stream
has no socket of its own: its messages are striped over the session's
channels, one a path, so its Retr is the sum over the channels, its Cwnd
the sum of their windows (the same on every stream's line), and [SUM]'s
Retr counts each channel once; -J's intervals have them as retransmits,
snd_cwnd and rtt (the channels' mean, in µs). A --tcp-baseline stream is
one TCP connection, with its own figures. With --paths
also a line of each path's rate; each stream's sender and receiver totals as
iperf3 prints them, and a summary with per-path bytes and Mbit/s (bytes the
client sent in bulk, received with -R, both in pingpong). -J/--json prints
one JSON object shaped like iperf3's -J output (start, intervals, end with
sum_sent and sum_received, error on failure) plus a "braid" section with
the per-path figures. The server prints one line per finished test (with
-J, one JSON object per test) and serves clients concurrently until
interrupted (or after one test with -1/--once).`

func runPerf(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "perf", perfSynopsis, perfDescription)
	sf := addSessionFlags(fs)
	server := fs.BoolP("server", "s", false, "run the server")
	listen := fs.String("listen", "", "server: comma-separated `addresses` to listen on, one per network (default: every address, on --port)")
	once := fs.BoolP("once", "1", false, "server: exit after one test")
	alias(fs, "one-off", "once", "")
	portOffset := fs.Int("baseline-port-offset", 0, "server: plain TCP listeners of --tcp-baseline use each listen port plus this offset `n` (default: ephemeral ports)")
	client := fs.StringP("client", "c", "", "client: comma-separated server `addresses`, one per path")
	port := fs.IntP("port", "p", perf.Port, "`port` of the addresses given without one")
	from := fs.StringP("from", "B", "", "client: comma-separated local source `addresses`, the i-th for the i-th path; server: listen on these addresses only (with --port), as iperf3 -s -B")
	mode := fs.String("mode", "bulk", "`mode`: bulk or pingpong")
	withChoices(fs, "mode", "bulk", "pingpong")
	size := fs.StringP("length", "l", "1M", "message `size` in bytes, K/M/G suffixes (powers of 1024)")
	alias(fs, "size", "length", "use -l/--length, as in iperf3 (--size is an image size in braid local and sample)")
	seconds := fs.Float64P("time", "t", 10, "test duration in `seconds` (pingpong: upper bound)")
	streams := fs.IntP("parallel", "P", 1, "run `n` parallel streams")
	alias(fs, "streams", "parallel", "use -P/--parallel, as in iperf3 and braid send")
	interval := fs.Float64P("interval", "i", 1, "`seconds` between interval reports (0: none)")
	count := fs.Int("count", 100, "pingpong: `n` round trips per stream (0: as many as --time allows)")
	reverse := fs.BoolP("reverse", "R", false, "bulk: the server sends, the client receives")
	bidir := fs.Bool("bidir", false, "bulk: both directions at once, --parallel streams each way, as iperf3 --bidir (the summary and -J give each direction)")
	baseline := fs.Bool("tcp-baseline", false, "measure k plain TCP connections striped by hand instead of braid")
	sctp := fs.Bool("sctp", false, "as iperf3 --sctp: kernel SCTP channels, the same as --transport sctp (--transport sctp-udp runs SCTP in user space where the kernel has none)")
	showPaths := fs.Bool("paths", false, "also print an interval line of each path's rate (braid's own, under a heading of its own)")
	asJSON := fs.BoolP("json", "J", false, "print one JSON object shaped like iperf3's -J output instead of text")
	ix := addIperfFlags(fs)
	obs := addObsFlags(fs, "perf server (-s)")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if *ix.version {
		printPerfVersion(env.Stdout)
		return 0
	}
	orig := env // -D reports to the terminal it was started from
	if *ix.logfile != "" {
		// As iperf3 --logfile: every line the command prints goes to the
		// file, appended.
		f, err := os.OpenFile(*ix.logfile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			env.Errorf("perf: --logfile: %v", err)
			return 1
		}
		defer f.Close()
		env = &Env{Stdout: f, Stderr: f}
	}
	if fs.Changed("timestamps") && !*asJSON {
		// As iperf3 --timestamps: the time of each line, before its title.
		format := *ix.timestamps
		env = &Env{Stdout: &titleWriter{w: env.Stdout, prefixOf: func() string { return strftime(time.Now(), format) }}, Stderr: env.Stderr}
	}
	if *ix.title != "" && !*asJSON {
		env = &Env{Stdout: &titleWriter{w: env.Stdout, prefix: *ix.title + ":  "}, Stderr: env.Stderr}
	}
	if *ix.debug {
		*sf.verbose = true
	}
	// With -J a client's failure after the flags parse is a JSON object
	// with "error" on stdout, as iperf3 -J writes it.
	fail := func(code int, format string, args ...any) int {
		env.Errorf("perf: "+format, args...)
		if *asJSON && !*server {
			msg := fmt.Sprintf(format, args...)
			_ = printJSON(env.Stdout, &perf.IperfReport{Intervals: []perf.IperfInterval{}, Error: msg, Title: *ix.title})
		}
		return code
	}
	if err := ix.check(fs, *server); err != nil {
		return fail(2, "%v", err)
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected arguments %q", fs.Args())
	}
	if *server == (*client != "") {
		code := fail(2, "give either -s (server) or -c ADDRESSES (client)")
		helpHint(env, fs.Name())
		return code
	}
	if *port < 1 || *port > 65535 {
		return fail(2, "--port %d out of range 1..65535", *port)
	}
	if !(*interval >= 0 && *interval <= perf.MaxSeconds) {
		return fail(2, "--interval %v: want seconds, 0 for none", *interval)
	}
	if *sctp {
		if fs.Changed("transport") && *sf.transport != "sctp" {
			return fail(2, "--sctp is --transport sctp: not with --transport %s", *sf.transport)
		}
		*sf.transport = "sctp"
	}
	cfg, err := sf.config(env)
	if err != nil {
		return fail(exitCode(err), "%v", err)
	}
	if *server {
		switch {
		case fs.Changed("listen") && fs.Changed("from"):
			return fail(2, "give the server's addresses with --listen or -B, not both")
		case fs.Changed("from"):
			// As iperf3 -s -B: listen on these addresses only.
			*listen = *from
		case !fs.Changed("listen"):
			*listen = ":" + strconv.Itoa(*port)
		}
		addrs, err := addrList(*listen, *port)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no address given")
		}
		if err != nil {
			env.Errorf("perf: --listen needs one host:port per network: %v", err)
			return 2
		}
		if *portOffset < 0 || *portOffset > 65535 {
			env.Errorf("perf: --baseline-port-offset %d out of range", *portOffset)
			return 2
		}
		if *ix.daemon && os.Getenv(daemonEnv) != "1" {
			return daemonize(orig, args)
		}
		ready := daemonReady()
		if *ix.pidfile != "" {
			remove, err := writePidFile(*ix.pidfile)
			if err != nil {
				ready(err)
				env.Errorf("perf: %v", err)
				return 1
			}
			defer remove()
		}
		return perfServe(ctx, env, addrs, cfg, *once, *portOffset, *asJSON, time.Duration(*interval*float64(time.Second)), obs, ready)
	}

	if *obs.metrics != "" {
		code := fail(2, "--metrics goes with -s: the server's side of the tests keeps the metrics")
		helpHint(env, fs.Name())
		return code
	}
	if fs.Changed("affinity") {
		if err := pinProcess(*ix.affinity); err != nil {
			return fail(2, "%v", err)
		}
	}
	stopObs, err := obs.start(cfg.Logger, nil)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer stopObs()
	o := &perf.Options{Config: cfg, Mode: *mode, Seconds: *seconds, Streams: *streams, Count: *count,
		Reverse: *reverse, Baseline: *baseline, Interval: *interval,
		ConnectTimeout: time.Duration(*ix.connectTimeout) * time.Millisecond, Bitrate: ix.bps,
		Omit: *ix.omit, ServerOutput: *ix.serverOutput, Socket: ix.socket, Bidir: *bidir}
	if o.Paths, err = dialPaths(*client, *from, *port); err == nil {
		err = ix.family(o.Paths)
	}
	if err != nil {
		return fail(2, "%v", err)
	}
	if o.Size, err = parseSize(*size); err != nil {
		return fail(2, "--length: %v", err)
	}
	if err := o.Validate(); err != nil {
		return fail(2, "%v", err)
	}
	if o.Reverse && o.Mode != "bulk" {
		return fail(2, "--reverse applies to bulk mode only")
	}
	if o.Bytes, err = ix.byteCount(fs, o.Size); err != nil {
		return fail(2, "%v", err)
	}
	if err := o.Validate(); err != nil {
		return fail(2, "%v", err)
	}
	if o.Bytes > 0 && o.Baseline {
		return fail(2, "--bytes/--blockcount end braid's bulk tests only (not --tcp-baseline)")
	}
	if !o.Socket.IsZero() && cfg.Transport != "" && cfg.Transport != "tcp" && cfg.Transport != "mptcp" {
		return fail(2, "-C, -w, -M, -S and --dscp set TCP sockets: the %s channels have none (use --transport tcp or mptcp)", cfg.Transport)
	}
	if o.Bitrate > 0 && (o.Mode != "bulk" || o.Baseline) {
		return fail(2, "--bitrate paces braid's bulk senders only (not pingpong or --tcp-baseline)")
	}
	o.Warn = func(msg string) { env.Errorf("perf: warning: %s", msg) }
	if !*asJSON {
		printPerfHeader(env.Stdout, o)
		if o.Interval > 0 {
			var mu sync.Mutex // the two kinds of interval lines come from two samplers
			if *showPaths {
				o.OnInterval = func(i int, e perf.Interval) {
					mu.Lock()
					defer mu.Unlock()
					printInterval(env.Stdout, o.Mode, i, e, ix.unit)
				}
			}
			o.OnStreamInterval = func(i int, iv perf.IperfInterval) {
				mu.Lock()
				defer mu.Unlock()
				printStreamInterval(env.Stdout, i, iv, ix.unit)
			}
		}
	}
	rep, ip, err := perf.Run(ctx, o)
	ip.Title, ip.ExtraData = *ix.title, *ix.extraData
	if *asJSON {
		// Like iperf3 -J, a failure is a JSON object too, with "error".
		if perr := printJSON(env.Stdout, ip); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		env.Errorf("perf: %v", err)
		return 1
	}
	if !*asJSON {
		printStreamTotals(env.Stdout, ip, ix.unit)
		printPerfSummary(env.Stdout, rep, ix.unit)
		printServerOutput(env.Stdout, ip)
	}
	return 0
}

// printServerOutput prints the server's report that --get-server-output
// fetched, after the client's, as iperf3 prints it.
func printServerOutput(w io.Writer, ip *perf.IperfReport) {
	switch {
	case ip.ServerOutputText != "":
		fmt.Fprintf(w, "\nServer output:\n%s", ip.ServerOutputText)
		if !strings.HasSuffix(ip.ServerOutputText, "\n") {
			fmt.Fprintln(w)
		}
	case ip.ServerOutputJSON != nil:
		fmt.Fprintln(w, "\nServer JSON output:")
		_ = printJSON(w, ip.ServerOutputJSON)
	}
}

// perfServe listens on addrs and serves tests until ctx ends, or after the
// first test with once, printing a line (or with asJSON an iperf3-shaped
// object) per test.
//
// ready is told once that the server listens (nil), or why it could not.
func perfServe(ctx context.Context, env *Env, addrs []string, cfg *transport.Config, once bool, portOffset int, asJSON bool, interval time.Duration, obs *obsFlags, ready func(error)) int {
	srv := perf.NewServer(cfg)
	srv.PortOffset, srv.Interval = portOffset, interval
	stopObs, err := obs.start(cfg.Logger, srv.MetricsHandler())
	if err != nil {
		ready(err)
		env.Errorf("perf: %v", err)
		return 1
	}
	defer stopObs()
	ln, err := transport.Listen(ctx, addrs, cfg)
	if err != nil {
		ready(err)
		env.Errorf("perf: %v", err)
		return 1
	}
	defer ln.Close()
	var bound []string
	for _, a := range ln.Addrs() {
		bound = append(bound, a.String())
	}
	// With --json stdout holds only the tests' JSON objects.
	out := env.Stdout
	if asJSON {
		out = env.Stderr
	}
	fmt.Fprintf(out, "braid perf: listening on %s\n", strings.Join(bound, ","))
	ready(nil)
	var mu sync.Mutex // serializes output lines
	printf := func(format string, args ...any) {
		fmt.Fprintf(env.Stdout, time.Now().Format("15:04:05")+" "+format+"\n", args...)
	}
	if !asJSON {
		// What a client with --get-server-output gets: the line this
		// server prints for the test and the server's whole report.
		srv.Text = func(t *perf.Test) string { return perfServerReport(time.Now(), t, rateUnits["m"]) }
	}
	srv.Done = func(t *perf.Test) {
		mu.Lock()
		defer mu.Unlock()
		if asJSON && t.Iperf != nil {
			if err := printJSON(env.Stdout, t.Iperf); err != nil {
				env.Errorf("perf: %v", err)
			}
		}
		switch {
		case t.Err != nil && ctx.Err() == nil:
			if asJSON {
				env.Errorf("perf: test from %s failed: %v", t.Peer, t.Err)
			} else {
				printf("test from %s failed: %v", t.Peer, t.Err)
			}
		case t.Err == nil && !asJSON:
			printf("%s", perfTestLine(t))
		}
	}
	err = srv.Serve(ctx, ln, once)
	switch {
	case errors.Is(err, perf.ErrTestFailed):
		return 1 // Done printed why
	case err != nil:
		env.Errorf("perf: %v", err)
		return 1
	}
	return 0
}

// perfTestLine is the server's line for a test that ended well.
func perfTestLine(t *perf.Test) string {
	h, res, sum := &t.Hello, t.Result, t.Summary
	kind := h.Mode
	if h.Reverse {
		kind += " reverse"
	}
	if h.Baseline {
		kind += " tcp-baseline"
	}
	if h.Bidir {
		kind += " bidir, client -> server,"
	}
	what := fmt.Sprintf("%s from %s: %s, %s, %s", kind, t.Peer, plural(h.Paths, "path", "paths"),
		plural(h.Streams, "stream", "streams"), formatBytes(h.Size))
	if h.Mode == "pingpong" {
		return fmt.Sprintf("%s: echoed %d messages, rtt %s, effective %.1f Mbit/s", what, res.Messages, fmtUs(sum.RTTus), sum.EffectiveMbps)
	}
	return fmt.Sprintf("%s: %.1f Mbit/s (%s in %.2f s at the receiver)", what, sum.ThroughputMbps, formatBytes(sum.Bytes), sum.Seconds)
}

// perfServerReport is the server's own report of test t, as iperf3's
// server prints one and --get-server-output returns it
// (server_output_text): the line this server prints for the test, the
// client's address, the streams (start.connected), the server's interval
// lines per stream (every --interval of the server) and its totals per
// stream, all measured by the server.
func perfServerReport(now time.Time, t *perf.Test, u rateUnit) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", now.Format("15:04:05"), perfTestLine(t))
	ip := t.Iperf
	if ip == nil {
		return b.String()
	}
	fmt.Fprintf(&b, "Accepted connection from %s\n", t.Peer)
	for _, c := range ip.Start.Connected {
		fmt.Fprintf(&b, "[%3d] local %s port %d connected to %s port %d\n", c.Socket, c.LocalHost, c.LocalPort, c.RemoteHost, c.RemotePort)
	}
	for i, iv := range ip.Intervals {
		printStreamInterval(&b, i, iv, u)
	}
	printStreamTotals(&b, ip, u)
	return b.String()
}

// printJSON prints v as indented JSON and a newline.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// printPerfHeader prints the test's settings and paths before it runs.
func printPerfHeader(w io.Writer, o *perf.Options) {
	r := o.Report()
	what := r.Mode
	if r.Reverse {
		what += " (reverse: the server sends)"
	}
	// How the test ends: after -t seconds, or once -n bytes (-k
	// messages, as bytes) are sent.
	until := fmt.Sprintf("%gs", o.Seconds)
	if o.Bytes > 0 {
		until = formatBytes(o.Bytes)
	}
	if r.Baseline {
		fmt.Fprintf(w, "braid perf: %s over %s as %s striped by hand, %s messages, %s\n",
			what, plural(r.Paths, "path", "paths"), plural(r.Streams, "plain TCP connection", "plain TCP connections"), formatBytes(r.Size), until)
	} else {
		fmt.Fprintf(w, "braid perf: %s over %s, %s, %s messages, %s, stripe %s, policy %s, transport %s\n",
			what, plural(r.Paths, "path", "paths"), plural(r.Streams, "stream", "streams"), formatBytes(r.Size), until,
			r.Stripe, r.Policy, r.Transport)
	}
	for i, p := range o.Paths {
		local := p.Local
		if local == "" {
			local = "*"
		}
		fmt.Fprintf(w, "  path %d: %s -> %s\n", i, local, p.Remote)
	}
	if !r.Baseline && (o.Config == nil || !o.Config.InsecurePlaintext) {
		fmt.Fprintln(w, encryptedNote)
	}
}

// encryptedNote tells an iperf3 user why braid's figures are lower than
// iperf3's on fast links: printed once, in the header.
const encryptedNote = "note: braid's data plane is encrypted and authenticated (AES-GCM), iperf3's is not; " +
	"compare with iperf3 using --insecure-plaintext at both ends, or --tcp-baseline"

// printStreamTotals prints each stream's sender and receiver totals and
// their sums, as iperf3 ends its output. "Retr" is the TCP segments the
// sender's channels retransmitted, empty where the channels are not TCP.
// braid's streams share the session's channels (one a path), so each
// stream's Retr is that of all the channels, and the [SUM] line counts
// each channel once; a note under the table says so when there are
// several streams. Bytes braid sent again on another path after a path
// failed are in the path table below.
func printStreamTotals(w io.Writer, ip *perf.IperfReport, u rateUnit) {
	e := ip.End
	if len(e.Streams) == 0 {
		return
	}
	fmt.Fprintln(w, strings.Repeat("- ", 30))
	fmt.Fprintf(w, "[ ID] %-15s  %11s  %-15s %10s\n", "Interval", "Transfer", "Bitrate", "Retr")
	line := func(id string, s perf.IperfSpan, role string) {
		retr := ""
		if role == "sender" && s.Retransmits != nil {
			retr = fmt.Sprint(*s.Retransmits) // TCP segments of the channels (perf.TCPFigures)
		}
		fmt.Fprintf(w, "[%s] %5.2f-%-5.2f sec  %11s  %8.1f %-6s %10s  %s\n", id, s.Start, s.End, formatBytes(s.Bytes),
			u.of(s.BitsPerSecond/1e6), u.name, retr, role)
	}
	for _, st := range e.Streams {
		id := "  ?"
		if st.Sender.Socket != nil {
			id = fmt.Sprintf("%3d", *st.Sender.Socket)
		} else if st.Receiver.Socket != nil {
			id = fmt.Sprintf("%3d", *st.Receiver.Socket)
		}
		line(id, st.Sender, "sender")
		line(id, st.Receiver, "receiver")
	}
	if e.SumSent != nil && e.SumReceived != nil && len(e.Streams) > 1 {
		line("SUM", *e.SumSent, "sender")
		line("SUM", *e.SumReceived, "receiver")
		if ip.Braid != nil && ip.Braid.StreamTCP == "channels" {
			fmt.Fprintln(w, sharedRetrNote)
		}
	}
}

// sharedRetrNote explains the Retr column of a test with several streams
// over shared channels.
const sharedRetrNote = "Retr: TCP segments retransmitted by the channels (one per path), which the streams share: " +
	"each stream shows all the channels' total, [SUM] counts each channel once"

// printPerfSummary prints a test's figures and its paths.
func printPerfSummary(w io.Writer, r *perf.Report, u rateUnit) {
	fmt.Fprintln(w, strings.Repeat("- ", 30))
	switch r.Mode {
	case "pingpong":
		fmt.Fprintf(w, "round trips: %d of %s in %.2f s; payload both ways %.1f %s\n",
			r.RoundTrips, formatBytes(r.Size), r.Seconds, u.of(r.ThroughputMbps), u.name)
		fmt.Fprintf(w, "rtt: mean %s  min %s  p50 %s  p99 %s  max %s\n",
			fmtUs(r.RTTus), fmtUs(r.RTTMinUs), fmtUs(r.RTTP50us), fmtUs(r.RTTP99us), fmtUs(r.RTTMaxUs))
		fmt.Fprintf(w, "effective bandwidth (8*size/1e6)/(RTT/2): %.1f %s\n", u.of(r.EffectiveMbps), u.name)
	default:
		who := "receiver (server)"
		if r.Reverse {
			who = "receiver (client)"
		}
		if r.Bidir != nil {
			who = "client -> server, at the server"
		}
		fmt.Fprintf(w, "throughput: %.1f %s  (%s in %d messages over %.2f s, %s)\n",
			u.of(r.ThroughputMbps), u.name, formatBytes(r.Bytes), r.Messages, r.Seconds, who)
		if b := r.Bidir; b != nil {
			fmt.Fprintf(w, "throughput: %.1f %s  (%s in %d messages over %.2f s, server -> client, at the client)\n",
				u.of(b.ThroughputMbps), u.name, formatBytes(b.Bytes), b.Messages, b.Seconds)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PATH\tLOCAL\tREMOTE\tBYTES\t"+strings.ToUpper(u.name)+"\tSTATE\tFAILOVERS\tRESENT\t")
	for _, p := range r.PerPath {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.1f\t%s\t%d\t%s\t\n", p.ID, p.Local, p.Remote, formatBytes(p.Bytes), u.of(p.Mbps), p.State, p.Failovers, formatBytes(p.Retransmitted))
	}
	tw.Flush()
	if len(r.PerPath) > 0 {
		fmt.Fprintln(w, "(RESENT: bytes sent on the path that braid sent again on another after the path failed; TCP's own retransmissions are the Retr figures)")
	}
	if !r.Baseline {
		fmt.Fprintf(w, "striping control: %d segments striped, %d starts, %d ends\n", r.Control.Segments, r.Control.Starts, r.Control.Ends)
	}
	fmt.Fprintf(w, "client cpu: user %.2f s, sys %.2f s\n", r.CPUUser, r.CPUSys)
}

func fmtUs(us float64) string {
	if us >= 10000 {
		return fmt.Sprintf("%.1fms", us/1000)
	}
	return fmt.Sprintf("%.0fµs", us)
}

// printStreamInterval prints one interval as iperf3 prints it: a line
// per stream, then [SUM] when there are several streams, with a dashed
// line between intervals, with a heading before the first. On the
// sending side over TCP, as iperf3's sender, each stream's line adds Retr
// (segments retransmitted in the interval) and Cwnd (the congestion
// window at its end), and [SUM] the Retr of all. A braid stream has no
// socket of its own: its figures are those of all the session's channels
// (retransmits and windows summed over the channels), and [SUM] counts
// each channel once; a --tcp-baseline stream is one TCP connection.
func printStreamInterval(w io.Writer, i int, iv perf.IperfInterval, u rateUnit) {
	tcp := iv.Sum.Retransmits != nil
	if i == 0 {
		if tcp {
			fmt.Fprintf(w, "[ ID] %-15s  %11s  %-15s %6s  %10s\n", "Interval", "Transfer", "Bitrate", "Retr", "Cwnd")
		} else {
			fmt.Fprintf(w, "[ ID] %-15s  %11s  %s\n", "Interval", "Transfer", "Bitrate")
		}
	}
	line := func(id string, s perf.IperfSpan) {
		omitted := ""
		if s.Omitted != nil && *s.Omitted {
			omitted = "  (omitted)"
		}
		tcpCols := ""
		if tcp {
			retr, cwnd := "", ""
			if s.Retransmits != nil {
				retr = fmt.Sprint(*s.Retransmits)
			}
			if s.SendCwnd != nil {
				cwnd = formatBytes(*s.SendCwnd)
			}
			tcpCols = fmt.Sprintf(" %6s  %10s", retr, cwnd)
		}
		fmt.Fprintf(w, "[%s] %5.2f-%-5.2f sec  %11s  %8.1f %-6s%s%s\n", id, s.Start, s.End, formatBytes(s.Bytes),
			u.of(s.BitsPerSecond/1e6), u.name, tcpCols, omitted)
	}
	if i > 0 && len(iv.Streams) > 1 {
		fmt.Fprintln(w, strings.Repeat("- ", 30))
	}
	for _, s := range iv.Streams {
		id := "  ?"
		if s.Socket != nil {
			id = fmt.Sprintf("%3d", *s.Socket)
		}
		line(id, s)
	}
	if len(iv.Streams) > 1 {
		line("SUM", iv.Sum)
	}
}

// printInterval prints braid's per-path interval line (--paths, and the
// for --tcp-baseline too), with a heading before the first.
func printInterval(w io.Writer, mode string, i int, e perf.Interval, u rateUnit) {
	if i == 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%-15s %10s", "[ seconds ]", u.name)
		for j := range e.PerPath {
			fmt.Fprintf(&b, " %9s", fmt.Sprintf("path%d", j))
		}
		if mode == "pingpong" {
			fmt.Fprintf(&b, " %10s", "rtt")
		}
		fmt.Fprintln(w, b.String())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%5.1f-%5.1f ] %10.1f", e.Start, e.End, u.of(e.Mbps))
	for _, m := range e.PerPath {
		fmt.Fprintf(&b, " %9.1f", u.of(m))
	}
	if mode == "pingpong" {
		fmt.Fprintf(&b, " %10s", fmtUs(e.RTTus))
	}
	if e.Omitted {
		b.WriteString("  (omitted)")
	}
	fmt.Fprintln(w, b.String())
}
