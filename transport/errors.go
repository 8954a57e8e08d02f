package transport

import (
	"errors"
	"fmt"
	"net"
)

var (
	// ErrClosed is returned by operations on a session or stream that was
	// closed locally. errors.Is(ErrClosed, net.ErrClosed) holds, as for a
	// closed net.Conn.
	ErrClosed error = closedError{}
	// ErrPeerClosed is returned when the peer closed the session.
	ErrPeerClosed = errors.New("transport: session closed by peer")
	// ErrStreamClosed is returned by WriteMessage after Close on the stream.
	ErrStreamClosed = errors.New("transport: stream closed for writing")
	// ErrAuth means the peer does not hold the cluster key, or we do not
	// hold the peer's.
	ErrAuth = errors.New("transport: authentication failed: the peer does not hold the same cluster key (check BRAID_KEY or --key-file on both hosts)")
	// ErrNoPaths is returned when every path of a session stayed down past
	// Config.SessionTimeout.
	ErrNoPaths = errors.New("transport: no live path to the peer")
	// ErrMessageTooLarge is returned by ReadMessage when a message exceeds
	// Config.MaxMessageSize; read such messages with NextMessage.
	ErrMessageTooLarge = errors.New("transport: message exceeds MaxMessageSize")
	// ErrTooManyStreams is returned when the peer opens more streams than
	// Config.MaxStreams allows.
	ErrTooManyStreams = errors.New("transport: too many streams")
)

// closedError is ErrClosed: a session closed locally, which is also a
// net.ErrClosed.
type closedError struct{}

func (closedError) Error() string { return "transport: session closed" }

// Is makes errors.Is(ErrClosed, net.ErrClosed) hold.
func (closedError) Is(target error) bool { return target == net.ErrClosed }

// PathError describes a failure of one path of a session.
type PathError struct {
	Path   int    // path id, stable for the session
	Local  string // local address, may be empty
	Remote string // remote address
	Op     string // "dial", "handshake", "read", "write", "heartbeat"
	Err    error
}

func (e *PathError) Error() string {
	local := e.Local
	if local == "" {
		local = "*"
	}
	return fmt.Sprintf("transport: path %d (%s -> %s): %s: %v", e.Path, local, e.Remote, e.Op, e.Err)
}

func (e *PathError) Unwrap() error { return e.Err }

// ErrProtocol is what every ProtocolError is: errors.Is(err, ErrProtocol)
// tells a peer that broke the protocol from a network failure.
var ErrProtocol = errors.New("transport: protocol violation")

// ProtocolError reports a frame that violates the protocol; the channel
// that carried it is closed (and reported as a PathError wrapping it). A
// peer running another version of braid, or a bug, is the usual cause.
// errors.As finds it through a PathError; Unwrap returns the frame
// decoder's error, if the decoder found the fault.
type ProtocolError struct {
	Msg string // what was wrong, for a person
	Err error  // the decoder's error, or nil
}

func (e *ProtocolError) Error() string {
	switch {
	case e.Msg == "" && e.Err != nil:
		return "transport: protocol violation: " + e.Err.Error()
	case e.Err != nil:
		return "transport: protocol violation: " + e.Msg + ": " + e.Err.Error()
	}
	return "transport: protocol violation: " + e.Msg
}

// Unwrap returns the decoder's error, or nil.
func (e *ProtocolError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrProtocol) hold.
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

func protoErrorf(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// protoErr reports a frame the decoder rejected with err.
func protoErr(err error) error { return &ProtocolError{Err: err} }
