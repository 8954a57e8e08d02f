// Package api defines what braid's roles say to each other.
//
// The control plane is HTTP/JSON: workers register and send heartbeats,
// clients upload blobs, submit jobs and poll their status. The request and
// response types here are shared by server, worker and client, and
// openapi.yaml (served by the server at [SpecPath]) describes every
// endpoint. Errors come back as an [Error] body with a 4xx or 5xx status.
//
// The data plane carries computation units and their results on transport
// streams. [Unit] and [Result] have a compact binary encoding: each message
// is self-describing (operation, parameters, data) and decoding checks every
// length against the bytes present and against a caller-chosen maximum, so
// garbage never panics or allocates beyond the message size.
//
// Package api imports nothing else from braid.
package api
