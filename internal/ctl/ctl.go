// Package ctl holds what braid's applications on a transport session (the
// perf engine and the file copy of send/recv) share: JSON control messages
// on a stream, reads that keep waiting while data still moves, closing a
// session on purpose (so that its logger can stay quiet about it) and the
// Mbit/s of a byte count.
package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/braid-hpc/braid/transport"
)

// WriteJSON sends v as one message on st.
func WriteJSON(ctx context.Context, st *transport.Stream, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return st.WriteMessage(ctx, b)
}

// ReadJSON reads one message from st into v, waiting at most d.
func ReadJSON(ctx context.Context, st *transport.Stream, d time.Duration, v any) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	b, err := st.ReadMessage(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return fmt.Errorf("no answer within %v", d)
		}
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("bad control message: %w", err)
	}
	return nil
}

// ReadJSONWhileBusy reads one message from st into v. It waits as long
// as moving reports that data still flows, and gives up after idle without.
func ReadJSONWhileBusy(ctx context.Context, st *transport.Stream, moving func() bool, idle time.Duration, v any) error {
	b, err := ReadWhileBusy(ctx, st, moving, idle)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("bad control message: %w", err)
	}
	return nil
}

// ReadWhileBusy reads the next message of st. It waits as long as moving
// reports that data still flows, and gives up after idle without.
func ReadWhileBusy(ctx context.Context, st *transport.Stream, moving func() bool, idle time.Duration) ([]byte, error) {
	since := time.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		b, err := st.ReadMessage(pctx)
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return b, err
		}
		if moving() {
			since = time.Now()
		} else if time.Since(since) > idle {
			return nil, fmt.Errorf("nothing arrived and no data moved for %v", idle)
		}
	}
}

// SessionMoving returns a func that reports whether sess moved data since
// its last call: more than heartbeats and acknowledgements account for.
func SessionMoving(sess *transport.Session) func() bool {
	const perPath = 16 << 10
	last := SessionBytes(sess)
	return func() bool {
		n := SessionBytes(sess)
		moved := n-last > int64(perPath*max(1, len(sess.Stats())))
		last = n
		return moved
	}
}

// CounterMoving returns a func that reports whether total changed since
// its last call.
func CounterMoving(total func() int64) func() bool {
	last := total()
	return func() bool {
		n := total()
		moved := n != last
		last = n
		return moved
	}
}

// SessionBytes is the session's total wire bytes in both directions.
func SessionBytes(s *transport.Session) int64 {
	var n int64
	for _, p := range s.Stats() {
		n += p.BytesSent + p.BytesReceived
	}
	return n
}

// StatsByID indexes path statistics by path id.
func StatsByID(ps []transport.PathStats) map[int]transport.PathStats {
	m := make(map[int]transport.PathStats, len(ps))
	for _, p := range ps {
		m[p.ID] = p
	}
	return m
}

// PeerOf names the peer of a session by the address of its lowest path.
func PeerOf(sess *transport.Session) string {
	if st := sess.Stats(); len(st) > 0 {
		return st[0].Remote
	}
	return "?"
}

// Mbps converts bytes over seconds to Mbit/s (10^6 bits per second); 0
// when seconds is not positive.
func Mbps(bytes int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(bytes) * 8 / 1e6 / seconds
}

// closing holds the ids (first 8 hex digits, as the transport logs them)
// of sessions this process is closing on purpose.
var closing sync.Map

// shortID is a session id as the transport's log lines give it.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// CloseSession ends sess: with Shutdown (deliver what was written first,
// bounded by d) when graceful, else with Close. For two seconds Closing
// reports the session as closed on purpose, so that the transport's
// warnings about its paths dropping can be left out.
func CloseSession(ctx context.Context, sess *transport.Session, graceful bool, d time.Duration) error {
	id := shortID(sess.ID())
	closing.Store(id, true)
	time.AfterFunc(2*time.Second, func() { closing.Delete(id) })
	if !graceful {
		return sess.Close()
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return sess.Shutdown(ctx)
}

// Closing reports whether the session whose log attribute "session" is id
// is being closed on purpose by CloseSession.
func Closing(id string) bool {
	if id == "" {
		return false
	}
	_, ok := closing.Load(shortID(id))
	return ok
}
