package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/braid-hpc/braid/internal/metrics"
)

// obsFlags are --metrics and --pprof: endpoints on addresses of their
// own, plain HTTP without authentication, bound to loopback unless a
// host is named.
type obsFlags struct {
	metrics, pprof *string
}

// addObsFlags registers --metrics and --pprof; what names the command's
// role in the help ("server", "worker", "perf server").
func addObsFlags(fs interface {
	String(string, string, string) *string
}, what string) *obsFlags {
	return &obsFlags{
		metrics: fs.String("metrics", "", "serve Prometheus metrics of this "+what+" at http://`addr`/metrics, without authentication "+
			"(host:port; a port alone binds 127.0.0.1; default: off)"),
		pprof: fs.String("pprof", "", "serve Go profiles (net/http/pprof) at http://`addr`/debug/pprof/, without authentication "+
			"(host:port; a port alone binds 127.0.0.1; default: off)"),
	}
}

// start opens the listeners that were asked for, serving metrics (nil:
// the command has none) at /metrics; stop closes them.
func (o *obsFlags) start(log *slog.Logger, metricsHandler http.Handler) (stop func(), err error) {
	if log == nil {
		log = slog.Default()
	}
	var open []*metrics.Listener
	stop = func() {
		for _, l := range open {
			if err := l.Close(); err != nil {
				log.Warn("closing an endpoint", "err", err)
			}
		}
	}
	if *o.metrics != "" && metricsHandler != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metricsHandler)
		l, err := metrics.Listen("metrics", *o.metrics, mux, log)
		if err != nil {
			return stop, err
		}
		open = append(open, l)
		log.Info("serving metrics", "url", "http://"+l.Addr()+"/metrics")
	}
	if *o.pprof != "" {
		l, err := metrics.Listen("pprof", *o.pprof, metrics.PprofHandler(), log)
		if err != nil {
			stop()
			return func() {}, err
		}
		open = append(open, l)
		log.Info("serving profiles", "url", "http://"+l.Addr()+"/debug/pprof/")
	}
	return stop, nil
}

// logFormat is --log-format: text or json.
type logFormat string

func (f *logFormat) String() string { return string(*f) }

// Type names the value in help (pflag.Value).
func (f *logFormat) Type() string { return "format" }

func (f *logFormat) Set(s string) error {
	switch s = strings.ToLower(strings.TrimSpace(s)); s {
	case "text", "json":
		*f = logFormat(s)
		return nil
	}
	return fmt.Errorf("%q: want text or json", s)
}

// logLevel is --log-level: debug, info, warn or error.
type logLevel struct{ l slog.Level }

func (l *logLevel) String() string { return strings.ToLower(l.l.String()) }

// Type names the value in help (pflag.Value).
func (l *logLevel) Type() string { return "level" }

func (l *logLevel) Set(s string) error {
	if err := l.l.UnmarshalText([]byte(strings.TrimSpace(s))); err != nil {
		return fmt.Errorf("%q: want debug, info, warn or error", s)
	}
	return nil
}

var _ flag.Value = (*logLevel)(nil)
