package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/transport"
)

// Kinds of error for the control API, beyond the sentinels of ops, store
// and transport. httpStatus maps them all.
var (
	// errBadRequest: the request is malformed or names something
	// invalid.
	errBadRequest = errors.New("bad request")
	// errUnauthorized: the request carries no valid credential.
	errUnauthorized = errors.New("unauthorized")
	// errForbidden: the credential's role may not make the request.
	errForbidden = errors.New("forbidden")
	// errNotFound: no such endpoint, job, worker or blob.
	errNotFound = errors.New("not found")
	// errMethod: the endpoint does not take this method.
	errMethod = errors.New("method not allowed")
	// errConflict: the resource's state forbids the request.
	errConflict = errors.New("conflict")
	// errUnreachable: the worker's data plane could not be reached.
	errUnreachable = errors.New("worker unreachable")
	// errUnavailable: the server is shutting down.
	errUnavailable = errors.New("server shutting down")
	// errTimeout: a worker did not answer in time.
	errTimeout = errors.New("timeout")
	// errTooLarge: an upload is larger than one may be.
	errTooLarge = errors.New("too large")
	// errStorage: the data limit or the disk is full.
	errStorage = errors.New("insufficient storage")
	// errGone: a job's output was removed after the retention period.
	errGone = errors.New("gone")
)

// kindError gives err the kind kind for httpStatus without changing its
// message.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.err, e.kind} }

// withKind returns err marked with kind.
func withKind(kind, err error) error { return &kindError{kind: kind, err: err} }

// kindf returns a new error of kind with a formatted message.
func kindf(kind error, format string, args ...any) error {
	return withKind(kind, fmt.Errorf(format, args...))
}

// httpStatus maps an error to the HTTP status of its answer. It is the one
// place that does.
func httpStatus(err error) int {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge), errors.Is(err, errTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errStorage), store.IsNoSpace(err):
		return http.StatusInsufficientStorage
	case errors.Is(err, errGone):
		return http.StatusGone
	case errors.Is(err, errUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, errForbidden), errors.Is(err, transport.ErrAuth):
		return http.StatusForbidden
	case errors.Is(err, errNotFound), errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errMethod):
		return http.StatusMethodNotAllowed
	case errors.Is(err, errConflict), errors.Is(err, store.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, errBadRequest), errors.Is(err, ops.ErrUnknownOp), errors.Is(err, ops.ErrBadParam),
		errors.Is(err, ops.ErrBadInput), errors.Is(err, store.ErrInvalidID), errors.Is(err, api.ErrMalformed):
		return http.StatusBadRequest
	case errors.Is(err, errUnreachable):
		return http.StatusBadGateway
	case errors.Is(err, errUnavailable), errors.Is(err, store.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, errTimeout):
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return 499 // the client went away; nobody reads this
	}
	return http.StatusInternalServerError
}
