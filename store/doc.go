// Package store keeps what a braid server must not lose: blobs (job
// inputs, unit data, results, outputs) and the state of jobs, units and
// workers. Each sits behind an interface with a local default:
//
//	Blobs  content-addressed files on local disk (Disk)
//	Jobs   job, unit and worker records in SQLite (SQLite, pure Go)
//
// A blob's ID is the lowercase hex SHA-256 of its bytes; Put streams
// through a temporary file and renames it into place, so a blob is either
// whole or absent. Job state changes are transactions: a job is created
// with all its units at once, and a unit's result is counted once, by the
// first FinishUnit for it. After a restart, Unfinished lists the jobs to
// resume and ResetRunning returns the units that were out on workers to
// the pending state.
package store
