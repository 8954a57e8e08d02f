package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go
)

// schemaVersion is stored in PRAGMA user_version. Version 1 is schema;
// each later version applies its migration on top.
const schemaVersion = 11

// migrations[v] takes a database from version v+1 to v+2.
var migrations = []string{
	// 2: user operations (WebAssembly modules), what a job asked for
	// beyond the first columns (module, split, merge, limits, tries), the
	// retries of failed units and reduce units.
	`
ALTER TABLE jobs ADD COLUMN spec TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE units ADD COLUMN reduce INTEGER NOT NULL DEFAULT 0;
CREATE TABLE user_ops (
	name     TEXT NOT NULL,
	version  INTEGER NOT NULL,
	hash     TEXT NOT NULL,
	size     INTEGER NOT NULL,
	doc      TEXT NOT NULL,
	split    TEXT NOT NULL,
	merge    TEXT NOT NULL,
	params   TEXT NOT NULL,
	added    INTEGER NOT NULL,
	removed  INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (name, version)
) WITHOUT ROWID;
CREATE INDEX user_ops_hash ON user_ops(hash);
CREATE TABLE pipelines (
	id        INTEGER PRIMARY KEY AUTOINCREMENT,
	name      TEXT NOT NULL,
	steps     TEXT NOT NULL,
	submitted INTEGER NOT NULL
);
`,
	// 3: retention of outputs (when a job's output was removed) and the
	// blobs clients uploaded, which the removal of a job's intermediate
	// blobs and expired outputs must keep. Inputs of earlier jobs count
	// as uploads.
	`
ALTER TABLE jobs ADD COLUMN expired INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_output ON jobs(output) WHERE output != '';
CREATE INDEX jobs_input ON jobs(input) WHERE input != '';
CREATE TABLE uploads (
	id    TEXT PRIMARY KEY,
	added INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO uploads SELECT DISTINCT input, 0 FROM jobs WHERE input != '' AND spec NOT LIKE '%"input_job"%';
`,
	// 4: control API access tokens (tokens.go). Self-contained: it only
	// adds its own table, so it may be renumbered when other migrations
	// are merged before it.
	`
CREATE TABLE IF NOT EXISTS api_tokens (
	id        TEXT PRIMARY KEY,
	hash      TEXT NOT NULL UNIQUE,
	name      TEXT NOT NULL UNIQUE,
	role      TEXT NOT NULL,
	created   INTEGER NOT NULL,
	last_used INTEGER NOT NULL DEFAULT 0,
	revoked   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
`,
	// 5: each unit's failed and lost tries (tries.go).
	`
ALTER TABLE units ADD COLUMN fails INTEGER NOT NULL DEFAULT 0;
ALTER TABLE units ADD COLUMN lost INTEGER NOT NULL DEFAULT 0;
`,
	// 6: the timelines of ended jobs' units (timelines.go).
	`
CREATE TABLE IF NOT EXISTS timelines (
	job  INTEGER PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
	data BLOB NOT NULL
);
`,
	// 7: several servers over one database (leases.go): the server that
	// owns each job and the epoch of its lease, the leases, and the
	// counter their epochs come from. Self-contained.
	leaseMigration("INTEGER"),
	// 8: owners (owners.go): who submitted each job and pipeline and
	// added each operation version, the group of each token, and one
	// upload row per owner of a blob. Existing rows have no owner.
	// Self-contained: it may be renumbered when other migrations are
	// merged before it.
	ownersMigration + `
CREATE TABLE uploads_owned (
	id    TEXT NOT NULL,
	owner TEXT NOT NULL DEFAULT '',
	added INTEGER NOT NULL,
	PRIMARY KEY (id, owner)
) WITHOUT ROWID;
INSERT INTO uploads_owned (id, owner, added) SELECT id, '', added FROM uploads;
DROP TABLE uploads;
ALTER TABLE uploads_owned RENAME TO uploads;
`,
	// 9: the members of datasets (datasets.go). Self-contained: it only
	// adds its own table, so it may be renumbered when other migrations
	// are merged before it.
	datasetMigration(" WITHOUT ROWID"),
	// 10: the blobs that may be datasets made before version 9, whose
	// members the server indexes, and which uploads were made on their
	// own rather than as a dataset's members (datasets.go).
	// Self-contained: it adds its own table and one column.
	backfillMigration(" WITHOUT ROWID", "INTEGER"),
	// 11: datasets' creators, and the outputs the backfill left out
	// (datasets.go). Self-contained: one column and rows of the
	// backfill's own table.
	creatorMigration,
}

const schema = `
CREATE TABLE jobs (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	op          TEXT NOT NULL,
	input       TEXT NOT NULL,
	params      TEXT NOT NULL,
	hint_units  INTEGER NOT NULL,
	tile_w      INTEGER NOT NULL,
	tile_h      INTEGER NOT NULL,
	hint_repeat INTEGER NOT NULL,
	policy      TEXT NOT NULL,
	in_flight   INTEGER NOT NULL,
	state       TEXT NOT NULL,
	output      TEXT NOT NULL DEFAULT '',
	error       TEXT NOT NULL DEFAULT '',
	submitted   INTEGER NOT NULL,
	started     INTEGER NOT NULL DEFAULT 0,
	finished    INTEGER NOT NULL DEFAULT 0,
	total       INTEGER NOT NULL,
	done        INTEGER NOT NULL DEFAULT 0,
	failed      INTEGER NOT NULL DEFAULT 0,
	running     INTEGER NOT NULL DEFAULT 0,
	compute_ns  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_state ON jobs(state, id);
CREATE TABLE units (
	job        INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
	id         INTEGER NOT NULL,
	params     TEXT,              -- NULL: the job's params
	blob       TEXT NOT NULL DEFAULT '',
	off        INTEGER NOT NULL DEFAULT 0,
	len        INTEGER NOT NULL DEFAULT 0,
	deps       TEXT NOT NULL DEFAULT '',
	state      TEXT NOT NULL,
	worker     TEXT NOT NULL DEFAULT '',
	attempts   INTEGER NOT NULL DEFAULT 0,
	result     TEXT NOT NULL DEFAULT '',
	error      TEXT NOT NULL DEFAULT '',
	compute_ns INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (job, id)
) WITHOUT ROWID;
CREATE INDEX units_running ON units(worker) WHERE state = 'running';
CREATE INDEX units_blob ON units(blob) WHERE blob != '';
CREATE INDEX units_result ON units(result) WHERE result != '';
CREATE TABLE workers (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         TEXT NOT NULL UNIQUE,
	name       TEXT NOT NULL,
	addresses  TEXT NOT NULL,
	cores      INTEGER NOT NULL,
	memory     INTEGER NOT NULL,
	disk       INTEGER NOT NULL,
	cpu_mhz    INTEGER NOT NULL,
	threads    INTEGER NOT NULL,
	ops        TEXT NOT NULL,
	registered INTEGER NOT NULL,
	last_seen  INTEGER NOT NULL,
	running    INTEGER NOT NULL DEFAULT 0,
	queued     INTEGER NOT NULL DEFAULT 0,
	load       REAL NOT NULL DEFAULT 0,
	done       INTEGER NOT NULL DEFAULT 0
);
`

// SQLiteConfig configures a SQLite store. The zero value is ready to use.
type SQLiteConfig struct {
	// Durable makes every commit wait until it is on stable storage
	// (synchronous=FULL). Zero means commits survive a crash of the
	// process, but the last few may be lost if the machine loses power
	// (WAL with synchronous=NORMAL), which is much faster.
	Durable bool
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// SQLite is Jobs in a SQLite database file, through the pure-Go
// modernc.org/sqlite driver. It is safe for concurrent use; statements
// run one at a time on a single connection.
type SQLite struct {
	db  *sql.DB
	now func() time.Time
	// stmts holds the hot statements, prepared once on the single
	// connection; read-only after OpenSQLite.
	stmts map[string]*sql.Stmt
	// from is the schema version found at open.
	from int
}

// Hot statements: fixed strings, prepared at open.
const (
	selectJob   = "SELECT " + jobColumns + " FROM jobs WHERE id = ?"
	selectUnit  = "SELECT " + unitColumns + " FROM units WHERE job = ? AND id = ?"
	countUnits  = "UPDATE jobs SET running = running + ?, done = done + ?, failed = failed + ?, compute_ns = compute_ns + ? WHERE id = ?"
	startJob    = "UPDATE jobs SET state = ?, started = ? WHERE id = ?"
	creditDone  = "UPDATE workers SET done = done + 1 WHERE id = ?"
	creditDoneN = "UPDATE workers SET done = done + ? WHERE id = ?"
	unitState   = "SELECT state FROM units WHERE job = ? AND id = ?"
	setStarted  = "worker = ?, attempts = ?"
	setFinished = "worker = ?, result = ?, compute_ns = ?, error = ''"
	setFailed   = "worker = ?, error = ?"
)

// unitInsertBatch is how many units one INSERT statement creates, with
// unitInsertCols parameters each (well under SQLite's 32766).
const (
	unitInsertBatch = 128
	unitInsertCols  = 9
)

// insertUnits returns an INSERT of n units.
func insertUnits(n int) string {
	return "INSERT INTO units (job, id, params, blob, off, len, deps, state, reduce) VALUES " + valueRows(n, unitInsertCols)
}

// valueRows returns n parenthesized rows of cols placeholders each, for a
// VALUES list.
func valueRows(n, cols int) string {
	row := "(" + strings.Repeat("?, ", cols-1) + "?)"
	return strings.Repeat(row+", ", n-1) + row
}

func moveQuery(extra string) string {
	set := "state = ?"
	if extra != "" {
		set += ", " + extra
	}
	return "UPDATE units SET " + set + " WHERE job = ? AND id = ?"
}

var hot = append([]string{selectJob, selectUnit, countUnits, startJob, creditDone, creditDoneN, unitState,
	moveQuery(""), moveQuery(setStarted), moveQuery(setFinished), moveQuery(setFailed)}, finishPendingAll()...)

// finishPendingAll is the finish statement for every batch size: results
// arrive a few at a time when units are slow, and parsing the statement
// cost more than running it.
func finishPendingAll() []string {
	qs := make([]string, unitFinishBatch)
	for n := range qs {
		qs[n] = finishPendingMany(n + 1)
	}
	return qs
}

// exec runs query in tx, through its prepared statement if it is hot.
func (s *SQLite) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if st := s.stmts[query]; st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

// query runs query in tx, through its prepared statement if it is hot.
func (s *SQLite) query(ctx context.Context, tx *sql.Tx, query string, args ...any) (*sql.Rows, error) {
	if st := s.stmts[query]; st != nil {
		return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, query, args...)
}

// queryRow runs query on q, through its prepared statement if it is hot.
func (s *SQLite) queryRow(ctx context.Context, q querier, query string, args ...any) *sql.Row {
	if st := s.stmts[query]; st != nil {
		if tx, ok := q.(*sql.Tx); ok {
			return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
		}
		return st.QueryRowContext(ctx, args...)
	}
	return q.QueryRowContext(ctx, query, args...)
}

var _ Jobs = (*SQLite)(nil)

// OpenSQLite opens, creating if needed, the database at path (":memory:"
// for a throwaway one). cfg may be nil.
func OpenSQLite(ctx context.Context, path string, cfg *SQLiteConfig) (*SQLite, error) {
	if cfg == nil {
		cfg = &SQLiteConfig{}
	}
	if strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("store: database path %q: must not contain '?'", path)
	}
	sync := "NORMAL"
	if cfg.Durable {
		sync = "FULL"
	}
	dsn := path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(" + sync + ")"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s := &SQLite{db: db, now: cfg.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s.stmts = make(map[string]*sql.Stmt, len(hot))
	for _, q := range hot {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("store: open %s: prepare: %w", path, err)
		}
		s.stmts[q] = st
	}
	return s, nil
}

func (s *SQLite) migrate(ctx context.Context) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var v int
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return err
		}
		s.from = v
		switch {
		case v == schemaVersion:
			return nil
		case v > schemaVersion:
			return fmt.Errorf("database schema version %d is newer than this braid understands (%d); upgrade braid", v, schemaVersion)
		}
		if v == 0 {
			if _, err := tx.ExecContext(ctx, schema); err != nil {
				return err
			}
			v = 1
		}
		for ; v < schemaVersion; v++ {
			if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("migrate the schema to version %d: %w", v+1, err)
			}
		}
		_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion))
		return err
	})
}

// Close implements Jobs.
func (s *SQLite) Close() error { return s.db.Close() }

func (s *SQLite) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return wrapDB(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return wrapDB(err)
	}
	return wrapDB(tx.Commit())
}

func wrapDB(err error) error {
	if errors.Is(err, sql.ErrConnDone) || err != nil && strings.Contains(err.Error(), "database is closed") {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return err
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func toJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings and slices always marshal
	}
	return string(b)
}

func fromJSON[T any](s string) (T, error) {
	var v T
	if s == "" {
		return v, nil
	}
	err := json.Unmarshal([]byte(s), &v)
	return v, err
}

func id64(id uint64, what string) (int64, error) {
	if id > math.MaxInt64 {
		return 0, fmt.Errorf("store: %s id %d too large", what, id)
	}
	return int64(id), nil
}

// CreateJob implements Jobs.
func (s *SQLite) CreateJob(ctx context.Context, j Job, units []Unit) (Job, error) {
	if len(units) == 0 && j.Spec.InputJob == 0 {
		return Job{}, fmt.Errorf("store: create job: no units")
	}
	if err := checkUnits(units); err != nil {
		return Job{}, fmt.Errorf("store: create job: %w", err)
	}
	if j.Params == nil {
		j.Params = map[string]string{}
	}
	j.State, j.Output, j.Error = JobQueued, "", ""
	j.Submitted, j.Started, j.Finished = s.now().UTC(), time.Time{}, time.Time{}
	j.Total, j.Done, j.Failed, j.Running, j.ComputeNanos, j.Retries = len(units), 0, 0, 0, 0, 0
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO jobs (op, input, params, hint_units, tile_w, tile_h, hint_repeat,
			policy, in_flight, state, submitted, total, spec, server, epoch, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			j.Op, j.Input, toJSON(j.Params), j.Units, j.TileW, j.TileH, j.Repeat, j.Policy, j.InFlight,
			j.State, nanos(j.Submitted), j.Total, specJSON(j.Spec), j.Server, int64(min(j.Epoch, math.MaxInt64)), j.Owner)
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		j.ID = uint64(id)
		return s.addUnits(ctx, tx, j, units)
	})
	if err != nil {
		return Job{}, fmt.Errorf("store: create job: %w", err)
	}
	return j, nil
}

// checkUnits fails unless unit IDs are unique and Deps name other units.
func checkUnits(units []Unit) error {
	seen := make(map[uint64]bool, len(units))
	for _, u := range units {
		if _, err := id64(u.ID, "unit"); err != nil {
			return err
		}
		if seen[u.ID] {
			return fmt.Errorf("unit id %d twice", u.ID)
		}
		seen[u.ID] = true
	}
	for _, u := range units {
		for _, d := range u.Deps {
			if !seen[d] || d == u.ID {
				return fmt.Errorf("unit %d depends on %d, which is not another unit of the job", u.ID, d)
			}
		}
	}
	return nil
}

// addUnits inserts the units of job j, many rows per statement: a job of
// thousands of units is created in a few statements rather than one per
// unit.
func (s *SQLite) addUnits(ctx context.Context, tx *sql.Tx, j Job, units []Unit) error {
	var (
		stmt     *sql.Stmt
		stmtRows int
		args     = make([]any, 0, unitInsertBatch*unitInsertCols)
		err      error
	)
	defer func() {
		if stmt != nil {
			stmt.Close()
		}
	}()
	id := int64(j.ID)
	for len(units) > 0 {
		batch := units[:min(len(units), unitInsertBatch)]
		units = units[len(batch):]
		if stmtRows != len(batch) {
			if stmt != nil {
				stmt.Close()
			}
			if stmt, err = tx.PrepareContext(ctx, insertUnits(len(batch))); err != nil {
				stmt = nil
				return err
			}
			stmtRows = len(batch)
		}
		args = args[:0]
		for _, u := range batch {
			var params any // NULL: the job's
			if !maps.Equal(u.Params, j.Params) && !(len(u.Params) == 0 && len(j.Params) == 0) {
				params = toJSON(u.Params)
			}
			deps := ""
			if len(u.Deps) > 0 {
				deps = toJSON(u.Deps)
			}
			args = append(args, id, int64(u.ID), params, u.Blob, u.Off, u.Len, deps, UnitPending, u.Reduce)
		}
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

const jobColumns = `id, op, input, params, hint_units, tile_w, tile_h, hint_repeat, policy, in_flight, state,
	output, error, submitted, started, finished, total, done, failed, running, compute_ns, spec, retries, expired,
	server, epoch, owner`

type scanner interface{ Scan(dest ...any) error }

func scanJob(sc scanner) (Job, error) {
	var j Job
	var id int64
	var params string
	var sub, start, fin int64
	var spec string
	var expired, epoch int64
	err := sc.Scan(&id, &j.Op, &j.Input, &params, &j.Units, &j.TileW, &j.TileH, &j.Repeat, &j.Policy, &j.InFlight,
		&j.State, &j.Output, &j.Error, &sub, &start, &fin, &j.Total, &j.Done, &j.Failed, &j.Running, &j.ComputeNanos,
		&spec, &j.Retries, &expired, &j.Server, &epoch, &j.Owner)
	if err != nil {
		return Job{}, err
	}
	if j.Spec, err = fromJSON[JobSpec](spec); err != nil {
		return Job{}, fmt.Errorf("job %d spec: %w", id, err)
	}
	j.ID, j.Epoch = uint64(id), uint64(epoch)
	j.Submitted, j.Started, j.Finished, j.Expired = fromNanos(sub), fromNanos(start), fromNanos(fin), fromNanos(expired)
	if j.Params, err = fromJSON[map[string]string](params); err != nil {
		return Job{}, fmt.Errorf("job %d params: %w", id, err)
	}
	return j, nil
}

// Job implements Jobs.
func (s *SQLite) Job(ctx context.Context, id uint64) (Job, error) {
	j, err := s.job(ctx, s.db, id)
	if err != nil {
		return Job{}, fmt.Errorf("store: %w", err)
	}
	return j, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func (s *SQLite) job(ctx context.Context, q querier, id uint64) (Job, error) {
	j, err := scanJob(s.queryRow(ctx, q, selectJob, int64(min(id, math.MaxInt64))))
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Job{}, fmt.Errorf("job %d: %w", id, wrapDB(err))
	}
	return j, nil
}

func (s *SQLite) jobs(ctx context.Context, query string, args ...any) ([]Job, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT "+jobColumns+" FROM jobs "+query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list jobs: %w", wrapDB(err))
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list jobs: %w", wrapDB(err))
	}
	return out, nil
}

// JobCounts returns how many jobs the store holds in each state, for
// the server's metrics. States without jobs are absent.
func (s *SQLite) JobCounts(ctx context.Context) (map[JobState]int, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT state, COUNT(*) FROM jobs GROUP BY state")
	if err != nil {
		return nil, fmt.Errorf("store: count jobs: %w", wrapDB(err))
	}
	defer rows.Close()
	out := map[JobState]int{}
	for rows.Next() {
		var st JobState
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("store: count jobs: %w", wrapDB(err))
		}
		out[st] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: count jobs: %w", wrapDB(err))
	}
	return out, nil
}

// ListJobs implements Jobs.
func (s *SQLite) ListJobs(ctx context.Context, f JobFilter) ([]Job, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	where, args := f.where()
	return s.jobs(ctx, where+" ORDER BY id DESC LIMIT ?", append(args, limit)...)
}

// Unfinished implements Jobs.
func (s *SQLite) Unfinished(ctx context.Context) ([]Job, error) {
	return s.jobs(ctx, "WHERE state IN (?, ?) ORDER BY id", JobQueued, JobRunning)
}

const unitColumns = "job, id, params, blob, off, len, deps, state, worker, attempts, result, error, compute_ns, reduce"

func scanUnit(sc scanner, jobParams map[string]string) (Unit, error) {
	var u Unit
	var job, id int64
	var params sql.NullString
	var deps string
	err := sc.Scan(&job, &id, &params, &u.Blob, &u.Off, &u.Len, &deps, &u.State, &u.Worker, &u.Attempts,
		&u.Result, &u.Error, &u.ComputeNanos, &u.Reduce)
	if err != nil {
		return Unit{}, err
	}
	u.Job, u.ID = uint64(job), uint64(id)
	if params.Valid {
		if u.Params, err = fromJSON[map[string]string](params.String); err != nil {
			return Unit{}, fmt.Errorf("unit %d/%d params: %w", job, id, err)
		}
	} else {
		u.Params = jobParams
	}
	if u.Deps, err = fromJSON[[]uint64](deps); err != nil {
		return Unit{}, fmt.Errorf("unit %d/%d deps: %w", job, id, err)
	}
	return u, nil
}

// Units implements Jobs.
func (s *SQLite) Units(ctx context.Context, job uint64) ([]Unit, error) {
	j, err := s.Job(ctx, job)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, "SELECT "+unitColumns+" FROM units WHERE job = ? ORDER BY id", int64(job))
	if err != nil {
		return nil, fmt.Errorf("store: units of job %d: %w", job, wrapDB(err))
	}
	defer rows.Close()
	out := make([]Unit, 0, j.Total)
	for rows.Next() {
		u, err := scanUnit(rows, j.Params)
		if err != nil {
			return nil, fmt.Errorf("store: units of job %d: %w", job, err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: units of job %d: %w", job, wrapDB(err))
	}
	return out, nil
}

// Unit implements Jobs.
func (s *SQLite) Unit(ctx context.Context, job, id uint64) (Unit, error) {
	j, err := s.Job(ctx, job)
	if err != nil {
		return Unit{}, err
	}
	u, err := s.unit(ctx, s.db, j, id)
	if err != nil {
		return Unit{}, fmt.Errorf("store: %w", err)
	}
	return u, nil
}

func (s *SQLite) unit(ctx context.Context, q querier, j Job, id uint64) (Unit, error) {
	u, err := scanUnit(s.queryRow(ctx, q, selectUnit, int64(j.ID), int64(min(id, math.MaxInt64))), j.Params)
	if errors.Is(err, sql.ErrNoRows) {
		return Unit{}, fmt.Errorf("unit %d of job %d: %w", id, j.ID, ErrNotFound)
	}
	if err != nil {
		return Unit{}, fmt.Errorf("unit %d of job %d: %w", id, j.ID, wrapDB(err))
	}
	return u, nil
}

// move changes a unit's state and keeps its job's counters in step.
// extra is one of the set* assignments, whose args follow.
func (s *SQLite) move(ctx context.Context, tx *sql.Tx, u Unit, to UnitState, computeNanos int64, extra string, args ...any) error {
	if _, err := s.exec(ctx, tx, moveQuery(extra), append(append([]any{to}, args...), int64(u.Job), int64(u.ID))...); err != nil {
		return err
	}
	delta := unitDelta(u.State, to)
	if delta == [3]int{} && computeNanos == 0 {
		return nil
	}
	_, err := s.exec(ctx, tx, countUnits, delta[0], delta[1], delta[2], computeNanos, int64(u.Job))
	return err
}

// unitDelta is the change of a job's running, done and failed counts
// when one of its units goes from state from to state to.
func unitDelta(from, to UnitState) [3]int {
	var delta [3]int
	for i, st := range [...]UnitState{UnitRunning, UnitDone, UnitFailed} {
		if from == st {
			delta[i]--
		}
		if to == st {
			delta[i]++
		}
	}
	return delta
}

// unitOp runs fn on a unit and its job inside a transaction.
func (s *SQLite) unitOp(ctx context.Context, what string, job, id uint64, fn func(tx *sql.Tx, j Job, u Unit) error) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		j, err := s.job(ctx, tx, job)
		if err != nil {
			return err
		}
		if err := checkFence(ctx, j); err != nil {
			return err
		}
		u, err := s.unit(ctx, tx, j, id)
		if err != nil {
			return err
		}
		return fn(tx, j, u)
	})
	if err != nil {
		return fmt.Errorf("store: %s unit %d of job %d: %w", what, id, job, err)
	}
	return nil
}

// StartUnit implements Jobs.
func (s *SQLite) StartUnit(ctx context.Context, job, id uint64, worker string) (int, error) {
	attempt := 0
	err := s.unitOp(ctx, "start", job, id, func(tx *sql.Tx, j Job, u Unit) error {
		if j.State.Final() {
			return fmt.Errorf("job is %s: %w", j.State, ErrConflict)
		}
		if u.State != UnitPending && u.State != UnitRunning {
			return fmt.Errorf("unit is %s: %w", u.State, ErrConflict)
		}
		if j.State == JobQueued {
			if _, err := s.exec(ctx, tx, startJob, JobRunning, nanos(s.now()), int64(job)); err != nil {
				return err
			}
		}
		attempt = u.Attempts + 1
		return s.move(ctx, tx, u, UnitRunning, 0, setStarted, worker, attempt)
	})
	return attempt, err
}

// FinishUnit implements Jobs.
func (s *SQLite) FinishUnit(ctx context.Context, job, id uint64, worker, result string, computeNanos int64) (bool, error) {
	counted := false
	err := s.unitOp(ctx, "finish", job, id, func(tx *sql.Tx, j Job, u Unit) error {
		if j.State.Final() || u.State == UnitDone || u.State == UnitCanceled {
			return nil
		}
		if err := s.move(ctx, tx, u, UnitDone, computeNanos, setFinished, worker, result, computeNanos); err != nil {
			return err
		}
		if _, err := s.exec(ctx, tx, creditDone, worker); err != nil {
			return err
		}
		counted = true
		return nil
	})
	return counted, err
}

// FinishUnits implements Jobs. Units still pending, the usual case, are
// finished many per statement; the others cost one read and one write
// each. Job counters and worker credits are summed and written once per
// job and worker.
func (s *SQLite) FinishUnits(ctx context.Context, rs []UnitResult) ([]bool, error) {
	counted := make([]bool, len(rs))
	err := s.tx(ctx, func(tx *sql.Tx) error {
		open := map[uint64]openJob{} // job ID: unfinished, and its epoch
		var t tally
		var todo []int // indexes into rs of results for unfinished jobs
		for i, r := range rs {
			if r.Job > math.MaxInt64 || r.ID > math.MaxInt64 {
				continue
			}
			o, seen := open[r.Job]
			if !seen {
				j, err := s.job(ctx, tx, r.Job)
				if err != nil && !errors.Is(err, ErrNotFound) {
					return err
				}
				o = openJob{err == nil && !j.State.Final(), j.Epoch}
				open[r.Job] = o
			}
			if o.takes(r) {
				todo = append(todo, i)
			}
		}
		fromPending, err := s.finishPending(ctx, tx, rs, todo)
		if err != nil {
			return err
		}
		for k, i := range todo {
			r := rs[i]
			st := UnitPending
			if !fromPending[k] {
				err := s.queryRow(ctx, tx, unitState, int64(r.Job), int64(r.ID)).Scan(&st)
				if errors.Is(err, sql.ErrNoRows) {
					continue
				}
				if err != nil {
					return fmt.Errorf("unit %d of job %d: %w", r.ID, r.Job, err)
				}
				if st == UnitDone || st == UnitCanceled {
					continue
				}
				if _, err := s.exec(ctx, tx, moveQuery(setFinished), UnitDone, r.Worker, r.Result, r.ComputeNanos,
					int64(r.Job), int64(r.ID)); err != nil {
					return err
				}
			}
			t.count(r, st)
			counted[i] = true
		}
		return t.write(func(q string, args ...any) error {
			_, err := s.exec(ctx, tx, q, args...)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: finish %d units: %w", len(rs), err)
	}
	return counted, nil
}

// finishPending marks done, many per statement, the units of rs[todo]
// that are still pending, and reports which ones it marked. A unit named
// twice is marked by its first result only.
func (s *SQLite) finishPending(ctx context.Context, tx *sql.Tx, rs []UnitResult, todo []int) ([]bool, error) {
	marked := make([]bool, len(todo))
	type key struct{ job, id uint64 }
	pos := map[key]int{} // unit: index into todo, within the current batch
	args := make([]any, 0, unitFinishBatch*5)
	flush := func(from, to int) error {
		if from == to {
			return nil
		}
		rows, err := s.query(ctx, tx, finishPendingMany(to-from), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var job, id int64
			if err := rows.Scan(&job, &id); err != nil {
				return err
			}
			if k, ok := pos[key{uint64(job), uint64(id)}]; ok {
				marked[k] = true
			}
		}
		return rows.Err()
	}
	start := 0
	for k, i := range todo {
		r := rs[i]
		u := key{r.Job, r.ID}
		if _, dup := pos[u]; dup || k-start == unitFinishBatch {
			if err := flush(start, k); err != nil {
				return nil, err
			}
			clear(pos)
			args, start = args[:0], k
		}
		pos[u] = k
		args = append(args, r.Worker, r.Result, r.ComputeNanos, int64(r.Job), int64(r.ID))
	}
	if err := flush(start, len(todo)); err != nil {
		return nil, err
	}
	return marked, nil
}

// unitFinishBatch is how many units one finishPendingMany statement
// marks done.
const unitFinishBatch = 128

// finishPendingMany returns an UPDATE that marks n pending units done,
// each given as (worker, result, compute_ns, job, id), and returns the
// job and id of those it changed.
func finishPendingMany(n int) string {
	return "UPDATE units SET state = 'done', worker = v.column1, result = v.column2, compute_ns = v.column3, error = '' FROM (VALUES " +
		valueRows(n, 5) + ") AS v WHERE units.job = v.column4 AND units.id = v.column5 AND units.state = 'pending' RETURNING job, id"
}

// FailUnit implements Jobs.
func (s *SQLite) FailUnit(ctx context.Context, job, id uint64, worker, msg string) error {
	return s.unitOp(ctx, "fail", job, id, func(tx *sql.Tx, j Job, u Unit) error {
		if u.State == UnitDone || u.State == UnitCanceled {
			return fmt.Errorf("unit is %s: %w", u.State, ErrConflict)
		}
		return s.move(ctx, tx, u, UnitFailed, 0, setFailed, worker, msg)
	})
}

// RequeueUnit implements Jobs.
func (s *SQLite) RequeueUnit(ctx context.Context, job, id uint64) error {
	return s.unitOp(ctx, "requeue", job, id, func(tx *sql.Tx, j Job, u Unit) error {
		if u.State != UnitRunning {
			return nil
		}
		return s.move(ctx, tx, u, UnitPending, 0, "")
	})
}

// requeue returns the running units selected by where to pending.
func (s *SQLite) requeue(ctx context.Context, where string, args ...any) ([]UnitKey, error) {
	var keys []UnitKey
	err := s.tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "SELECT job, id FROM units WHERE state = 'running' AND "+where, args...)
		if err != nil {
			return err
		}
		keys, err = scanKeys(rows)
		rows.Close()
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := s.move(ctx, tx, Unit{Job: k.Job, ID: k.ID, State: UnitRunning}, UnitPending, 0, ""); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: requeue units: %w", err)
	}
	return keys, nil
}

// RequeueWorker implements Jobs.
func (s *SQLite) RequeueWorker(ctx context.Context, worker string) ([]UnitKey, error) {
	return s.requeue(ctx, "worker = ?", worker)
}

// ResetRunning implements Jobs.
func (s *SQLite) ResetRunning(ctx context.Context) (int, error) {
	keys, err := s.requeue(ctx, "job IN (SELECT id FROM jobs WHERE state IN (?, ?))", JobQueued, JobRunning)
	return len(keys), err
}

// FinishJob implements Jobs.
func (s *SQLite) FinishJob(ctx context.Context, id uint64, output string) error {
	return s.jobOp(ctx, "finish", id, func(tx *sql.Tx, j Job) error {
		if j.State.Final() {
			return fmt.Errorf("job is %s: %w", j.State, ErrConflict)
		}
		if j.Done != j.Total {
			return fmt.Errorf("%d of %d units are not done: %w", j.Total-j.Done, j.Total, ErrConflict)
		}
		_, err := tx.ExecContext(ctx, "UPDATE jobs SET state = ?, output = ?, finished = ? WHERE id = ?",
			JobDone, output, nanos(s.now()), int64(id))
		return err
	})
}

// jobOp runs fn on a job inside a transaction.
func (s *SQLite) jobOp(ctx context.Context, what string, id uint64, fn func(tx *sql.Tx, j Job) error) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		j, err := s.job(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := checkFence(ctx, j); err != nil {
			return err
		}
		return fn(tx, j)
	})
	if err != nil {
		return fmt.Errorf("store: %s job %d: %w", what, id, err)
	}
	return nil
}

// FailJob implements Jobs.
func (s *SQLite) FailJob(ctx context.Context, id uint64, msg string) error {
	return s.jobOp(ctx, "fail", id, func(tx *sql.Tx, j Job) error { return s.end(ctx, tx, j, JobFailed, msg) })
}

// CancelJob implements Jobs.
func (s *SQLite) CancelJob(ctx context.Context, id uint64, msg string) error {
	return s.jobOp(ctx, "cancel", id, func(tx *sql.Tx, j Job) error { return s.end(ctx, tx, j, JobCanceled, msg) })
}

// end gives an unfinished job the final state st.
func (s *SQLite) end(ctx context.Context, tx *sql.Tx, j Job, st JobState, msg string) error {
	if j.State.Final() {
		return fmt.Errorf("job is already %s: %w", j.State, ErrConflict)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE units SET state = ? WHERE job = ? AND state IN (?, ?)",
		UnitCanceled, int64(j.ID), UnitPending, UnitRunning); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "UPDATE jobs SET state = ?, error = ?, finished = ?, running = 0 WHERE id = ?",
		st, msg, nanos(s.now()), int64(j.ID))
	return err
}

// DeleteJob implements Jobs.
func (s *SQLite) DeleteJob(ctx context.Context, id uint64) error {
	return s.jobOp(ctx, "delete", id, func(tx *sql.Tx, j Job) error {
		if !j.State.Final() {
			return fmt.Errorf("job is %s; cancel it first: %w", j.State, ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM units WHERE job = ?", int64(id)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "DELETE FROM jobs WHERE id = ?", int64(id))
		return err
	})
}

// blobUsersQuery selects the unfinished jobs that refer to a blob: its
// arguments are the two unfinished states, the blob three times and a
// LIKE pattern of it in quotes.
const blobUsersQuery = `
		SELECT id FROM jobs WHERE state IN (?, ?) AND (input = ?
			OR id IN (SELECT job FROM units WHERE blob = ?)
			OR id IN (SELECT job FROM units WHERE result = ?)
			OR spec LIKE ?)
		ORDER BY id`

// BlobUsers implements Jobs.
func (s *SQLite) BlobUsers(ctx context.Context, blob string) ([]uint64, error) {
	rows, err := s.db.QueryContext(ctx, blobUsersQuery, JobQueued, JobRunning, blob, blob, blob, "%\""+blob+"\"%")
	if err != nil {
		return nil, fmt.Errorf("store: blob users: %w", wrapDB(err))
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: blob users: %w", err)
		}
		out = append(out, uint64(id))
	}
	return out, wrapDB(rows.Err())
}

const workerColumns = `id, name, addresses, cores, memory, disk, cpu_mhz, threads, ops, registered, last_seen,
	running, queued, load, done`

func scanWorker(sc scanner) (Worker, error) {
	var w Worker
	var addrs, ops string
	var reg, seen, done int64
	err := sc.Scan(&w.ID, &w.Name, &addrs, &w.Cores, &w.Memory, &w.Disk, &w.CPUMHz, &w.Threads, &ops, &reg, &seen,
		&w.Running, &w.Queued, &w.Load, &done)
	if err != nil {
		return Worker{}, err
	}
	w.Registered, w.LastSeen, w.Done = fromNanos(reg), fromNanos(seen), uint64(done)
	if w.Addresses, err = fromJSON[[]string](addrs); err != nil {
		return Worker{}, err
	}
	if w.Ops, err = fromJSON[[]string](ops); err != nil {
		return Worker{}, err
	}
	return w, nil
}

// RegisterWorker implements Jobs.
func (s *SQLite) RegisterWorker(ctx context.Context, w Worker) (Worker, error) {
	now := nanos(s.now())
	var out Worker
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if w.ID == "" {
			res, err := tx.ExecContext(ctx, `INSERT INTO workers (id, name, addresses, cores, memory, disk, cpu_mhz,
				threads, ops, registered, last_seen) VALUES ('', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				w.Name, toJSON(w.Addresses), w.Cores, w.Memory, w.Disk, w.CPUMHz, w.Threads, toJSON(w.Ops), now, now)
			if err != nil {
				return err
			}
			seq, err := res.LastInsertId()
			if err != nil {
				return err
			}
			w.ID = fmt.Sprintf("w%d", seq)
			if _, err := tx.ExecContext(ctx, "UPDATE workers SET id = ? WHERE seq = ?", w.ID, seq); err != nil {
				return err
			}
		} else {
			res, err := tx.ExecContext(ctx, `UPDATE workers SET name = ?, addresses = ?, cores = ?, memory = ?, disk = ?,
				cpu_mhz = ?, threads = ?, ops = ?, last_seen = ? WHERE id = ?`,
				w.Name, toJSON(w.Addresses), w.Cores, w.Memory, w.Disk, w.CPUMHz, w.Threads, toJSON(w.Ops), now, w.ID)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return fmt.Errorf("worker %s: %w", w.ID, ErrNotFound)
			}
		}
		var err error
		out, err = scanWorker(tx.QueryRowContext(ctx, "SELECT "+workerColumns+" FROM workers WHERE id = ?", w.ID))
		return err
	})
	if err != nil {
		return Worker{}, fmt.Errorf("store: register worker: %w", err)
	}
	return out, nil
}

// Heartbeats implements Jobs: one transaction for the whole batch.
func (s *SQLite) Heartbeats(ctx context.Context, beats []Beat) (int, error) {
	if len(beats) == 0 {
		return 0, nil
	}
	n := 0
	err := s.tx(ctx, func(tx *sql.Tx) error {
		n = 0
		st, err := tx.PrepareContext(ctx, "UPDATE workers SET last_seen = ?, running = ?, queued = ?, load = ? WHERE id = ?")
		if err != nil {
			return err
		}
		defer st.Close()
		now := nanos(s.now())
		for _, b := range beats {
			res, err := st.ExecContext(ctx, now, b.Running, b.Queued, b.Load, b.Worker)
			if err != nil {
				return err
			}
			k, _ := res.RowsAffected()
			n += int(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: heartbeats of %d workers: %w", len(beats), wrapDB(err))
	}
	return n, nil
}

// Worker implements Jobs.
func (s *SQLite) Worker(ctx context.Context, id string) (Worker, error) {
	w, err := scanWorker(s.db.QueryRowContext(ctx, "SELECT "+workerColumns+" FROM workers WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return Worker{}, fmt.Errorf("store: worker %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Worker{}, fmt.Errorf("store: worker %s: %w", id, wrapDB(err))
	}
	return w, nil
}

// Workers implements Jobs.
func (s *SQLite) Workers(ctx context.Context) ([]Worker, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT "+workerColumns+" FROM workers ORDER BY seq")
	if err != nil {
		return nil, fmt.Errorf("store: workers: %w", wrapDB(err))
	}
	defer rows.Close()
	var out []Worker
	for rows.Next() {
		w, err := scanWorker(rows)
		if err != nil {
			return nil, fmt.Errorf("store: workers: %w", err)
		}
		out = append(out, w)
	}
	return out, wrapDB(rows.Err())
}

// DeleteWorker implements Jobs.
func (s *SQLite) DeleteWorker(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, "DELETE FROM workers WHERE id = ?", id)
	if err != nil {
		return fmt.Errorf("store: delete worker %s: %w", id, wrapDB(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: delete worker %s: %w", id, ErrNotFound)
	}
	return nil
}
