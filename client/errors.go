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
	// ErrUnauthorized matches a 401: the cluster key differs from the
	// server's.
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrNotFound matches a 404: no such blob, job or worker.
	ErrNotFound = errors.New("client: not found")
	// ErrConflict matches a 409: the resource's state forbids the request.
	ErrConflict = errors.New("client: conflict")
)

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
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	}
	return false
}
