// Package store keeps what a braid server must not lose: blobs (job
// inputs, unit data, results, outputs) and the state of jobs, units and
// workers. Each sits behind an interface with a local default:
//
//	BlobStore  content-addressed files on local disk (Disk), or objects
//	           in an S3-compatible store (S3) with a read-through cache
//	Jobs       job, unit and worker records in SQLite (SQLite, pure Go)
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
package store
