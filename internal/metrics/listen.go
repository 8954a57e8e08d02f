package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Loopback completes a listen address without a host (":6060", "6060")
// with 127.0.0.1, so that an endpoint without authentication is not
// reachable from the network unless a host is named.
func Loopback(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return net.JoinHostPort("127.0.0.1", addr)
	}
	host, port, _ := net.SplitHostPort(addr)
	if host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// PprofHandler serves net/http/pprof's profiles under /debug/pprof/. It
// does not use http.DefaultServeMux.
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Listener serves one handler, without TLS or authentication, on its
// own address: the --metrics and --pprof endpoints.
type Listener struct {
	what string
	ln   net.Listener
	hs   *http.Server
	done chan error
}

// Listen listens on addr (completed by Loopback) and serves h there until
// Close. what names the endpoint in errors and logs ("pprof").
func Listen(what, addr string, h http.Handler, log *slog.Logger) (*Listener, error) {
	if log == nil {
		log = slog.Default()
	}
	addr = Loopback(addr)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", what, addr, err)
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() {
		log.Warn(what+" endpoint listens beyond loopback WITHOUT authentication: anyone who can reach it can read it", "addr", ln.Addr().String())
	}
	l := &Listener{what: what, ln: ln, done: make(chan error, 1), hs: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}
	go func() { l.done <- l.hs.Serve(ln) }()
	return l, nil
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Close stops serving, waiting a moment for requests in progress (a CPU
// profile runs for its seconds).
func (l *Listener) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := l.hs.Shutdown(ctx); err != nil {
		l.hs.Close()
	}
	if err := <-l.done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: %w", l.what, err)
	}
	return nil
}
