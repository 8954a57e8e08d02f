package ops

import (
	"errors"
	"strings"
)

// ErrUnknownOp is returned for an operation name no registry knows.
var ErrUnknownOp = errors.New("ops: unknown operation")

// ErrBadParam is returned for invalid parameters or hints: an unknown
// parameter, a value out of range, a zero tile size, too many units.
var ErrBadParam = errors.New("ops: bad parameter")

// ErrBadInput is returned when a job's input or a unit's data cannot be
// used: a corrupt or unsupported image, a malformed tile.
var ErrBadInput = errors.New("ops: bad input")

// Message returns err's text without the trailing sentinel of this package
// (as in "blur: corrupt png image: unexpected EOF: ops: bad input"), for
// messages shown to people. errors.Is on err still finds the sentinel.
func Message(err error) string {
	msg := err.Error()
	for _, s := range []error{ErrUnknownOp, ErrBadParam, ErrBadInput} {
		msg = strings.TrimSuffix(msg, ": "+s.Error())
	}
	return msg
}
