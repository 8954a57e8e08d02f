package sctpudp

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net"
	"sync"
	"time"

	"github.com/pion/sctp"
	"github.com/pion/transport/v5/udp"

	"github.com/braid-hpc/braid/internal/accept"
)

// listener runs one SCTP association per peer UDP address over a single UDP
// socket. pion's udp.Listener does the demultiplexing; its accept filter
// lets only a well-formed SCTP INIT open a new per-peer conn, so stray or
// hostile datagrams from unknown addresses cost one check and no goroutine.
//
// Lock order: mu is a leaf.
type listener struct {
	ul  net.Listener // *udp.listener
	cfg *Config

	ready    chan *Stream  // established, not yet accepted
	done     chan struct{} // closed by Close
	served   chan struct{} // closed when serve ends
	serveErr error         // why serve ended; read after served is closed
	slots    chan struct{} // one per handshake in flight or stream in ready

	mu      sync.Mutex
	pending map[net.Conn]struct{} // conns still handshaking

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

func listen(ctx context.Context, cfg *Config, addr string) (*listener, error) {
	laddr, err := resolveUDP(ctx, addr)
	if err != nil {
		return nil, err
	}
	lc := udp.ListenConfig{
		Backlog:         cfg.Backlog,
		AcceptFilter:    isInit,
		ReadBufferSize:  cfg.ReceiveBuffer,
		WriteBufferSize: cfg.fixedSendBuffer(),
	}
	ul, err := lc.Listen("udp", laddr)
	if err != nil {
		return nil, err
	}
	l := &listener{
		ul:      ul,
		cfg:     cfg,
		ready:   make(chan *Stream, cfg.Backlog),
		done:    make(chan struct{}),
		served:  make(chan struct{}),
		slots:   make(chan struct{}, cfg.Backlog),
		pending: map[net.Conn]struct{}{},
	}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// serve takes each new peer conn from the UDP demultiplexer and runs its
// handshake. It ends only when the listener is closed: other failures
// are retried with a backoff.
func (l *listener) serve() {
	defer l.wg.Done()
	defer close(l.served)
	b := accept.Backoff{Logger: l.cfg.Logger, Name: "sctp-udp", Addr: l.ul.Addr().String()}
	for {
		c, err := l.ul.Accept()
		if err != nil {
			if !errors.Is(err, udp.ErrClosedListener) && b.Wait(err, l.done) {
				continue
			}
			l.serveErr = err
			return
		}
		b.Reset()
		select {
		case l.slots <- struct{}{}:
		default:
			l.cfg.Logger.Debug("sctp-udp: backlog full, INIT dropped", "path", c.RemoteAddr().String())
			_ = c.Close()
			continue
		}
		l.mu.Lock()
		select {
		case <-l.done: // Close already swept pending
			l.mu.Unlock()
			_ = c.Close()
			<-l.slots
			continue
		default:
		}
		l.pending[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.handshake(c)
	}
}

// handshake runs the server side of the SCTP handshake on c and queues the
// association for Accept.
func (l *listener) handshake(c net.Conn) {
	defer l.wg.Done()
	// Closing c ends pion's read loop, which fails the handshake.
	timer := time.AfterFunc(l.cfg.HandshakeTimeout, func() { _ = c.Close() })
	a, err := sctp.ServerWithOptions(serverOptions(l.cfg, initFixConn{c})...)
	if !timer.Stop() && err == nil {
		// The timer closed c just as the handshake finished.
		_ = a.Close()
		err = sctp.ErrAssociationClosedBeforeConn
	}
	l.mu.Lock()
	delete(l.pending, c)
	l.mu.Unlock()
	if err != nil {
		_ = c.Close()
		<-l.slots
		l.cfg.Logger.Debug("sctp-udp: handshake failed", "path", c.RemoteAddr().String(), "err", err)
		return
	}
	as, err := newAssoc(a, l.cfg, c.LocalAddr(), c.RemoteAddr())
	if err != nil {
		_ = a.Close()
		<-l.slots
		return
	}
	l.cfg.Logger.Debug("sctp-udp: association up", "path", c.RemoteAddr().String())
	select {
	case <-l.done:
		_ = as.Close()
		<-l.slots
	default:
		l.ready <- as.main // cannot block: a slot is held
	}
}

// Accept implements net.Listener.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case s := <-l.ready:
		<-l.slots
		return s, nil
	case <-l.done:
	case <-l.served:
		select {
		case <-l.done:
		default:
			return nil, &net.OpError{Op: "accept", Net: "sctp-udp", Addr: l.Addr(), Err: l.serveErr}
		}
	}
	return nil, &net.OpError{Op: "accept", Net: "sctp-udp", Addr: l.Addr(), Err: net.ErrClosed}
}

// Close implements net.Listener. It ends handshakes in flight and closes
// associations not yet accepted; accepted ones are not touched.
func (l *listener) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		close(l.done)
		for c := range l.pending {
			_ = c.Close()
		}
		l.mu.Unlock()
		// The UDP socket stays open while accepted conns use it.
		l.closeErr = l.ul.Close()
		l.wg.Wait()
		// Nothing sends to ready any more; Accept may still take some.
		for drained := false; !drained; {
			select {
			case s := <-l.ready:
				<-l.slots
				_ = s.assoc.Close()
			default:
				drained = true
			}
		}
	})
	return l.closeErr
}

// Addr implements net.Listener: the UDP address the socket is bound to.
func (l *listener) Addr() net.Addr { return l.ul.Addr() }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// isInit reports whether b is an SCTP packet whose first chunk is an INIT
// (RFC 9260 section 3.3.2) with a zero verification tag and a valid CRC32c:
// the only packet that may start an association.
func isInit(b []byte) bool {
	const (
		common  = 12 // common header
		initLen = 20 // INIT chunk without parameters
	)
	if len(b) < common+initLen {
		return false
	}
	if b[common] != ctInit || binary.BigEndian.Uint32(b[4:8]) != 0 {
		return false
	}
	if l := binary.BigEndian.Uint16(b[common+2:]); int(l) < initLen || int(l) > len(b)-common {
		return false
	}
	return checksumOK(b)
}
