package sctpudp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/sctp"
)

// Assoc is one SCTP association: the channel's stream 0 plus whatever other
// streams the two sides open on it. Get it from Stream.Assoc.
type Assoc struct {
	a     *sctp.Association
	cfg   *Config
	laddr net.Addr
	raddr net.Addr
	main  *Stream
	// tuner sizes the socket's send buffer (a dialed association with
	// Config.SendBuffer zero); nil: the buffer is fixed.
	tuner *sendTuner

	mu      sync.Mutex
	streams map[*Stream]struct{} // every Stream handed out, for Close
	lanes   map[uint16]*Stream   // lanes handed out by OpenLane or AcceptLane

	closing   atomic.Bool
	done      chan struct{} // closed when Close starts
	closeOnce sync.Once
	closeErr  error

	acceptOnce sync.Once
	accepted   chan *sctp.Stream
	pumpDone   chan struct{} // closed when the accept pump ends
	pumpOn     atomic.Bool
}

// newAssoc wraps an established association and opens its stream 0.
func newAssoc(a *sctp.Association, cfg *Config, laddr, raddr net.Addr) (*Assoc, error) {
	as := &Assoc{
		a:        a,
		cfg:      cfg,
		laddr:    laddr,
		raddr:    raddr,
		streams:  map[*Stream]struct{}{},
		lanes:    map[uint16]*Stream{},
		done:     make(chan struct{}),
		accepted: make(chan *sctp.Stream),
		pumpDone: make(chan struct{}),
	}
	s, err := a.OpenStream(0, ppid)
	if err != nil {
		return nil, err
	}
	as.main = as.track(s, StreamOptions{})
	return as, nil
}

// Channel returns the association's stream 0, the one Dial and Accept
// return.
func (as *Assoc) Channel() *Stream { return as.main }

// OpenStream returns stream id (1..65535) of the association, sending as o
// says. Both ends name the same stream by the same id: if the peer has
// already sent on id, this is that stream. Nothing is sent until the first
// Write; the peer's AcceptStream returns the stream then.
func (as *Assoc) OpenStream(id uint16, o StreamOptions) (*Stream, error) {
	if id == 0 {
		return nil, ErrStreamID
	}
	if as.closing.Load() {
		return nil, as.opError("open", net.ErrClosed)
	}
	s, err := as.a.OpenStream(id, ppid)
	if err != nil {
		return nil, as.opError("open", fmt.Errorf("stream %d: %w", id, err))
	}
	if err := o.apply(s); err != nil {
		return nil, err
	}
	return as.track(s, o), nil
}

// AcceptStream waits for the peer to send on a stream this side has not
// opened, and returns it, sending ordered and reliably. It returns io.EOF
// once the association has ended.
func (as *Assoc) AcceptStream(ctx context.Context) (*Stream, error) {
	as.acceptOnce.Do(func() {
		as.pumpOn.Store(true)
		go as.pump()
	})
	select {
	case s := <-as.accepted:
		return as.track(s, StreamOptions{}), nil
	case <-as.pumpDone:
		return nil, io.EOF
	case <-as.done:
		return nil, as.opError("accept", net.ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pump hands pion's accepted streams to AcceptStream. Stream 0 shows up
// there when the peer's first data beats our OpenStream(0); it is the
// channel, so it is skipped. pion closes its accept queue when the
// association ends, which ends the pump.
func (as *Assoc) pump() {
	defer close(as.pumpDone)
	for {
		s, err := as.a.AcceptStream()
		if err != nil {
			return
		}
		if s.StreamIdentifier() == 0 {
			continue
		}
		select {
		case as.accepted <- s:
		case <-as.done:
			return
		}
	}
}

// Close shuts the association down: data already written is delivered and
// the SHUTDOWN exchange run, for at most Config.Linger, after which the
// association is aborted. Close returns when every goroutine the
// association ran has ended. Reads and Writes on its streams then fail with
// net.ErrClosed.
func (as *Assoc) Close() error {
	as.closeOnce.Do(func() {
		as.closing.Store(true)
		close(as.done)
		graceful := false
		if as.cfg.Linger > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), as.cfg.Linger)
			err := as.a.Shutdown(ctx)
			cancel()
			// Not established: the peer shut down or aborted first, and
			// there is nothing to flush.
			graceful = err == nil || errors.Is(err, sctp.ErrShutdownNonEstablished)
		}
		if !graceful {
			as.a.Abort("sctpudp: close")
		}
		err := as.a.Close()
		if err != nil && !errors.Is(err, net.ErrClosed) {
			as.closeErr = as.opError("close", err)
		}
		if as.pumpOn.Load() {
			<-as.pumpDone
		}
		// pion runs a goroutine per pending read deadline until it fires;
		// clearing the deadline ends it now.
		as.mu.Lock()
		for s := range as.streams {
			_ = s.s.SetReadDeadline(time.Time{})
		}
		as.mu.Unlock()
		as.cfg.Logger.Debug("sctp-udp: association closed", "path", as.raddr.String(), "graceful", graceful)
	})
	return as.closeErr
}

// track wraps s in a Stream and remembers it for Close.
func (as *Assoc) track(s *sctp.Stream, o StreamOptions) *Stream {
	st := newStream(as, s, o)
	as.mu.Lock()
	as.streams[st] = struct{}{}
	as.mu.Unlock()
	return st
}

func (as *Assoc) untrack(st *Stream) {
	as.mu.Lock()
	delete(as.streams, st)
	if as.lanes[st.ID()] == st {
		delete(as.lanes, st.ID())
	}
	as.mu.Unlock()
}

// LocalAddr returns the local UDP address.
func (as *Assoc) LocalAddr() net.Addr { return as.laddr }

// RemoteAddr returns the peer's UDP address.
func (as *Assoc) RemoteAddr() net.Addr { return as.raddr }

// Interleaved reports whether the association negotiated RFC 8260 user
// message interleaving (I-DATA): then a large message on one stream is sent
// in chunks between other streams' messages rather than ahead of them.
// Both ends of two braid endpoints offer it; usrsctp does not by default,
// and the association then runs with plain DATA chunks.
func (as *Assoc) Interleaved() bool {
	m, ok := as.a.Metadata()
	return ok && m.MessageInterleavingEnabled
}

// Stats returns what the association has sent and received, in bytes of
// SCTP packets, its smoothed round-trip time, congestion window and MTU.
func (as *Assoc) Stats() Stats {
	st := Stats{
		BytesSent:     as.a.BytesSent(),
		BytesReceived: as.a.BytesReceived(),
		SRTT:          time.Duration(as.a.SRTT() * float64(time.Millisecond)),
		CWND:          as.a.CWND(),
		MTU:           int(as.a.MTU()),
		SendBuffer:    as.cfg.fixedSendBuffer(),
	}
	if as.tuner != nil {
		st.SendBuffer = as.tuner.size()
	}
	return st
}

// Stats are counters of one association.
type Stats struct {
	BytesSent     uint64
	BytesReceived uint64
	SRTT          time.Duration // smoothed round-trip time
	CWND          uint32        // congestion window, bytes
	MTU           int           // largest packet sent: Config.MTU or the path's
	// SendBuffer is the UDP socket's send buffer as asked of the kernel:
	// Config.SendBuffer, or the size tuned to the send rate.
	SendBuffer int
}

func (as *Assoc) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "sctp-udp", Source: as.laddr, Addr: as.raddr, Err: err}
}
