package store

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
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

// ErrNoBucket is returned by an S3 store whose bucket does not exist.
var ErrNoBucket = errors.New("store: no such bucket")

// ErrDenied is returned by an S3 store that refuses the credentials, or
// the bucket's policy refuses them the operation.
var ErrDenied = errors.New("store: the object store refused the credentials")

// ErrUnreachable is returned by an S3 store that does not answer: down,
// the wrong endpoint, or stalled longer than its timeout.
var ErrUnreachable = errors.New("store: the object store is unreachable")

// CorruptError reports a blob whose stored bytes do not hash to its ID:
// the disk, the object store or someone changed them after they were
// stored. Readers
// return it instead of io.EOF, so no consumer takes the bytes as good.
// Putting the same bytes again replaces the file.
type CorruptError struct {
	// ID is the blob's ID, the sha256 its content should have.
	ID string
	// Path is the file that holds the blob, or the s3:// URL of its
	// object.
	Path string
	// Sum is the sha256 of what the file holds, or empty if it could
	// not be computed (the file is shorter than it was).
	Sum string
}

func (e *CorruptError) Error() string {
	where := "on disk at " + e.Path
	if strings.Contains(e.Path, "://") {
		where = "at " + e.Path
	}
	return fmt.Sprintf("store: blob %s: content does not match its sha256 (stored %s); upload the same bytes again to heal it", e.ID, where)
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// IsNoSpace reports whether err says the disk is full: ErrNoSpace, ENOSPC
// or EDQUOT (a disk quota).
func IsNoSpace(err error) bool {
	return errors.Is(err, ErrNoSpace) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// IsUnavailable reports whether err says the database could not be
// reached or lost the connection (down, restarting, a network fault):
// the same write may succeed later. An error the database answered with
// (a constraint, a full disk) is not.
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, ErrClosed) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Connection exceptions, and a server shutting down or starting.
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	if IsNoSpace(err) {
		return false
	}
	var ce *pgconn.ConnectError
	var oe *net.OpError
	var de *net.DNSError
	return errors.As(err, &ce) || errors.As(err, &oe) || errors.As(err, &de) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}
