package ksctp

import "errors"

// ErrUnavailable is wrapped by the errors of Dial, Listen and Available
// when the kernel has no SCTP: load the sctp module (modprobe sctp), or
// choose another --transport.
var ErrUnavailable = errors.New("kernel SCTP unavailable")
