package store

import (
	"errors"
	"fmt"
	"syscall"
)

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

// ErrCorrupt is matched by a *CorruptError: a stored blob whose content
// no longer hashes to its ID.
var ErrCorrupt = errors.New("store: blob content does not match its sha256")

// ErrNoSpace is returned when the disk (or the database on it) is full.
// Errors that wrap syscall.ENOSPC match it too, see IsNoSpace.
var ErrNoSpace = errors.New("store: no space left on the data disk")

// CorruptError reports a blob whose bytes on disk do not hash to its ID:
// the disk or someone changed the file after it was stored. Readers
// return it instead of io.EOF, so no consumer takes the bytes as good.
// Putting the same bytes again replaces the file.
type CorruptError struct {
	// ID is the blob's ID, the sha256 its content should have.
	ID string
	// Path is the file that holds the blob.
	Path string
	// Sum is the sha256 of what the file holds, or empty if it could
	// not be computed (the file is shorter than it was).
	Sum string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("store: blob %s: content does not match its sha256 (stored on disk at %s); upload the same bytes again to heal it", e.ID, e.Path)
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// IsNoSpace reports whether err says the disk is full: ErrNoSpace, ENOSPC
// or EDQUOT (a disk quota).
func IsNoSpace(err error) bool {
	return errors.Is(err, ErrNoSpace) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
