// Package worker runs braid's computation units.
//
// A worker listens on one data-plane address per network with
// transport.Listen and registers with one or more servers over their
// control API (HTTP): its addresses, host figures (cores, memory, free
// disk, CPU MHz), the threads it lends and the operations it runs. Each
// server dials a session to it, one path per address, and opens one
// stream per lent thread; the cluster key authenticates the server before
// any unit is read.
//
//	server ══ session (k paths) ══▶ worker
//	  stream 1: units ─▶ reader ─┐                ┌─▶ writer ─▶ results, stream 1
//	  stream 2: units ─▶ reader ─┼─▶ session queue ─▶ processors ─┼─▶ writer ─▶ results, stream 2
//	  ...                        ┘   (FIFO)        (one per stream) └─▶ ...
//
// Every stream the server opens reserves one processing goroutine for the
// session, until the session closes: the reader of each stream queues its
// units in the session's queue, the session's processors take them in
// arrival order, run the operation and hand the result to the writer of
// the unit's stream, which sends it back there with the unit's ID. So a
// lent thread never idles while a unit of the session waits, whichever
// stream it came on, and encoding and sending a result overlap the next
// computation. Across all sessions at most Threads units compute at once.
// A unit of an operation the worker does not run gets an error result.
//
// The worker sends heartbeats at the interval the server asks for. When a
// heartbeat is answered 404 (the server declared the worker dead, or
// restarted) it registers again, under the same ID if the server still
// has it. It re-measures its figures every Config.FiguresInterval and
// announces them (PUT /v1/workers/{id}) when they changed, and at once
// after SetThreads. A server may also ask for fresh figures at any time
// over the data plane: a unit of the reserved operation api.OpFigures,
// which the stream's reader answers at once with the figures as JSON.
// A drop request (api.OpDrop) names a job the server ended: the reader
// removes the job's units queued on that session, answering each as
// dropped, and interrupts those running through their context (built-in
// operations and WebAssembly modules stop at their next check of it).
package worker
