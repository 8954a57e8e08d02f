package sctpudp

import (
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// queueWrites turns the packetWriter on; BenchmarkThroughput turns it off
// to measure what it brings.
var queueWrites = true

// writeQueue is how many packets a packetWriter holds before Write waits:
// 64 packets of the largest MTU are 512 KiB, more than the default socket
// send buffer, so the queue adds little to what the kernel already holds.
const writeQueue = 64

// packetWriter sends the packets pion's write loop hands an association's
// conn from a goroutine of its own, as many per system call as have queued
// up where the socket allows (sendmmsg). pion has one write loop per
// association that builds, checksums and sends every packet; with the
// sending moved here, the loop builds the next packets while the kernel
// takes the last ones, and the write(2) per packet becomes one sendmmsg(2)
// per burst. Write returns once the packet is queued; a send error is
// returned by the next Write, and pion then closes the conn as it would
// have.
type packetWriter struct {
	send func(pkts [][]byte) error // sends all of pkts or fails

	q        chan []byte
	stop     chan struct{} // closed by close
	done     chan struct{} // closed when run has sent what was queued
	stopOnce sync.Once
	err      atomic.Pointer[error] // the first send error
}

func newPacketWriter(send func([][]byte) error) *packetWriter {
	w := &packetWriter{
		send: send,
		q:    make(chan []byte, writeQueue),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go w.run()
	return w
}

// write queues p, which the caller must not change afterwards (pion
// marshals every packet into a new slice).
func (w *packetWriter) write(p []byte) (int, error) {
	if err := w.err.Load(); err != nil {
		return 0, *err
	}
	select {
	case <-w.stop:
		// Not into the queue, which nothing reads any more. A write racing
		// with close may still be queued after the last drain and is then
		// lost, as a datagram may be.
		return 0, net.ErrClosed
	default:
	}
	select {
	case w.q <- p:
		return len(p), nil
	case <-w.stop:
		return 0, net.ErrClosed
	}
}

func (w *packetWriter) run() {
	defer close(w.done)
	batch := make([][]byte, 0, writeQueue)
	for {
		stopping := false
		select {
		case p := <-w.q:
			batch = append(batch[:0], p)
		case <-w.stop:
			batch, stopping = batch[:0], true
		}
	drain:
		for len(batch) < writeQueue {
			select {
			case p := <-w.q:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		if len(batch) > 0 && w.err.Load() == nil {
			if err := w.send(batch); err != nil {
				w.err.CompareAndSwap(nil, &err)
			}
		}
		clear(batch) // let the packets go
		if stopping && len(w.q) == 0 {
			return
		}
	}
}

// close sends what is queued (an ABORT or SHUTDOWN COMPLETE pion wrote
// just before closing the conn) and stops the goroutine.
func (w *packetWriter) close() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

// batchSender returns a send function that hands a connected UDP socket
// several packets per sendmmsg(2) (one write per packet where the system
// has no sendmmsg).
func batchSender(c *net.UDPConn) func([][]byte) error {
	var wb interface {
		WriteBatch(ms []ipv4.Message, flags int) (int, error)
	}
	if la, ok := c.LocalAddr().(*net.UDPAddr); ok && la.IP.To4() == nil && la.IP != nil {
		wb = ipv6.NewPacketConn(c)
	} else {
		wb = ipv4.NewPacketConn(c)
	}
	msgs := make([]ipv4.Message, writeQueue)
	for i := range msgs {
		msgs[i].Buffers = make([][]byte, 1)
	}
	return func(pkts [][]byte) error {
		for len(pkts) > 0 {
			n := min(len(pkts), len(msgs))
			for i, p := range pkts[:n] {
				msgs[i].Buffers[0] = p
			}
			sent, err := wb.WriteBatch(msgs[:n], 0)
			for i := range msgs[:n] {
				msgs[i].Buffers[0] = nil
			}
			if err != nil {
				return err
			}
			pkts = pkts[max(sent, 1):]
		}
		return nil
	}
}

// connSender returns a send function that writes each packet to c in turn.
func connSender(c net.Conn) func([][]byte) error {
	return func(pkts [][]byte) error {
		for _, p := range pkts {
			if _, err := c.Write(p); err != nil {
				return err
			}
		}
		return nil
	}
}

// queuedConn is a conn whose writes go through a packetWriter: the
// listener's per-peer conns, which share the listener's socket.
type queuedConn struct {
	net.Conn
	w *packetWriter
}

func newQueuedConn(c net.Conn) *queuedConn {
	return &queuedConn{Conn: c, w: newPacketWriter(connSender(c))}
}

func (c *queuedConn) Write(p []byte) (int, error) { return c.w.write(p) }

// Close sends what is queued, then closes the conn.
func (c *queuedConn) Close() error {
	c.w.close()
	return c.Conn.Close()
}
