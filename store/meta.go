package store

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Meta is everything a server persists besides blobs: jobs and their
// units, workers, control API tokens, user operations, pipelines,
// uploads, unit timelines, failed tries and the retention of outputs.
// Every method is atomic; implementations are safe for concurrent use,
// also by several processes sharing one database (PostgreSQL). Records
// that do not exist are ErrNotFound, state changes the record forbids
// are ErrConflict, and use after Close is ErrClosed.
//
// SQLite (the embedded default) and Postgres implement it; OpenMeta
// chooses one by URL.
type Meta interface {
	// Jobs holds jobs, units and workers.
	Jobs
	// Leases let several servers share the database (leases.go).
	Leases

	// JobCounts returns how many jobs the store holds in each state, for
	// the server's metrics. States without jobs are absent.
	JobCounts(ctx context.Context) (map[JobState]int, error)
	// SetUnits gives a job created without units (it waited for its
	// input job) its input and units, in one transaction. ErrConflict if
	// the job is finished or has units.
	SetUnits(ctx context.Context, id uint64, input string, units []Unit) error
	// RetryUnit records that a try of the unit failed with msg and that
	// it runs again: it is pending, its error is msg, and its job counts
	// one more retry. ErrConflict if the unit or its job is finished.
	RetryUnit(ctx context.Context, job, id uint64, worker, msg string) error
	// SaveTries records the tries of a job's units that brought no
	// result: each named unit's counts are replaced, and its error too
	// when one is given.
	SaveTries(ctx context.Context, job uint64, tries []UnitTries) error
	// Tries returns the units of a job that had a try without a result,
	// by unit ID, at most limit of them, and how many there are in all.
	Tries(ctx context.Context, job uint64, limit int) ([]UnitTries, int, error)
	// SaveTimeline keeps data, the timeline of a job's units, replacing
	// one kept before; it goes with the job. It fails for a job that
	// does not exist and for more than MaxTimeline bytes.
	SaveTimeline(ctx context.Context, job uint64, data []byte) error
	// Timeline returns what SaveTimeline kept for job, or ErrNotFound.
	Timeline(ctx context.Context, job uint64) ([]byte, error)

	// AddOp stores a new version of the operation op.Name and returns it
	// with its Version (one more than the newest, from 1) and Added set.
	AddOp(ctx context.Context, op UserOp) (UserOp, error)
	// Ops returns the newest version of every operation not removed, by
	// name, each with the owner of that version.
	Ops(ctx context.Context) ([]UserOp, error)
	// RemoveOp removes the operation name: it is no longer listed. Jobs
	// that use it keep their module. ErrNotFound if there is none.
	RemoveOp(ctx context.Context, name string) error
	// ModuleUsed reports whether hash is the module of a listed
	// operation's newest version.
	ModuleUsed(ctx context.Context, hash string) (bool, error)
	// IsModule reports whether hash is the module of any version of any
	// operation, removed ones included.
	IsModule(ctx context.Context, hash string) (bool, error)

	// CreatePipeline stores a pipeline and returns it with its ID (from
	// 1, never reused) and Submitted set.
	CreatePipeline(ctx context.Context, p Pipeline) (Pipeline, error)
	// SetPipelineSteps records the steps' jobs of pipeline id.
	SetPipelineSteps(ctx context.Context, id uint64, steps []PipelineStep) error
	// Pipeline returns one pipeline.
	Pipeline(ctx context.Context, id uint64) (Pipeline, error)

	// AddToken stores a new token and returns it with Created set.
	// ErrConflict if a token with the same ID, hash or name exists.
	AddToken(ctx context.Context, t Token) (Token, error)
	// Tokens returns every token, revoked ones included, oldest first.
	Tokens(ctx context.Context) ([]Token, error)
	// RevokeToken revokes the token with ID or name ref and returns it
	// with Revoked set: ErrNotFound if there is none, ErrConflict if it
	// is revoked already.
	RevokeToken(ctx context.Context, ref string) (Token, error)
	// TouchToken records that token id was used at time at; an earlier
	// time than the last use changes nothing.
	TouchToken(ctx context.Context, id string, at time.Time) error

	// AddUpload records that owner uploaded blob id on its own, so it
	// is kept until the owner deletes it, also when a dataset listing
	// it is deleted. Adding it twice is no error; an upload made as a
	// member (AddMemberUpload) becomes one made on its own.
	AddUpload(ctx context.Context, id, owner string) error
	// AddMemberUpload records that owner uploaded blob id as a member of
	// a dataset it is about to make: kept until the owner deletes it or
	// a dataset that lists it (RemoveMemberUploads). An upload made on
	// its own stays one. Uploads recorded before the two were told apart
	// (schema 9 on SQLite, 4 on PostgreSQL) count as members'.
	AddMemberUpload(ctx context.Context, id, owner string) error
	// RemoveUpload forgets owner's upload of blob id; other owners'
	// uploads of the same blob stay.
	RemoveUpload(ctx context.Context, id, owner string) error
	// RemoveMemberUploads forgets the uploads of ids by each of owners
	// that were made as members of a dataset (AddMemberUpload), in one
	// transaction; those made on their own stay.
	RemoveMemberUploads(ctx context.Context, ids, owners []string) error
	// Uploaders returns the owners that uploaded blob id, in order.
	Uploaders(ctx context.Context, id string) ([]string, error)
	// BlobVisible reports whether owner uploaded blob id or owns a job
	// whose input or output it is.
	BlobVisible(ctx context.Context, id, owner string) (bool, error)
	// OwnedBlobs returns the IDs of the blobs owner uploaded and of the
	// unexpired outputs of its jobs, in order.
	OwnedBlobs(ctx context.Context, owner string) ([]string, error)
	// KeptOutputs returns the done jobs whose output is blob, or a
	// dataset that lists blob, and not yet expired, by ID: the blob must
	// stay until their retention ends.
	KeptOutputs(ctx context.Context, blob string) ([]uint64, error)
	// BlobKept says why blob id must be kept, or returns "" if nothing
	// needs it: it is an upload, the unexpired output of a job other
	// than except, a member of a dataset that lives (DatasetsOf; an
	// output of except's does not count), data of an unfinished job, or
	// a listed operation's module.
	BlobKept(ctx context.Context, id string, except uint64) (string, error)
	// KeptBlobs is BlobKept for many blobs at once: it returns why each
	// of ids that must be kept is, by ID; those nothing needs are absent.
	KeptBlobs(ctx context.Context, ids []string, except uint64) (map[string]string, error)
	// BusyBlobs returns, by ID, why each of ids that an unfinished job
	// uses (its input, a unit's data or result, its module) is used; the
	// others are absent.
	BusyBlobs(ctx context.Context, ids []string) (map[string]string, error)
	// AddDataset records that dataset (a manifest blob), made by
	// creator (an owner, "" for an admin), lists members (blob IDs), so
	// that each is kept while the dataset lives: while it is an upload,
	// the unexpired output of a job, or the input of an unfinished job
	// (datasets.go). Adding a pair twice is no error.
	AddDataset(ctx context.Context, dataset, creator string, members []string) error
	// DatasetCreator returns the owner who made dataset ("" for an
	// admin, or for a dataset indexed before creators were recorded);
	// ErrNotFound if the index does not list it.
	DatasetCreator(ctx context.Context, dataset string) (string, error)
	// OutputJobs returns the jobs whose unexpired output is blob id, in
	// order.
	OutputJobs(ctx context.Context, id string) ([]uint64, error)
	// DatasetMembers returns the members recorded for dataset, in order,
	// whether it lives or not.
	DatasetMembers(ctx context.Context, dataset string) ([]string, error)
	// DatasetsOf returns the datasets that live and list blob member, in
	// order.
	DatasetsOf(ctx context.Context, member string) ([]string, error)
	// RemoveDataset forgets the members of dataset, whose manifest was
	// removed.
	RemoveDataset(ctx context.Context, dataset string) error
	// UnindexedDatasets returns up to limit blobs, after after in order,
	// that may be datasets made before the index of members and were
	// not indexed yet (datasets.go).
	UnindexedDatasets(ctx context.Context, after string, limit int) ([]string, error)
	// IndexDataset records, at once, that blob id, made by creator,
	// lists members (none if it is no dataset, or its manifest is lost)
	// and that UnindexedDatasets need not return it again.
	IndexDataset(ctx context.Context, id, creator string, members []string) error
	// DueOutputs returns up to limit done jobs that finished before t
	// and whose output is not expired yet, oldest first.
	DueOutputs(ctx context.Context, t time.Time, limit int) ([]Job, error)
	// ExpireOutput records that job id's output was removed.
	ExpireOutput(ctx context.Context, id uint64) error
	// ExpiredOutput returns the newest job whose output was blob id and
	// expired. ErrNotFound if there is none.
	ExpiredOutput(ctx context.Context, id string) (Job, error)
}

var (
	_ Meta = (*SQLite)(nil)
	_ Meta = (*Postgres)(nil)
)

// MetaOptions configures OpenMeta. A nil *MetaOptions, and the zero
// value, work.
type MetaOptions struct {
	// Durable makes every SQLite commit wait for stable storage (see
	// SQLiteConfig.Durable). PostgreSQL commits follow the server's own
	// synchronous_commit.
	Durable bool
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// MaxConns bounds the connections to PostgreSQL. Zero means 8.
	MaxConns int
	// StallTimeout is PostgresConfig.StallTimeout.
	StallTimeout time.Duration
}

// Kinds of metadata store, as ParseMetaURL names them.
const (
	KindSQLite   = "sqlite"
	KindPostgres = "postgres"
)

// ParseMetaURL tells which store a --db URL names: "sqlite:PATH" or a
// bare path is SQLite (kind "sqlite", target the path), "postgres://..."
// or "postgresql://..." is PostgreSQL (target the URL itself).
func ParseMetaURL(u string) (kind, target string, err error) {
	switch {
	case u == "":
		return "", "", fmt.Errorf("store: empty database URL: want sqlite:PATH or postgres://USER@HOST:PORT/DB")
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return KindPostgres, u, nil
	case strings.HasPrefix(u, "sqlite:"):
		p := strings.TrimPrefix(u, "sqlite:")
		p = strings.TrimPrefix(p, "//") // sqlite:///abs/path
		if p == "" {
			return "", "", fmt.Errorf("store: database URL %q names no file: want sqlite:PATH", u)
		}
		return KindSQLite, p, nil
	case strings.Contains(u, "://"):
		scheme, _, _ := strings.Cut(u, "://")
		return "", "", fmt.Errorf("store: database URL scheme %q: want sqlite:PATH, a file path, or postgres://USER@HOST:PORT/DB", scheme)
	}
	return KindSQLite, u, nil
}

// OpenMeta opens, creating and migrating its schema if needed, the
// metadata store rawURL names (see ParseMetaURL). It refuses a database
// whose schema is newer than this build understands.
func OpenMeta(ctx context.Context, rawURL string, opts *MetaOptions) (Meta, error) {
	if opts == nil {
		opts = &MetaOptions{}
	}
	kind, target, err := ParseMetaURL(rawURL)
	if err != nil {
		return nil, err
	}
	if kind == KindPostgres {
		return OpenPostgres(ctx, target, &PostgresConfig{Now: opts.Now, MaxConns: opts.MaxConns, StallTimeout: opts.StallTimeout})
	}
	return OpenSQLite(ctx, target, &SQLiteConfig{Durable: opts.Durable, Now: opts.Now})
}

// Redact returns a database URL fit for messages and logs: a password
// in it is replaced by "xxxxx".
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		if err != nil && strings.Contains(rawURL, "@") {
			return "(a database URL that does not parse)"
		}
		return rawURL
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// Migrate opens the store rawURL names, which creates or migrates its
// schema, closes it, and returns the schema version it found (0 for a
// new database) and the one it has now. A schema newer than this build
// is an error that says so.
func Migrate(ctx context.Context, rawURL string) (from, to int, err error) {
	m, err := OpenMeta(ctx, rawURL, nil)
	if err != nil {
		return 0, 0, err
	}
	defer m.Close()
	switch s := m.(type) {
	case *SQLite:
		return s.from, schemaVersion, nil
	case *Postgres:
		return s.from, pgSchemaVersion, nil
	}
	return 0, 0, fmt.Errorf("store: migrate: unknown store %T", m)
}
