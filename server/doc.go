// Package server is braid's server: scheduler and storage node in one.
//
// Clients upload blobs and submit jobs over the HTTP control API (package
// api describes it; api.Spec is served at api.SpecPath). Workers register
// over the same API; the server then dials a transport session to each
// worker, one path per address it registered, and opens one stream per
// thread it lends. Units go out on the streams as the scheduler (package
// sched) picks them; each result comes back on its unit's stream.
//
//	client ──HTTP──▶ ┌──────────── server ─────────────┐
//	 put, submit,    │ control API ── job store (SQLite)│
//	 status, get     │     │           blobs (disk)     │
//	                 │  Split ─▶ sched ─▶ stream loops ═══ session ═▶ worker 1
//	                 │  Assemble ◀─ results ◀─ (batched)  ═══ session ═▶ worker 2
//	                 └──────────────────────────────────┘
//
// A job's life: submit validates the request, Splits the input into units
// (image tiles go into one data blob), stores the job with all its units
// and adds it to the scheduler. Each stream has a sender, which writes the
// units sched.Next picks for it, and a receiver, which reads results: the
// first result of a unit counts (dynamic jobs send backup copies), is
// stored as a blob and recorded in the job store in batches (one
// transaction per batch, not per result). When the last unit is done the
// results are Assembled into the output blob and the job is done. A unit
// whose operation fails fails the job, with an error naming the unit, the
// worker and the cause. Package lifecycle owns this state machine (which
// copy is out, which result counts, retries, ends, jobs waiting for
// another's output) and its writes to the job store; the server feeds it
// events from the streams and the API, and moves the bytes for it
// (lifecycle.Hooks: units' data, results, the output).
//
// Heartbeats: the server asks each live worker for its heartbeat on the
// data-plane session every interval (beatPeer, api.OpHeartbeat); a worker
// so asked sends none over HTTP, and one that is not (an older worker, a
// broken session) sends them itself. A worker silent past
// Config.WorkerTimeout, or whose session ends, is dropped and its units
// run elsewhere. A worker whose heartbeat is answered 404 registers again
// (under its old ID with PUT).
// Figures: workers announce changes with PUT; the server can ask for fresh
// figures at any time with a figures request on the data plane (GET
// /v1/workers/{id}?fresh=1; see api.OpFigures).
// Ends: when a job ends (canceled, failed, or done with backup copies
// out), the workers holding its units are told to drop them (a drop
// request on the data plane, api.OpDrop), so their threads go to the next
// job's units at once.
//
// Restart: the job store and the blobs live in Config.Data (the blobs in
// an object store with Config.Blobs). A server started on the same
// directory resets the units that were out on workers to pending and
// adds every unfinished job to the scheduler again with its done units
// marked, so no accepted job is lost and no unit that counted runs again.
//
// Security: every data-plane channel proves the cluster key (transport
// handshake) before any unit is read. The control API is HTTPS (a
// certificate from Config.TLSCert, or one generated in Data/tls), and
// every answer carries api.CertProof of the certificate so that key
// holders can pin it. Every request but the health check and the spec
// carries a bearer credential: the key's api.Token (admin) or a token
// (auth.go) whose role the route table (http.go) checks: 401 without a
// valid credential, 403 for a role the route does not admit. Then the
// record's owner (access.go): a client token reaches only its own, or its
// group's, jobs, blobs and pipelines, and anything else is 404. See
// docs/security.md.
//
// Lock order: Server.mu, then run.mu, then peer.mu; the lifecycle's,
// the scheduler's and the stores' locks are leaves to the server (the
// lifecycle calls its hooks with no lock held).
package server
