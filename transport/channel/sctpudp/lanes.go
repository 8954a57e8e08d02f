package sctpudp

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/braid-hpc/braid/transport/channel"
)

var _ channel.Lanes = (*Stream)(nil)

// errNotChannel is returned by OpenLane and AcceptLane on a stream other
// than the association's stream 0.
var errNotChannel = errors.New("sctpudp: lanes are opened on the channel (stream 0) only")

// OpenLane implements channel.Lanes on the channel (stream 0): lane id is
// SCTP stream id of the association, ordered and reliable. It returns the
// same Stream every time for one id, whether this side or the peer sent on
// it first. Lanes and Assoc.OpenStream / AcceptStream do not mix on one
// association: use one or the other.
func (s *Stream) OpenLane(id uint16) (net.Conn, error) {
	if s.assoc.main != s {
		return nil, errNotChannel
	}
	return s.assoc.lane(id)
}

// AcceptLane implements channel.Lanes on the channel (stream 0): it waits
// for the peer to send on a stream id that OpenLane has not returned, and
// returns it. It returns io.EOF once the association has ended.
func (s *Stream) AcceptLane(ctx context.Context) (uint16, net.Conn, error) {
	if s.assoc.main != s {
		return 0, nil, errNotChannel
	}
	st, err := s.assoc.acceptLane(ctx)
	if err != nil {
		return 0, nil, err
	}
	return st.ID(), st, nil
}

// lane returns the Stream of lane id, opening it on first use. It holds
// as.mu across pion's OpenStream, which takes the association's own lock:
// as.mu comes first, and pion never calls back into Assoc.
func (as *Assoc) lane(id uint16) (*Stream, error) {
	if id == 0 {
		return nil, ErrStreamID
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.closing.Load() {
		return nil, as.opError("open", net.ErrClosed)
	}
	if st := as.lanes[id]; st != nil {
		return st, nil
	}
	// pion returns the stream the peer already sent on, if any: the
	// accept pump then finds it in lanes and skips it.
	ps, err := as.a.OpenStream(id, ppid)
	if err != nil {
		return nil, as.opError("open", err)
	}
	st := newStream(as, ps, StreamOptions{})
	as.streams[st] = struct{}{}
	as.lanes[id] = st
	return st, nil
}

// acceptLane returns the next stream the peer sent on first that lane
// has not handed out. pion queues at most 16 streams the peer started and
// drops the data of more until they are accepted (the peer resends it),
// so the caller should keep accepting.
func (as *Assoc) acceptLane(ctx context.Context) (*Stream, error) {
	as.acceptOnce.Do(func() {
		as.pumpOn.Store(true)
		go as.pump()
	})
	for {
		select {
		case ps := <-as.accepted:
			id := ps.StreamIdentifier()
			as.mu.Lock()
			if as.lanes[id] != nil {
				as.mu.Unlock()
				continue // OpenLane got there first
			}
			st := newStream(as, ps, StreamOptions{})
			as.streams[st] = struct{}{}
			as.lanes[id] = st
			as.mu.Unlock()
			return st, nil
		case <-as.pumpDone:
			return nil, io.EOF
		case <-as.done:
			return nil, as.opError("accept", net.ErrClosed)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
