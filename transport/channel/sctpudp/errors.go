package sctpudp

import "errors"

var (
	// ErrStreamID is returned by OpenStream for stream id 0, which is the
	// channel's own stream.
	ErrStreamID = errors.New("sctpudp: stream id 0 is the channel stream; use 1..65535")

	// ErrMessageTooLarge is returned by Write on an unordered or partially
	// reliable stream when one Write exceeds Config.MaxMessageSize: such a
	// stream keeps message boundaries, so it cannot cut the bytes up.
	ErrMessageTooLarge = errors.New("sctpudp: message larger than MaxMessageSize on a message stream")
)
