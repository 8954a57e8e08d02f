package api

import "errors"

// ErrTooLarge is returned when an encoded message is larger than the limit
// the decoder was given.
var ErrTooLarge = errors.New("api: message larger than the limit")

// ErrMalformed is returned when bytes on the data plane are not a valid
// encoded Unit or Result: truncated, wrong kind, unknown version, or with
// lengths that do not fit.
var ErrMalformed = errors.New("api: malformed message")
