package transport

import (
	"context"
	"fmt"
	"net"

	"github.com/braid-hpc/braid/transport/channel"
)

// Lanes
//
// A channel kind may carry several independent ordered byte streams over
// one connection (channel.Lanes: the streams of an SCTP association). A
// session then splits each path's channel into lanes, so that a packet
// lost from one braid stream's data holds back only the streams that share
// its lane, not every stream on the path (head-of-line blocking inside the
// association):
//
//	path p, one SCTP association
//	  lane 0 (SCTP stream 0)  handshake, ACK, ACKLANE, WINDOW, PING, PONG, GOAWAY
//	  lane 1 (SCTP stream 1)  data of braid streams with 1 + (id/2) mod (L-1) = 1
//	  ...
//	  lane L-1                data of braid streams mapping to L-1
//
// with L = Config.Lanes. A stream's data frames, and the Start and End
// frames that steer its striped segments, all go on the stream's lane, so
// the Enhanced striping protocol still finds each channel-level counter in
// FIFO order: a lane is the unit of FIFO order, and the receiver keeps one
// striping counter per lane. Each lane counts and acknowledges its own data
// frames (ACK for lane 0, ACKLANE for the others, both sent on lane 0), and
// when the path fails the unacknowledged frames of every lane are sent
// again on the other paths, as for a channel without lanes.
//
// Each side chooses the lanes it sends on; a receiver reads whatever lane
// the peer opens, up to MaxLanes. Liveness (heartbeats and the path
// timeout) and rate and RTT estimation stay per path, on lane 0.

// MaxLanes bounds Config.Lanes, and the lanes a peer may open per path: a
// peer that sends on lane MaxLanes or above loses the channel.
const MaxLanes = 64

// laneOf returns the lane that carries the data of stream id on a channel
// split into n lanes. Streams are spread over lanes 1..n-1 by id/2, so the
// dialer's odd ids and the listener's even ids each cover every lane. Id 0,
// which no stream has, stands for control frames: lane 0.
func laneOf(id uint32, n int) uint16 {
	if n <= 1 || id == 0 {
		return 0
	}
	return uint16(1 + (id/2)%uint32(n-1))
}

// lane is one lane of a path's current channel: lane 0 is the channel.
// Guarded by the session's mu.
type lane struct {
	conn    net.Conn // nil until this side or the peer first used the lane
	reading bool     // a reader runs on conn

	unacked     []txRef // data frames sent on the lane, in order, not yet acknowledged
	ackedFrames uint64  // data frames of the lane the peer acknowledged
	rxFrames    uint64  // data frames received on the lane
	rxAcked     uint64  // rxFrames value in the last acknowledgement we queued
	ackDue      bool    // send an acknowledgement of rxFrames

	// The peer's striping counter for this lane, as last set by a Start
	// we sent: the segment, next fragment and direction.
	ctrSeg  *txSeg
	ctrNext int
	ctrDir  uint8
}

// lane returns lane id of p's current channel, creating its state. Caller
// holds s.mu.
func (p *path) lane(id uint16) *lane {
	for len(p.lanes) <= int(id) {
		p.lanes = append(p.lanes, nil)
	}
	l := p.lanes[id]
	if l == nil {
		l = &lane{}
		p.lanes[id] = l
	}
	return l
}

// dataLane returns the lane that carries the data of stream id on p.
// Caller holds s.mu.
func (p *path) dataLane(id uint32) *lane { return p.lane(laneOf(id, p.nlanes)) }

// startLane records conn as lane id of channel gen of p and starts its
// reader unless one runs. It reports false when the channel is gone.
func (s *Session) startLane(p *path, gen int, id uint16, conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || p.gen != gen || p.conn == nil {
		return false
	}
	l := p.lane(id)
	if l.conn == nil {
		l.conn = conn
	}
	if !l.reading {
		l.reading = true
		s.wg.Add(1)
		go s.readLoop(p, conn, gen, id, l)
	}
	return true
}

// acceptLanes starts a reader on every lane the peer opens on channel gen
// of p, until the channel closes.
func (s *Session) acceptLanes(p *path, lanes channel.Lanes, gen int) {
	defer s.wg.Done()
	for {
		// Closing the channel ends AcceptLane.
		id, conn, err := lanes.AcceptLane(context.Background())
		if err != nil {
			return
		}
		if id >= MaxLanes {
			err := protoErrorf("the peer opened lane %d; lanes go up to %d", id, MaxLanes-1)
			s.log.Error("closing channel after protocol violation", "path", p.id, "remote", p.remote, "err", err)
			s.pathDown(p, gen, &PathError{Path: p.id, Local: p.local, Remote: p.remote, Op: "accept lane", Err: err})
			return
		}
		if !s.startLane(p, gen, id, conn) {
			return
		}
	}
}

// laneConns is a path writer's view of the lanes it writes on.
type laneConns struct {
	s     *Session
	p     *path
	gen   int
	lanes channel.Lanes // nil: the channel has no lanes
	conns []net.Conn
}

// get returns the conn of lane id, opening the lane (and starting its
// reader) on first use.
func (lc *laneConns) get(id uint16) (net.Conn, error) {
	if int(id) < len(lc.conns) && lc.conns[id] != nil {
		return lc.conns[id], nil
	}
	if lc.lanes == nil {
		return nil, fmt.Errorf("transport: frame for lane %d on a channel without lanes", id)
	}
	conn, err := lc.lanes.OpenLane(id)
	if err != nil {
		return nil, fmt.Errorf("open lane %d: %w", id, err)
	}
	if !lc.s.startLane(lc.p, lc.gen, id, conn) {
		return nil, ErrClosed
	}
	for len(lc.conns) <= int(id) {
		lc.conns = append(lc.conns, nil)
	}
	lc.conns[id] = conn
	return conn, nil
}
