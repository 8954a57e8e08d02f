package ops

import "errors"

// ErrUnknownOp is returned for an operation name no registry knows.
var ErrUnknownOp = errors.New("ops: unknown operation")

// ErrBadParam is returned for invalid parameters or hints: an unknown
// parameter, a value out of range, a zero tile size, too many units.
var ErrBadParam = errors.New("ops: bad parameter")

// ErrBadInput is returned when a job's input or a unit's data cannot be
// used: a corrupt or unsupported image, a malformed tile.
var ErrBadInput = errors.New("ops: bad input")
