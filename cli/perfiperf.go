package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/braid-hpc/braid/perf"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/transport/channel"
)

// iperfFlags are the iperf3 flags of braid perf beyond the core ones
// (-s -c -p -t -P -R -J -i -l -B -1), so that an iperf3 user's script runs
// unchanged apart from the binary name. Some set what braid always does
// and are accepted for that; the ones braid cannot honour fail with a
// reason instead of "unknown flag".
type iperfFlags struct {
	version        *bool
	format         *string
	unit           rateUnit
	bps            int64                 // -b, parsed
	socket         channel.SocketOptions // -C, -w, parsed
	title          *string
	logfile        *string
	ipv4, ipv6     *bool
	connectTimeout *int
	debug          *bool
	window         *string
	// accepted: what braid does anyway
	zerocopy, nodelay, forceflush *bool
	// refused with a reason
	udp, daemon                         *bool
	pidfile, congestion, bitrate, bytes *string
	blockcount                          *string
	omit                                *float64
	serverOutput                        *bool
	tos, dscp, timestamps, extraData    *string
	repeating                           *bool
	affinity                            *string
	mss                                 *int
	refused                             []refusedFlag
}

// refusedFlag is an iperf3 flag braid perf cannot honour: it is parsed,
// hidden from --help, and fails with why, not with "unknown flag".
type refusedFlag struct {
	name, short string
	value       bool // takes a value
	why         string
}

var refusedIperf = []refusedFlag{
	{"file", "F", true, "braid perf sends a generated pattern; to move a file over every path use braid send and braid recv"},
	{"bind-dev", "", true, "bind each path to its device's address with -B ADDRESS,... (one per path)"},
	{"rcv-timeout", "", true, "braid detects a silent peer on each path (PathTimeout, 500 ms, then failover to the other paths) and ends a session whose paths all stay down for 30 s"},
	{"snd-timeout", "", true, "braid detects a silent peer on each path (PathTimeout, 500 ms, then failover to the other paths) and ends a session whose paths all stay down for 30 s"},
	{"idle-timeout", "", true, "a braid perf server runs each test in its own goroutine with its own time bounds, so no stuck test holds it; stop it with SIGTERM"},
	{"server-bitrate-limit", "", true, "a braid perf server does not police rates; pace the sender with -b on the client"},
	{"username", "", true, "braid authenticates both hosts with the cluster key (BRAID_KEY or --key-file) in a Noise handshake; there are no user names or RSA keys"},
	{"rsa-public-key-path", "", true, "braid authenticates both hosts with the cluster key (BRAID_KEY or --key-file) in a Noise handshake; there are no user names or RSA keys"},
	{"rsa-private-key-path", "", true, "braid authenticates both hosts with the cluster key (BRAID_KEY or --key-file) in a Noise handshake; there are no user names or RSA keys"},
	{"authorized-users-path", "", true, "braid authenticates both hosts with the cluster key (BRAID_KEY or --key-file) in a Noise handshake; there are no user names or RSA keys"},
	{"time-skew-threshold", "", true, "braid authenticates both hosts with the cluster key (BRAID_KEY or --key-file) in a Noise handshake; there are no user names or RSA keys"},
	{"xbind", "X", true, "braid's multi-homing is its paths: give the server's address on each network with -c A,B and the local ones with -B X,Y"},
	{"nstreams", "", true, "braid's streams are -P/--parallel (on SCTP channels each path also has --lanes SCTP streams)"},
	{"pacing-timer", "", true, "braid paces the sender in user space with -b; it does not use the fq qdisc's socket pacing"},
	{"fq-rate", "", true, "braid paces the sender in user space with -b; it does not use the fq qdisc's socket pacing"},
	{"cport", "", true, "a test opens a control and a data session, each with one connection per path, so one source port cannot serve them; pin the source addresses with -B"},
	{"flowlabel", "L", true, "braid does not set IPv6 flow labels"},
	{"udp-counters-64bit", "", false, "it applies to UDP tests; braid measures reliable streams (no -u)"},
	{"dont-fragment", "", false, "it applies to UDP tests; braid measures reliable streams (no -u)"},
}

func addIperfFlags(fs *pflag.FlagSet) *iperfFlags {
	f := &iperfFlags{
		version:        fs.BoolP("version", "v", false, "print braid perf's version and exit, as iperf3 -v (path-event logging is -V/--verbose)"),
		format:         fs.StringP("format", "f", "m", "`unit` of the text report's rates: k, m, g, t (Kbit/s ... Tbit/s) or K, M, G, T (KByte/s ... TByte/s, powers of 1024)"),
		title:          fs.StringP("title", "T", "", "prefix every output line with this `text` and \":  \" (-J: a top-level \"title\")"),
		logfile:        fs.String("logfile", "", "send every output line (stdout and stderr) to `file`, appended, as iperf3 --logfile"),
		ipv4:           fs.BoolP("version4", "4", false, "client: only IPv4 addresses (an IPv6 address in -c or -B is an error)"),
		ipv6:           fs.BoolP("version6", "6", false, "client: only IPv6 addresses (an IPv4 address in -c or -B is an error)"),
		connectTimeout: fs.Int("connect-timeout", 0, "client: give up connecting after `ms` milliseconds, as iperf3 (0: the transport's bound)"),
		debug:          fs.BoolP("debug", "d", false, "as -V/--verbose: log path events on stderr (braid has no further debug output here)"),
		window:         fs.StringP("window", "w", "", "client: set the socket buffers (SO_SNDBUF, SO_RCVBUF) of every data channel, at both ends, to this many `bytes` (K/M/G suffixes; the kernel doubles it and caps it at net.core.wmem_max/rmem_max), as iperf3 -w; tcp and mptcp channels (default: the kernel's autotuning)"),
		zerocopy:       fs.BoolP("zerocopy", "Z", false, "accepted: bulk senders always use the no-copy write path (Stream.WriteMessageNoCopy)"),
		nodelay:        fs.BoolP("no-delay", "N", false, "accepted: braid's TCP channels always set TCP_NODELAY (Go's default)"),
		forceflush:     fs.Bool("forceflush", false, "accepted: braid perf writes every line as it is printed, unbuffered"),
		udp:            fs.BoolP("udp", "u", false, "refused: braid measures reliable streams; there is no UDP test"),
		daemon:         fs.BoolP("daemon", "D", false, "server: run in the background, detached from the terminal (output to --logfile, else discarded); the command returns once the server listens, as iperf3 -D"),
		pidfile:        fs.StringP("pidfile", "I", "", "server: write the server's pid to `file`, removed when it exits (SIGTERM or SIGINT); refused while the file names a running process, as iperf3 -I"),
		congestion:     fs.StringP("congestion", "C", "", "client: the TCP congestion control `algorithm` of every data channel, at both ends (TCP_CONGESTION; see /proc/sys/net/ipv4/tcp_available_congestion_control), as iperf3 -C; tcp and mptcp channels (default: the system's)"),
		bitrate:        fs.StringP("bitrate", "b", "0", "bulk: pace the sender (the client, with -R the server) to this `rate` in bits per second over all streams, k/M/G suffixes (powers of 1000, as iperf3); 0: unlimited"),
		omit:           fs.Float64P("omit", "O", 0, "client: run a warm-up of this many `seconds` first and leave it out of the totals (its intervals are marked omitted; the measured intervals count from its end), as iperf3 -O"),
		bytes:          fs.StringP("bytes", "n", "", "bulk: send this many `bytes` (K/M/G suffixes, powers of 1024), rounded up to whole --length messages, instead of for --time"),
		blockcount:     fs.StringP("blockcount", "k", "", "bulk: send `n` --length messages (iperf3's blocks) instead of for --time"),
		tos:            fs.StringP("tos", "S", "", "client: the IP type of service byte `n` (0-255; 0x and 0 prefixes for hex and octal) of every data channel at both ends (IP_TOS, IPV6_TCLASS), as iperf3 -S"),
		dscp:           fs.String("dscp", "", "client: the DSCP `value` (0-63, or a name such as ef, af11, cs1) of every data channel at both ends, the upper 6 bits of the type of service byte, as iperf3 --dscp"),
		timestamps:     fs.String("timestamps", "", "prefix every text line with the time in this strftime `format` (default \"%c \"), as iperf3 --timestamps"),
		extraData:      fs.String("extra-data", "", "client: put this `text` in the JSON report as \"extra_data\", as iperf3"),
		mss:            fs.IntP("set-mss", "M", 0, "client: the TCP maximum segment `size` of every data channel (TCP_MAXSEG, set before it connects: the server sends with it too), as iperf3 -M; tcp and mptcp channels"),
		affinity:       fs.StringP("affinity", "A", "", "pin this braid perf process (every thread) to CPU `n`, as iperf3 -A n; the server's half (-A n,m) is refused: a braid perf server runs tests concurrently, pin it with taskset"),
		repeating:      fs.Bool("repeating-payload", false, "accepted: braid's payload is a fixed pseudo-random pattern, and nothing on braid's paths compresses it"),
		serverOutput:   fs.Bool("get-server-output", false, "client: print the server's own report of the test after the client's (-J: \"server_output_json\" from a server run with -J, else \"server_output_text\"), as iperf3"),
	}
	fs.Lookup("timestamps").NoOptDefVal = "%c "
	withChoices(fs, "format", "k", "m", "g", "t", "K", "M", "G", "T")
	withChoices(fs, "congestion", congestionAlgorithms()...)
	alias(fs, "bind", "from", "")
	for _, r := range refusedIperf {
		var fl *pflag.Flag
		if r.value {
			fs.StringP(r.name, r.short, "", "refused: "+r.why)
		} else {
			fs.BoolP(r.name, r.short, false, "refused: "+r.why)
		}
		fl = fs.Lookup(r.name)
		fl.Hidden = true
	}
	f.refused = refusedIperf
	return f
}

// check reports the first iperf3 flag that braid perf refuses, or that
// does not go with the role, and parses --format.
func (f *iperfFlags) check(fs *pflag.FlagSet, server bool) error {
	refused := []struct {
		name, why string
	}{
		{"udp", "braid measures reliable streams (every path a TCP, MPTCP or SCTP channel); there is no UDP test"},
	}
	for _, r := range refused {
		if fs.Changed(r.name) {
			return fmt.Errorf("--%s: %s", r.name, r.why)
		}
	}
	for _, r := range f.refused {
		if fs.Changed(r.name) {
			return fmt.Errorf("--%s is iperf3's and braid perf cannot honour it: %s", r.name, r.why)
		}
	}
	if !server {
		for _, name := range []string{"daemon", "pidfile"} {
			if fs.Changed(name) {
				return fmt.Errorf("--%s is a server flag: it goes with -s", name)
			}
		}
	}
	if server {
		for _, name := range []string{"omit", "get-server-output", "congestion", "window", "tos", "dscp", "extra-data", "bidir", "set-mss"} {
			if fs.Changed(name) {
				return fmt.Errorf("--%s is a client flag: give it to the client (-c), which tells the server", name)
			}
		}
	}
	if !(*f.omit >= 0 && *f.omit <= perf.MaxSeconds) {
		return fmt.Errorf("--omit %v: want the seconds of warm-up to leave out, 0 for none", *f.omit)
	}
	f.socket.Congestion = *f.congestion
	f.socket.MSS = *f.mss
	if fs.Changed("window") {
		n, err := parseSize(*f.window)
		if err != nil || n < 1 || n > channel.MaxBuffer {
			return fmt.Errorf("--window %q: want a socket buffer size in bytes such as 256K, at most 1G", *f.window)
		}
		f.socket.Buffer = int(n)
	}
	switch {
	case fs.Changed("tos") && fs.Changed("dscp"):
		return errors.New("give -S/--tos or --dscp, not both")
	case fs.Changed("tos"):
		n, err := strconv.ParseInt(*f.tos, 0, 64)
		if err != nil || n < 0 || n > 255 {
			return fmt.Errorf("--tos %q: want a byte, 0-255 (0x.. hex, 0.. octal)", *f.tos)
		}
		f.socket.TOS = int(n)
	case fs.Changed("dscp"):
		d, err := parseDSCP(*f.dscp)
		if err != nil {
			return fmt.Errorf("--dscp: %v", err)
		}
		f.socket.TOS = d << 2
	}
	if err := f.socket.Check(); err != nil {
		return fmt.Errorf("-C/-w/-M/-S: %v", err)
	}
	if *f.ipv4 && *f.ipv6 {
		return errors.New("-4 and -6 exclude each other")
	}
	if *f.connectTimeout < 0 {
		return fmt.Errorf("--connect-timeout %d: want milliseconds, 0 for the transport's bound", *f.connectTimeout)
	}
	var err error
	u, ok := rateUnits[*f.format]
	if !ok {
		return fmt.Errorf("--format %q: want one of k m g t K M G T", *f.format)
	}
	f.unit = u
	if f.bps, err = parseBitrate(*f.bitrate); err != nil {
		return fmt.Errorf("--bitrate: %v", err)
	}
	return nil
}

// parseBitrate parses iperf3's -b: bits per second with k, m, g or t
// (either case) in powers of 1000.
func parseBitrate(s string) (int64, error) {
	num, mult := s, 1.0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult = 1e3
		case 'm', 'M':
			mult = 1e6
		case 'g', 'G':
			mult = 1e9
		case 't', 'T':
			mult = 1e12
		}
		if mult != 1 {
			num = s[:n-1]
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v >= 0) || v*mult > 1e15 {
		return 0, fmt.Errorf("%q: want bits per second such as 50M, 0 for unlimited", s)
	}
	return int64(v * mult), nil
}

// family checks -4/-6 against the paths' numeric addresses; host names
// are left to the resolver.
func (f *iperfFlags) family(paths []transport.Path) error {
	if !*f.ipv4 && !*f.ipv6 {
		return nil
	}
	for _, p := range paths {
		for _, a := range []string{p.Remote, p.Local} {
			host, _, err := net.SplitHostPort(a)
			if err != nil {
				host = a
			}
			ip := net.ParseIP(host)
			if ip == nil {
				continue
			}
			if is4 := ip.To4() != nil; is4 != *f.ipv4 {
				want := "IPv4"
				if *f.ipv6 {
					want = "IPv6"
				}
				return fmt.Errorf("address %s is not %s (-4/-6)", a, want)
			}
		}
	}
	return nil
}

// rateUnit is a unit of -f/--format: iperf3's lower case letters are
// bits per second in powers of 1000, upper case bytes in powers of 1024.
type rateUnit struct {
	name string
	perM float64 // units in one Mbit/s
}

var rateUnits = map[string]rateUnit{
	"k": {"Kbit/s", 1e3}, "m": {"Mbit/s", 1}, "g": {"Gbit/s", 1e-3}, "t": {"Tbit/s", 1e-6},
	"K": {"KByte/s", 1e6 / 8 / 1024}, "M": {"MByte/s", 1e6 / 8 / (1 << 20)},
	"G": {"GByte/s", 1e6 / 8 / (1 << 30)}, "T": {"TByte/s", 1e6 / 8 / (1 << 40)},
}

// of converts mbps to the unit.
func (u rateUnit) of(mbps float64) float64 { return mbps * u.perM }

// titleWriter prefixes every line written through it, as iperf3 -T and
// --timestamps.
type titleWriter struct {
	mu       sync.Mutex
	w        io.Writer
	prefix   string
	prefixOf func() string // if set, the prefix of each line as it starts
	mid      bool          // inside a line
}

func (t *titleWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b bytes.Buffer
	for _, c := range p {
		if !t.mid {
			if t.prefixOf != nil {
				b.WriteString(t.prefixOf())
			}
			b.WriteString(t.prefix)
			t.mid = true
		}
		b.WriteByte(c)
		if c == '\n' {
			t.mid = false
		}
	}
	if _, err := t.w.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// printPerfVersion prints what iperf3 -v prints: the version, then the
// system.
func printPerfVersion(w io.Writer) {
	v := newVersionInfo(buildInfo())
	fmt.Fprintf(w, "braid perf %s (%s, %s)\n", v.Version, v.Go, v.Platform)
	fmt.Fprintf(w, "%s %s\n", runtime.GOOS, runtime.GOARCH)
}

// byteCount is -n or -k in bytes, 0 when neither is given.
func (f *iperfFlags) byteCount(fs *pflag.FlagSet, size int64) (int64, error) {
	switch {
	case fs.Changed("bytes") && fs.Changed("blockcount"):
		return 0, errors.New("give -n/--bytes or -k/--blockcount, not both")
	case fs.Changed("bytes"):
		n, err := parseSize(*f.bytes)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("--bytes %q: want a byte count such as 10M", *f.bytes)
		}
		return n, nil
	case fs.Changed("blockcount"):
		k, err := strconv.ParseInt(*f.blockcount, 10, 64)
		if err != nil || k < 1 || k > 1<<40/size {
			return 0, fmt.Errorf("--blockcount %q: want a number of messages", *f.blockcount)
		}
		return k * size, nil
	}
	return 0, nil
}

// dscpNames are the DSCP names iperf3 accepts (RFC 2474, 2597, 3246).
var dscpNames = map[string]int{
	"cs0": 0, "cs1": 8, "cs2": 16, "cs3": 24, "cs4": 32, "cs5": 40, "cs6": 48, "cs7": 56,
	"af11": 10, "af12": 12, "af13": 14, "af21": 18, "af22": 20, "af23": 22,
	"af31": 26, "af32": 28, "af33": 30, "af41": 34, "af42": 36, "af43": 38,
	"ef": 46, "va": 44, "le": 1,
}

// parseDSCP parses a DSCP value, 0-63 or a name.
func parseDSCP(s string) (int, error) {
	if d, ok := dscpNames[strings.ToLower(s)]; ok {
		return d, nil
	}
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil || n < 0 || n > 63 {
		return 0, fmt.Errorf("%q: want 0-63 or a name such as ef, af11, cs1", s)
	}
	return int(n), nil
}

// strftime formats t as C's strftime does with format, for the
// directives iperf3 users write (%c, %F %T, %s, ...); an unknown
// directive is copied as is.
func strftime(t time.Time, format string) string {
	layouts := map[byte]string{
		'a': "Mon", 'A': "Monday", 'b': "Jan", 'h': "Jan", 'B': "January", 'c': "Mon Jan _2 15:04:05 2006",
		'd': "02", 'e': "_2", 'H': "15", 'I': "03", 'j': "002", 'm': "01", 'M': "04", 'p': "PM",
		'S': "05", 'y': "06", 'Y': "2006", 'Z': "MST", 'z': "-0700", 'T': "15:04:05", 'F': "2006-01-02",
		'D': "01/02/06", 'R': "15:04", 'r': "03:04:05 PM", 'x': "01/02/06", 'X': "15:04:05",
	}
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch d := format[i]; d {
		case '%':
			b.WriteByte('%')
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 's':
			b.WriteString(strconv.FormatInt(t.Unix(), 10))
		default:
			if l, ok := layouts[d]; ok {
				b.WriteString(t.Format(l))
			} else {
				b.WriteByte('%')
				b.WriteByte(d)
			}
		}
	}
	return b.String()
}

// pinProcess pins every thread of this process to CPU n (iperf3 -A): Go
// threads made later are cloned from pinned ones and inherit the mask.
func pinProcess(spec string) error {
	if strings.Contains(spec, ",") {
		return fmt.Errorf("--affinity %q: the server's CPU (n,m) is not set from the client: a braid perf server runs tests concurrently; pin it with taskset -c M braid perf -s", spec)
	}
	n, err := strconv.Atoi(spec)
	if err != nil || n < 0 || n >= 1024 {
		return fmt.Errorf("--affinity %q: want a CPU number", spec)
	}
	var set unix.CPUSet
	set.Set(n)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("--affinity: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("--affinity %d: %w (this host's CPUs: 0-%d)", n, err, runtime.NumCPU()-1)
		}
	}
	return nil
}

// congestionAlgorithms lists this host's TCP congestion controls, for
// completing -C; Linux's two built in where /proc does not say.
func congestionAlgorithms() []string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if names := strings.Fields(string(b)); err == nil && len(names) > 0 {
		return names
	}
	return []string{"cubic", "reno"}
}
