// Package store keeps what a braid server must not lose: blobs (job
// inputs, unit data, results, outputs) and its metadata: the state of
// jobs, units and workers, tokens, user operations, pipelines, uploads,
// timelines. Each sits behind an interface with a local default:
//
//	BlobStore  content-addressed files on local disk (Disk), or objects
//	           in an S3-compatible store (S3) with a read-through cache
//	Meta       every record but blobs, chosen by URL with OpenMeta:
//	             SQLite    one file, pure Go (the default, sqlite:PATH)
//	             Postgres  a PostgreSQL database through pgx (postgres://...)
//	Jobs       the part of Meta that holds jobs, units and workers
//
// A blob's ID is the lowercase hex SHA-256 of its bytes, computed as it
// is uploaded; Put streams through a temporary file (or object) and only
// then puts it in place under its ID, so a blob is either whole or absent,
// and every read checks the bytes against the ID (see BlobStore).
// OpenBlobStore opens a store by its spec: dir:PATH or
// s3://BUCKET/PREFIX?endpoint=... Job state changes are transactions: a job is created
// with all its units at once, and a unit's result is counted once, by the
// first FinishUnit for it. After a restart, Unfinished lists the jobs to
// resume and ResetRunning returns the units that were out on workers to
// the pending state.
//
// Both metadata stores have the same tables and columns and pass one
// conformance suite (store/storetest). SQLite runs its statements one at
// a time on a single connection; Postgres serves several processes at
// once by locking a job's row before any change of the job or its units
// (rows are locked jobs first, by ID, then units, then workers by ID),
// and runs a transaction again when it loses a serialization or deadlock
// race. Each records its schema version, migrates older schemas when
// opened and refuses newer ones. Copy moves every record of one store
// into another, IDs and ID sequences included.
//
// Jobs, pipelines, uploads and operation versions carry an owner string
// that the server chooses and the store only keeps and matches
// (owners.go); a blob has one upload row per owner.
package store
