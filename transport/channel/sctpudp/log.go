package sctpudp

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pion/logging"
)

// pionLogger hands pion's log lines to slog at Debug; trace lines are
// dropped. Nothing is louder: pion warns about every malformed datagram,
// which a peer controls, and its errors reach the caller as returned errors.
type pionLogger struct{ l *slog.Logger }

// NewLogger implements logging.LoggerFactory.
func (p pionLogger) NewLogger(scope string) logging.LeveledLogger {
	return pionScoped{p.l.With("pion", scope)}
}

type pionScoped struct{ l *slog.Logger }

func (p pionScoped) log(level slog.Level, msg string) {
	p.l.Log(context.Background(), level, msg)
}

func (p pionScoped) logf(level slog.Level, format string, args ...any) {
	if p.l.Enabled(context.Background(), level) {
		p.l.Log(context.Background(), level, fmt.Sprintf(format, args...))
	}
}

func (pionScoped) Trace(string)          {}
func (pionScoped) Tracef(string, ...any) {}

func (p pionScoped) Debug(msg string) { p.log(slog.LevelDebug, msg) }

func (p pionScoped) Debugf(format string, args ...any) { p.logf(slog.LevelDebug, format, args...) }

func (p pionScoped) Info(msg string) { p.log(slog.LevelDebug, msg) }

func (p pionScoped) Infof(format string, args ...any) { p.logf(slog.LevelDebug, format, args...) }

func (p pionScoped) Warn(msg string) { p.log(slog.LevelDebug, msg) }

func (p pionScoped) Warnf(format string, args ...any) { p.logf(slog.LevelDebug, format, args...) }

func (p pionScoped) Error(msg string) { p.log(slog.LevelDebug, msg) }

func (p pionScoped) Errorf(format string, args ...any) { p.logf(slog.LevelDebug, format, args...) }
