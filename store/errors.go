package store

import "errors"

// ErrNotFound is returned for a blob, job, unit or worker that does not
// exist.
var ErrNotFound = errors.New("store: not found")

// ErrInvalidID is returned for a blob ID that is not 64 lowercase hex
// digits.
var ErrInvalidID = errors.New("store: invalid blob id (want 64 lowercase hex digits, the SHA-256 of the content)")

// ErrConflict is returned for a state change the record's current state
// forbids, such as canceling a finished job.
var ErrConflict = errors.New("store: conflicting state")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("store: closed")
