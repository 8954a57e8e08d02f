package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/braid-hpc/braid/internal/ctl"
	"github.com/braid-hpc/braid/transport"
	// Link the SCTP channel kinds so --transport sctp and sctp-udp work.
	_ "github.com/braid-hpc/braid/transport/channel/ksctp"
	_ "github.com/braid-hpc/braid/transport/channel/sctpudp"

	"github.com/spf13/pflag"
)

// sessionFlags are the transport flags shared by perf, send and recv. They
// only fill a transport.Config. Server and worker take --transport and the
// --sctp-* knobs (sctpFlags) alone.
type sessionFlags struct {
	key       func() ([]byte, error)
	transport *string
	stripe    *string
	policy    *string
	frag      *string
	lanes     *int
	timeout   *time.Duration
	verbose   *bool
	plaintext *bool
	sctp      *sctpFlags
}

func addSessionFlags(fs *pflag.FlagSet) *sessionFlags {
	defer alias(fs, "policy", "path-policy", "use --path-policy; --policy is the scheduling policy of braid submit and local")
	f := &sessionFlags{
		key:       keyFlag(fs),
		transport: fs.String("transport", "tcp", "channel `kind` of every path: tcp, mptcp, sctp (kernel SCTP) or sctp-udp"),
		stripe:    fs.String("stripe", "enhanced", "striping of large messages over the paths, a `mode`: enhanced, basic or off"),
		policy:    fs.String("path-policy", "soonest", "path choice for messages that travel whole, a `policy`: soonest or round-robin"),
		frag:      fs.String("frag", "", "striping fragment `size` in bytes, K/M suffixes (default: the transport's: 2 ms of the slowest path, at most 1M)"),
		lanes:     fs.Int("lanes", 0, "open `n` independent ordered lanes per path where the transport has them (sctp-udp: one SCTP stream each), so a loss on one stream's data does not delay the others; 1: one lane, as over TCP (default 8)"),
		timeout:   fs.Duration("session-timeout", 0, "give up when every path stayed down this `duration` (default 30s)"),
		verbose:   fs.BoolP("verbose", "V", false, "log path events (up, down, failover) on stderr (-V as in iperf3, where -v is --version)"),
		plaintext: plaintextFlag(fs),
		sctp:      addSCTPFlags(fs),
	}
	withChoices(fs, "transport", channelKinds...)
	withChoices(fs, "stripe", "enhanced", "basic", "off")
	withChoices(fs, "path-policy", "soonest", "round-robin")
	return f
}

// channelKinds are the values of --transport, for completion.
var channelKinds = []string{"tcp", "mptcp", "sctp", "sctp-udp"}

// plaintextFlag is --insecure-plaintext, for every command that opens
// data-plane sessions.
func plaintextFlag(fs *pflag.FlagSet) *bool {
	return fs.Bool("insecure-plaintext", false, "send data-plane frames unencrypted after the key handshake, to measure what encryption costs; the peer must use it too, and anyone on the path can read and alter the data")
}

// config builds the transport.Config the flags describe. A missing key is
// errNoKey; other errors are usage errors.
func (f *sessionFlags) config(env *Env) (*transport.Config, error) {
	key, err := f.key()
	if err != nil {
		return nil, err
	}
	cfg := &transport.Config{Key: key, Transport: *f.transport, SessionTimeout: *f.timeout, Logger: f.logger(env),
		InsecurePlaintext: *f.plaintext}
	if cfg.Stripe, err = transport.ParseStripeMode(*f.stripe); err != nil {
		return nil, usageError{err}
	}
	if cfg.Policy, err = transport.ParsePolicy(*f.policy); err != nil {
		return nil, usageError{err}
	}
	if *f.frag != "" {
		n, err := parseSize(*f.frag)
		if err != nil || n < 512 || n > 1<<20 {
			return nil, usageError{fmt.Errorf("--frag %q: want a size between 512 and 1M", *f.frag)}
		}
		cfg.FragmentSize = int(n)
	}
	if *f.lanes < 0 || *f.lanes > transport.MaxLanes {
		return nil, usageError{fmt.Errorf("--lanes %d: want 1 to %d", *f.lanes, transport.MaxLanes)}
	}
	cfg.Lanes = *f.lanes
	if cfg.Channel, err = f.sctp.channel(*f.transport); err != nil {
		return nil, usageError{err}
	}
	return cfg, nil
}

// logger writes transport events to env.Stderr: warnings (failover, lost
// paths, refused channels) always, lifecycle events with -V/--verbose.
func (f *sessionFlags) logger(env *Env) *slog.Logger {
	level := slog.LevelWarn
	if *f.verbose {
		level = slog.LevelInfo
	}
	return slog.New(&logFilter{Handler: slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level})})
}

// logFilter drops the warnings the transport logs when a session ends
// normally: "session ended" because the peer closed it, and paths seen
// going down while we close the session ourselves. Errors always pass.
type logFilter struct {
	slog.Handler
	session string // the "session" attribute of this logger
}

func (h *logFilter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelError {
		if ctl.Closing(h.session) {
			return nil
		}
		if r.Message == "session ended" {
			peerClosed := false
			r.Attrs(func(a slog.Attr) bool {
				if err, ok := a.Value.Any().(error); ok && errors.Is(err, transport.ErrPeerClosed) {
					peerClosed = true
				}
				return true
			})
			if peerClosed {
				return nil
			}
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *logFilter) WithAttrs(as []slog.Attr) slog.Handler {
	c := &logFilter{Handler: h.Handler.WithAttrs(as), session: h.session}
	for _, a := range as {
		if a.Key == "session" {
			c.session = a.Value.String()
		}
	}
	return c
}

func (h *logFilter) WithGroup(name string) slog.Handler {
	return &logFilter{Handler: h.Handler.WithGroup(name), session: h.session}
}

// usageError marks an error caused by bad flags (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCode maps a setup error to an exit code: 2 for usage errors and a
// missing key, 1 otherwise.
func exitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, errNoKey) {
		return 2
	}
	return 1
}

// parseSize parses a byte count with an optional K, M, G or T suffix
// (powers of 1024; "KiB", "KB" and "k" are accepted too).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "i")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		case 't', 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q: want a byte count such as 65536, 64K, 4M or 1G", s)
	}
	return n * mult, nil
}

// formatBytes prints n with a binary unit.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// addrList splits a comma-separated address list and gives addresses
// without a port the default port.
func addrList(s string, port int) ([]string, error) {
	var out []string
	for _, a := range splitList(s) {
		if _, _, err := net.SplitHostPort(a); err != nil {
			a = net.JoinHostPort(strings.Trim(a, "[]"), strconv.Itoa(port))
		}
		if _, p, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("bad address %q: %v", a, err)
		} else if _, err := strconv.ParseUint(p, 10, 16); err != nil {
			return nil, fmt.Errorf("bad port in %q", a)
		}
		out = append(out, a)
	}
	return out, nil
}

// dialPaths pairs the remote addresses with the local source addresses of
// --from: the i-th local for the i-th remote.
func dialPaths(to, from string, port int) ([]transport.Path, error) {
	remotes, err := addrList(to, port)
	if err != nil {
		return nil, err
	}
	if len(remotes) == 0 {
		return nil, errors.New("no remote address: give one host:port per network, comma-separated")
	}
	locals := splitList(from)
	if len(locals) > 0 && len(locals) != len(remotes) {
		return nil, fmt.Errorf("--from has %d addresses for %d remote addresses: give one local address per path", len(locals), len(remotes))
	}
	paths := make([]transport.Path, len(remotes))
	for i, r := range remotes {
		paths[i].Remote = r
		if len(locals) > 0 {
			paths[i].Local = locals[i]
		}
	}
	return paths, nil
}
