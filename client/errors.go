package client

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinels for errors.Is on an *Error, by HTTP status.
var (
	// ErrBadRequest matches a 400: the request is invalid; the message
	// says what to change.
	ErrBadRequest = errors.New("client: bad request")
	// ErrUnauthorized matches a 401: no valid credential (the cluster key
	// differs from the server's, or the token is unknown or revoked).
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrForbidden matches a 403: the credential's role may not make the
	// request.
	ErrForbidden = errors.New("client: forbidden")
	// ErrNotFound matches a 404: no such blob, job or worker.
	ErrNotFound = errors.New("client: not found")
	// ErrConflict matches a 409: the resource's state forbids the request.
	ErrConflict = errors.New("client: conflict")
	// ErrGone matches a 410: the blob was a job's output and was removed
	// after the server's retention period.
	ErrGone = errors.New("client: gone")
	// ErrTooLarge matches a 413: the upload exceeds the server's limit
	// for one upload (braid server --max-upload).
	ErrTooLarge = errors.New("client: too large")
	// ErrInsufficientStorage matches a 507: the server's data limit
	// (braid server --max-data) or its disk is full.
	ErrInsufficientStorage = errors.New("client: insufficient storage")
	// ErrIncomplete is returned when a download ends before all of the
	// blob's bytes arrived.
	ErrIncomplete = errors.New("client: incomplete download")
	// ErrCorrupt is returned when the bytes downloaded do not hash to the
	// blob's ID.
	ErrCorrupt = errors.New("client: downloaded bytes do not match the blob's sha256")
)

// ErrCertificate is returned when the server's TLS certificate is not the
// pinned one, or the server cannot prove that it holds the cluster key
// for it. No credential was sent.
var ErrCertificate = errors.New("client: the server's TLS certificate is not the expected one")

// ErrNoPin is returned over HTTPS without a way to check the server's
// certificate: neither a fingerprint nor the cluster key.
var ErrNoPin = errors.New("client: no way to check the server's certificate: give its fingerprint " +
	"(--server-fingerprint, or a join token from braid token create) or the cluster key")

// Error is an error answer from the server.
type Error struct {
	// Op is what the client did, e.g. "submit job".
	Op string
	// Status is the HTTP status code.
	Status int
	// Message is the server's message, or the status text if the body
	// was not an API error.
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (HTTP %d)", e.Op, e.Message, e.Status)
}

// Is matches the sentinel for e's status.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.Status == http.StatusBadRequest
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrGone:
		return e.Status == http.StatusGone
	case ErrTooLarge:
		return e.Status == http.StatusRequestEntityTooLarge
	case ErrInsufficientStorage:
		return e.Status == http.StatusInsufficientStorage
	}
	return false
}
