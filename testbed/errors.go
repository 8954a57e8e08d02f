package testbed

import "errors"

// ErrUnknownHost means a host name is not in the bed's spec.
var ErrUnknownHost = errors.New("testbed: unknown host")

// ErrUnknownNetwork means a network index is out of range for the bed.
var ErrUnknownNetwork = errors.New("testbed: unknown network")

// ErrDown means the bed was already taken down.
var ErrDown = errors.New("testbed: bed is down")
