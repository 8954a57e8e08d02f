package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgSchemaVersion is the version of the PostgreSQL schema this build
// writes, kept in the one row of braid_schema. Version 1 is pgSchema
// (the tables of SQLite's version 6); pgMigrations[v-1] takes a
// database from version v to v+1.
const pgSchemaVersion = 6

var pgMigrations = []string{
	// 2: several servers over one database (leases.go), and the
	// notifications that wake them (Listen).
	leaseMigration("BIGINT") + pgNotifyTriggers,
	// 3: owners, as SQLite's version 8.
	ownersMigration + `
ALTER TABLE uploads ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE uploads DROP CONSTRAINT uploads_pkey;
ALTER TABLE uploads ADD PRIMARY KEY (id, owner);
`,
	// 4: the members of datasets, as SQLite's version 9.
	datasetMigration(""),
	// 5: the datasets to index and the uploads made on their own, as
	// SQLite's version 10.
	backfillMigration("", "BIGINT"),
	// 6: datasets' creators, as SQLite's version 11.
	creatorMigration,
}

// pgSchema has the tables and columns of the SQLite schema, so that
// copies between the two are column for column (copy.go). Times are
// Unix nanoseconds, 0 for none, as in SQLite.
const pgSchema = `
CREATE TABLE jobs (
	id          BIGSERIAL PRIMARY KEY,
	op          TEXT NOT NULL,
	input       TEXT NOT NULL,
	params      TEXT NOT NULL,
	hint_units  BIGINT NOT NULL,
	tile_w      BIGINT NOT NULL,
	tile_h      BIGINT NOT NULL,
	hint_repeat BIGINT NOT NULL,
	policy      TEXT NOT NULL,
	in_flight   BIGINT NOT NULL,
	state       TEXT NOT NULL,
	output      TEXT NOT NULL DEFAULT '',
	error       TEXT NOT NULL DEFAULT '',
	submitted   BIGINT NOT NULL,
	started     BIGINT NOT NULL DEFAULT 0,
	finished    BIGINT NOT NULL DEFAULT 0,
	total       BIGINT NOT NULL,
	done        BIGINT NOT NULL DEFAULT 0,
	failed      BIGINT NOT NULL DEFAULT 0,
	running     BIGINT NOT NULL DEFAULT 0,
	compute_ns  BIGINT NOT NULL DEFAULT 0,
	spec        TEXT NOT NULL DEFAULT '',
	retries     BIGINT NOT NULL DEFAULT 0,
	expired     BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX jobs_state ON jobs(state, id);
CREATE INDEX jobs_output ON jobs(output) WHERE output != '';
CREATE INDEX jobs_input ON jobs(input) WHERE input != '';
CREATE TABLE units (
	job        BIGINT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
	id         BIGINT NOT NULL,
	params     TEXT,
	blob       TEXT NOT NULL DEFAULT '',
	off        BIGINT NOT NULL DEFAULT 0,
	len        BIGINT NOT NULL DEFAULT 0,
	deps       TEXT NOT NULL DEFAULT '',
	state      TEXT NOT NULL,
	worker     TEXT NOT NULL DEFAULT '',
	attempts   BIGINT NOT NULL DEFAULT 0,
	result     TEXT NOT NULL DEFAULT '',
	error      TEXT NOT NULL DEFAULT '',
	compute_ns BIGINT NOT NULL DEFAULT 0,
	reduce     BOOLEAN NOT NULL DEFAULT false,
	fails      BIGINT NOT NULL DEFAULT 0,
	lost       BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (job, id)
);
CREATE INDEX units_running ON units(worker) WHERE state = 'running';
CREATE INDEX units_blob ON units(blob) WHERE blob != '';
CREATE INDEX units_result ON units(result) WHERE result != '';
CREATE TABLE workers (
	seq        BIGSERIAL PRIMARY KEY,
	id         TEXT NOT NULL UNIQUE,
	name       TEXT NOT NULL,
	addresses  TEXT NOT NULL,
	cores      BIGINT NOT NULL,
	memory     BIGINT NOT NULL,
	disk       BIGINT NOT NULL,
	cpu_mhz    BIGINT NOT NULL,
	threads    BIGINT NOT NULL,
	ops        TEXT NOT NULL,
	registered BIGINT NOT NULL,
	last_seen  BIGINT NOT NULL,
	running    BIGINT NOT NULL DEFAULT 0,
	queued     BIGINT NOT NULL DEFAULT 0,
	load       DOUBLE PRECISION NOT NULL DEFAULT 0,
	done       BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE user_ops (
	name     TEXT NOT NULL,
	version  BIGINT NOT NULL,
	hash     TEXT NOT NULL,
	size     BIGINT NOT NULL,
	doc      TEXT NOT NULL,
	split    TEXT NOT NULL,
	merge    TEXT NOT NULL,
	params   TEXT NOT NULL,
	added    BIGINT NOT NULL,
	removed  BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (name, version)
);
CREATE INDEX user_ops_hash ON user_ops(hash);
CREATE TABLE pipelines (
	id        BIGSERIAL PRIMARY KEY,
	name      TEXT NOT NULL,
	steps     TEXT NOT NULL,
	submitted BIGINT NOT NULL
);
CREATE TABLE uploads (
	id    TEXT PRIMARY KEY,
	added BIGINT NOT NULL
);
CREATE TABLE api_tokens (
	id        TEXT PRIMARY KEY,
	hash      TEXT NOT NULL UNIQUE,
	name      TEXT NOT NULL UNIQUE,
	role      TEXT NOT NULL,
	created   BIGINT NOT NULL,
	last_used BIGINT NOT NULL DEFAULT 0,
	revoked   BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE timelines (
	job  BIGINT PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
	data BYTEA NOT NULL
);
`

// migrateLock is the advisory lock key that orders the schema changes
// of servers starting at once on one database.
const migrateLock = 0x62726169640001 // "braid" 1

// PostgresConfig configures a PostgreSQL store. The zero value works.
type PostgresConfig struct {
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// MaxConns bounds the pool's connections. Zero means 8.
	MaxConns int
	// StallTimeout ends a session that sits in an open transaction this
	// long (idle_in_transaction_session_timeout): a server stopped in
	// the middle of one (SIGSTOP) would otherwise hold its jobs' rows
	// locked, and no other server could take them over. Zero means 5s.
	StallTimeout time.Duration
}

// Postgres is Meta in a PostgreSQL database, through pgx's connection
// pool. Several processes may share one database: every change of a job
// or its units first locks the job's row (SELECT ... FOR UPDATE), which
// orders them as SQLite's single connection does, and a transaction
// that loses a serialization or deadlock race is run again. Rows are
// locked in one order, jobs by ID, then units, then workers by ID.
type Postgres struct {
	pool   *pgxpool.Pool
	now    func() time.Time
	where  string // host:port/database, for messages
	closed atomic.Bool
	from   int // the schema version found at open
}

// OpenPostgres connects to the database connURL names
// ("postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=..."), creates or
// migrates braid's tables in it, and checks that its schema is not
// newer than this build. Errors name the host and database, never the
// password.
func OpenPostgres(ctx context.Context, connURL string, cfg *PostgresConfig) (*Postgres, error) {
	if cfg == nil {
		cfg = &PostgresConfig{}
	}
	pc, err := pgxpool.ParseConfig(connURL)
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL URL %s: %w", Redact(connURL), err)
	}
	stall := cfg.StallTimeout
	if stall <= 0 {
		stall = 5 * time.Second
	}
	pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(max(stall.Milliseconds(), 1), 10)
	pc.MaxConns = int32(cfg.MaxConns)
	if pc.MaxConns <= 0 {
		pc.MaxConns = 8
	}
	where := net.JoinHostPort(pc.ConnConfig.Host, strconv.Itoa(int(pc.ConnConfig.Port))) + "/" + pc.ConnConfig.Database
	if strings.HasPrefix(pc.ConnConfig.Host, "/") {
		where = pc.ConnConfig.Host + "/" + pc.ConnConfig.Database
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL at %s: %w", where, err)
	}
	p := &Postgres{pool: pool, now: cfg.Now, where: where}
	if p.now == nil {
		p.now = time.Now
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: connect to PostgreSQL at %s as %s: %w", where, pc.ConnConfig.User, err)
	}
	if err := p.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: PostgreSQL at %s: %w", where, err)
	}
	return p, nil
}

// String names the database, without credentials.
func (p *Postgres) String() string { return "postgres://" + p.where }

func (p *Postgres) migrate(ctx context.Context) error {
	return p.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass('braid_schema') IS NOT NULL").Scan(&exists); err != nil {
			return err
		}
		v := 0
		if exists {
			if err := tx.QueryRow(ctx, "SELECT version FROM braid_schema").Scan(&v); err != nil {
				return fmt.Errorf("read the schema version: %w", err)
			}
		}
		p.from = v
		switch {
		case v == pgSchemaVersion:
			return nil
		case v > pgSchemaVersion:
			return fmt.Errorf("database schema version %d is newer than this braid understands (%d); upgrade braid", v, pgSchemaVersion)
		}
		if v == 0 {
			if _, err := tx.Exec(ctx, pgSchema+"CREATE TABLE braid_schema (version INTEGER NOT NULL); INSERT INTO braid_schema VALUES (1);"); err != nil {
				return fmt.Errorf("create the schema: %w", err)
			}
			v = 1
		}
		for ; v < pgSchemaVersion; v++ {
			if _, err := tx.Exec(ctx, pgMigrations[v-1]); err != nil {
				return fmt.Errorf("migrate the schema to version %d: %w", v+1, err)
			}
		}
		_, err := tx.Exec(ctx, "UPDATE braid_schema SET version = $1", pgSchemaVersion)
		return err
	})
}

// Close implements Jobs.
func (p *Postgres) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.pool.Close()
	return nil
}

// txTries bounds how often a transaction that lost a serialization or
// deadlock race runs again.
const txTries = 8

// tx runs fn in a transaction, again if it lost a race with another
// transaction. fn must not keep state from one run to the next.
func (p *Postgres) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	for try := 1; ; try++ {
		if p.closed.Load() {
			return ErrClosed
		}
		err := pgx.BeginFunc(ctx, p.pool, fn)
		if err == nil {
			return nil
		}
		if try >= txTries || !retryable(err) {
			return p.wrap(err)
		}
		t := time.NewTimer(time.Duration(try) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return p.wrap(err)
		case <-t.C:
		}
	}
}

// retryable reports whether err is a serialization failure or a
// deadlock, which running the transaction again resolves.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// wrap maps PostgreSQL's errors to the package's: ErrClosed after
// Close, ErrNoSpace for a full disk, ErrConflict for a unique key taken.
func (p *Postgres) wrap(err error) error {
	if err == nil {
		return nil
	}
	if p.closed.Load() {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "53100": // disk_full
			return fmt.Errorf("%w: PostgreSQL at %s: %v", ErrNoSpace, p.where, err)
		case "23505": // unique_violation
			return fmt.Errorf("%w: %v", ErrConflict, err)
		}
	}
	return err
}

// pg rewrites a query written with SQLite's "?" placeholders into
// PostgreSQL's "$1, $2, ...", so both stores share the statements they
// agree on. No query here has a "?" inside a literal.
func pg(q string) string {
	if v, ok := pgQueries.Load(q); ok {
		return v.(string)
	}
	out := numberPlaceholders(q)
	pgQueries.Store(q, out)
	return out
}

// pgQueries memoizes pg: its queries are a few dozen fixed strings.
var pgQueries sync.Map

func numberPlaceholders(q string) string {
	n := strings.Count(q, "?")
	if n == 0 {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 2*n)
	i := 0
	for _, r := range q {
		if r == '?' {
			i++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(i))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// pgQuerier is what a pool and a transaction share.
type pgQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CreateJob implements Jobs.
func (p *Postgres) CreateJob(ctx context.Context, j Job, units []Unit) (Job, error) {
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
	j.Submitted, j.Started, j.Finished = p.now().UTC(), time.Time{}, time.Time{}
	j.Total, j.Done, j.Failed, j.Running, j.ComputeNanos, j.Retries = len(units), 0, 0, 0, 0, 0
	args := []any{j.Op, j.Input, toJSON(j.Params), j.Units, j.TileW, j.TileH, j.Repeat, j.Policy, j.InFlight,
		string(j.State), nanos(j.Submitted), j.Total, specJSON(j.Spec), j.Server, int64(min(j.Epoch, math.MaxInt64)), j.Owner}
	var err error
	if len(units) <= pgUnitBatch {
		// One statement, so one round trip: the job and its units.
		var id int64
		err = p.pool.QueryRow(ctx, `WITH j AS (`+insertJob+` RETURNING id), u AS (`+
			insertUnitsFrom(`(SELECT id FROM j)`, 17)+`) SELECT id FROM j`,
			append(args, unitArrays(j, units)...)...).Scan(&id)
		j.ID = uint64(id)
		err = p.wrap(err)
	} else {
		err = p.tx(ctx, func(tx pgx.Tx) error {
			var id int64
			if err := tx.QueryRow(ctx, insertJob+" RETURNING id", args...).Scan(&id); err != nil {
				return err
			}
			j.ID = uint64(id)
			return p.addUnits(ctx, tx, j, units)
		})
	}
	if err != nil {
		return Job{}, fmt.Errorf("store: create job: %w", err)
	}
	return j, nil
}

// pgUnitBatch is how many units one INSERT carries, as arrays.
const pgUnitBatch = 8192

// insertJob inserts a job, given its 16 first columns.
const insertJob = `INSERT INTO jobs (op, input, params, hint_units, tile_w, tile_h, hint_repeat,
	policy, in_flight, state, submitted, total, spec, server, epoch, owner)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`

// insertUnitsFrom inserts units of the job whose ID is the expression
// job, from the seven arrays of unitArrays in parameters $arg, $arg+1...
func insertUnitsFrom(job string, arg int) string {
	return fmt.Sprintf(`INSERT INTO units (job, id, params, blob, off, len, deps, state, reduce)
	SELECT %s, u.id, u.params, u.blob, u.off, u.len, u.deps, 'pending', u.reduce
	FROM unnest($%d::bigint[], $%d::text[], $%d::text[], $%d::bigint[], $%d::bigint[], $%d::text[], $%d::boolean[])
		AS u(id, params, blob, off, len, deps, reduce)`, job, arg, arg+1, arg+2, arg+3, arg+4, arg+5, arg+6)
}

// unitArrays returns the columns of units of job j as seven arrays.
func unitArrays(j Job, units []Unit) []any {
	ids := make([]int64, len(units))
	params := make([]*string, len(units))
	blobs := make([]string, len(units))
	offs := make([]int64, len(units))
	lens := make([]int64, len(units))
	deps := make([]string, len(units))
	reduce := make([]bool, len(units))
	for i, u := range units {
		ids[i] = int64(u.ID)
		if !maps.Equal(u.Params, j.Params) && !(len(u.Params) == 0 && len(j.Params) == 0) {
			s := toJSON(u.Params)
			params[i] = &s
		}
		blobs[i], offs[i], lens[i], reduce[i] = u.Blob, u.Off, u.Len, u.Reduce
		if len(u.Deps) > 0 {
			deps[i] = toJSON(u.Deps)
		}
	}
	return []any{ids, params, blobs, offs, lens, deps, reduce}
}

// addUnits inserts the units of job j in tx, pgUnitBatch per statement.
func (p *Postgres) addUnits(ctx context.Context, tx pgx.Tx, j Job, units []Unit) error {
	for len(units) > 0 {
		batch := units[:min(len(units), pgUnitBatch)]
		units = units[len(batch):]
		args := append([]any{int64(j.ID)}, unitArrays(j, batch)...)
		if _, err := tx.Exec(ctx, insertUnitsFrom("$1::bigint", 2), args...); err != nil {
			return err
		}
	}
	return nil
}

// Job implements Jobs.
func (p *Postgres) Job(ctx context.Context, id uint64) (Job, error) {
	j, err := p.job(ctx, p.pool, id, false)
	if err != nil {
		return Job{}, fmt.Errorf("store: %w", err)
	}
	return j, nil
}

// job reads a job; lock also locks its row until the transaction ends.
func (p *Postgres) job(ctx context.Context, q pgQuerier, id uint64, lock bool) (Job, error) {
	query := pg(selectJob)
	if lock {
		query += " FOR UPDATE"
	}
	j, err := scanJob(q.QueryRow(ctx, query, int64(min(id, math.MaxInt64))))
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Job{}, fmt.Errorf("job %d: %w", id, p.wrap(err))
	}
	return j, nil
}

func (p *Postgres) jobs(ctx context.Context, query string, args ...any) ([]Job, error) {
	rows, err := p.pool.Query(ctx, pg("SELECT "+jobColumns+" FROM jobs "+query), args...)
	if err != nil {
		return nil, fmt.Errorf("store: list jobs: %w", p.wrap(err))
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
		return nil, fmt.Errorf("store: list jobs: %w", p.wrap(err))
	}
	return out, nil
}

// JobCounts implements Meta.
func (p *Postgres) JobCounts(ctx context.Context) (map[JobState]int, error) {
	rows, err := p.pool.Query(ctx, "SELECT state, COUNT(*) FROM jobs GROUP BY state")
	if err != nil {
		return nil, fmt.Errorf("store: count jobs: %w", p.wrap(err))
	}
	defer rows.Close()
	out := map[JobState]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("store: count jobs: %w", p.wrap(err))
		}
		out[JobState(st)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: count jobs: %w", p.wrap(err))
	}
	return out, nil
}

// ListJobs implements Jobs.
func (p *Postgres) ListJobs(ctx context.Context, f JobFilter) ([]Job, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	where, args := f.where()
	return p.jobs(ctx, where+" ORDER BY id DESC LIMIT ?", append(args, limit)...)
}

// Unfinished implements Jobs.
func (p *Postgres) Unfinished(ctx context.Context) ([]Job, error) {
	return p.jobs(ctx, "WHERE state IN (?, ?) ORDER BY id", string(JobQueued), string(JobRunning))
}

// Units implements Jobs.
func (p *Postgres) Units(ctx context.Context, job uint64) ([]Unit, error) {
	j, err := p.Job(ctx, job)
	if err != nil {
		return nil, err
	}
	rows, err := p.pool.Query(ctx, "SELECT "+unitColumns+" FROM units WHERE job = $1 ORDER BY id", int64(job))
	if err != nil {
		return nil, fmt.Errorf("store: units of job %d: %w", job, p.wrap(err))
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
		return nil, fmt.Errorf("store: units of job %d: %w", job, p.wrap(err))
	}
	return out, nil
}

// Unit implements Jobs.
func (p *Postgres) Unit(ctx context.Context, job, id uint64) (Unit, error) {
	j, err := p.Job(ctx, job)
	if err != nil {
		return Unit{}, err
	}
	u, err := p.unit(ctx, p.pool, j, id)
	if err != nil {
		return Unit{}, fmt.Errorf("store: %w", err)
	}
	return u, nil
}

func (p *Postgres) unit(ctx context.Context, q pgQuerier, j Job, id uint64) (Unit, error) {
	u, err := scanUnit(q.QueryRow(ctx, pg(selectUnit), int64(j.ID), int64(min(id, math.MaxInt64))), j.Params)
	if errors.Is(err, pgx.ErrNoRows) {
		return Unit{}, fmt.Errorf("unit %d of job %d: %w", id, j.ID, ErrNotFound)
	}
	if err != nil {
		return Unit{}, fmt.Errorf("unit %d of job %d: %w", id, j.ID, p.wrap(err))
	}
	return u, nil
}

// move changes a unit's state and keeps its job's counters in step; the
// caller holds the job's row lock. extra is one of the set*
// assignments, whose args follow.
func (p *Postgres) move(ctx context.Context, tx pgx.Tx, u Unit, to UnitState, computeNanos int64, extra string, args ...any) error {
	all := append(append([]any{string(to)}, args...), int64(u.Job), int64(u.ID))
	if _, err := tx.Exec(ctx, pg(moveQuery(extra)), all...); err != nil {
		return err
	}
	delta := unitDelta(u.State, to)
	if delta == [3]int{} && computeNanos == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, pg(countUnits), delta[0], delta[1], delta[2], computeNanos, int64(u.Job))
	return err
}

// unitOp runs fn on a unit and its locked job inside a transaction.
func (p *Postgres) unitOp(ctx context.Context, what string, job, id uint64, fn func(tx pgx.Tx, j Job, u Unit) error) error {
	err := p.tx(ctx, func(tx pgx.Tx) error {
		j, err := p.job(ctx, tx, job, true)
		if err != nil {
			return err
		}
		if err := checkFence(ctx, j); err != nil {
			return err
		}
		u, err := p.unit(ctx, tx, j, id)
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

// jobOp runs fn on a locked job inside a transaction.
func (p *Postgres) jobOp(ctx context.Context, what string, id uint64, fn func(tx pgx.Tx, j Job) error) error {
	err := p.tx(ctx, func(tx pgx.Tx) error {
		j, err := p.job(ctx, tx, id, true)
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

// StartUnit implements Jobs.
func (p *Postgres) StartUnit(ctx context.Context, job, id uint64, worker string) (int, error) {
	attempt := 0
	err := p.unitOp(ctx, "start", job, id, func(tx pgx.Tx, j Job, u Unit) error {
		if j.State.Final() {
			return fmt.Errorf("job is %s: %w", j.State, ErrConflict)
		}
		if u.State != UnitPending && u.State != UnitRunning {
			return fmt.Errorf("unit is %s: %w", u.State, ErrConflict)
		}
		if j.State == JobQueued {
			if _, err := tx.Exec(ctx, pg(startJob), string(JobRunning), nanos(p.now()), int64(job)); err != nil {
				return err
			}
		}
		attempt = u.Attempts + 1
		return p.move(ctx, tx, u, UnitRunning, 0, setStarted, worker, attempt)
	})
	return attempt, err
}

// FinishUnit implements Jobs.
func (p *Postgres) FinishUnit(ctx context.Context, job, id uint64, worker, result string, computeNanos int64) (bool, error) {
	counted := false
	err := p.unitOp(ctx, "finish", job, id, func(tx pgx.Tx, j Job, u Unit) error {
		counted = false
		if j.State.Final() || u.State == UnitDone || u.State == UnitCanceled {
			return nil
		}
		if err := p.move(ctx, tx, u, UnitDone, computeNanos, setFinished, worker, result, computeNanos); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, pg(creditDone), worker); err != nil {
			return err
		}
		counted = true
		return nil
	})
	return counted, err
}

// FinishUnits implements Jobs. It locks the results' jobs by ID, marks
// the units still pending done in one statement, reads and writes the
// others one by one, then adds up each job's counters and each worker's
// credit once.
func (p *Postgres) FinishUnits(ctx context.Context, rs []UnitResult) ([]bool, error) {
	counted := make([]bool, len(rs))
	err := p.tx(ctx, func(tx pgx.Tx) error {
		clear(counted)
		var ids []int64
		for _, r := range rs {
			if r.Job <= math.MaxInt64 && r.ID <= math.MaxInt64 {
				ids = append(ids, int64(r.Job))
			}
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		open := map[uint64]openJob{}
		rows, err := tx.Query(ctx, "SELECT id, state, epoch FROM jobs WHERE id = ANY($1) ORDER BY id FOR UPDATE", ids)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id, epoch int64
			var st string
			if err := rows.Scan(&id, &st, &epoch); err != nil {
				rows.Close()
				return err
			}
			open[uint64(id)] = openJob{!JobState(st).Final(), uint64(epoch)}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var todo []int
		for i, r := range rs {
			if r.ID <= math.MaxInt64 && open[r.Job].takes(r) {
				todo = append(todo, i)
			}
		}
		fromPending, err := p.finishPending(ctx, tx, rs, todo)
		if err != nil {
			return err
		}
		var t tally
		for k, i := range todo {
			r := rs[i]
			st := UnitPending
			if !fromPending[k] {
				var s string
				err := tx.QueryRow(ctx, pg(unitState), int64(r.Job), int64(r.ID)).Scan(&s)
				if errors.Is(err, pgx.ErrNoRows) {
					continue
				}
				if err != nil {
					return fmt.Errorf("unit %d of job %d: %w", r.ID, r.Job, err)
				}
				st = UnitState(s)
				if st == UnitDone || st == UnitCanceled {
					continue
				}
				if _, err := tx.Exec(ctx, pg(moveQuery(setFinished)), string(UnitDone), r.Worker, r.Result, r.ComputeNanos,
					int64(r.Job), int64(r.ID)); err != nil {
					return err
				}
			}
			t.count(r, st)
			counted[i] = true
		}
		// The counters travel in one round trip.
		var b pgx.Batch
		t.write(func(q string, args ...any) error {
			b.Queue(pg(q), args...)
			return nil
		})
		if b.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("store: finish %d units: %w", len(rs), err)
	}
	return counted, nil
}

// finishPending marks done, in one statement, the units of rs[todo] that
// are still pending, and reports which ones it marked. A unit named
// twice is marked by its first result only; the later ones are left to
// the caller, which finds it done.
func (p *Postgres) finishPending(ctx context.Context, tx pgx.Tx, rs []UnitResult, todo []int) ([]bool, error) {
	marked := make([]bool, len(todo))
	type key struct{ job, id uint64 }
	pos := make(map[key]int, len(todo))
	var workers, results []string
	var computes, jobs, ids []int64
	for k, i := range todo {
		r := rs[i]
		u := key{r.Job, r.ID}
		if _, dup := pos[u]; dup {
			continue
		}
		pos[u] = k
		workers, results = append(workers, r.Worker), append(results, r.Result)
		computes, jobs, ids = append(computes, r.ComputeNanos), append(jobs, int64(r.Job)), append(ids, int64(r.ID))
	}
	if len(ids) == 0 {
		return marked, nil
	}
	rows, err := tx.Query(ctx, `UPDATE units SET state = 'done', worker = v.worker, result = v.result,
		compute_ns = v.compute_ns, error = ''
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) AS v(worker, result, compute_ns, job, id)
		WHERE units.job = v.job AND units.id = v.id AND units.state = 'pending' RETURNING units.job, units.id`,
		workers, results, computes, jobs, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var job, id int64
		if err := rows.Scan(&job, &id); err != nil {
			return nil, err
		}
		if k, ok := pos[key{uint64(job), uint64(id)}]; ok {
			marked[k] = true
		}
	}
	return marked, rows.Err()
}

// FailUnit implements Jobs.
func (p *Postgres) FailUnit(ctx context.Context, job, id uint64, worker, msg string) error {
	return p.unitOp(ctx, "fail", job, id, func(tx pgx.Tx, j Job, u Unit) error {
		if u.State == UnitDone || u.State == UnitCanceled {
			return fmt.Errorf("unit is %s: %w", u.State, ErrConflict)
		}
		return p.move(ctx, tx, u, UnitFailed, 0, setFailed, worker, msg)
	})
}

// RetryUnit implements Meta.
func (p *Postgres) RetryUnit(ctx context.Context, job, id uint64, worker, msg string) error {
	return p.unitOp(ctx, "retry", job, id, func(tx pgx.Tx, j Job, u Unit) error {
		if j.State.Final() || u.State == UnitDone || u.State == UnitCanceled {
			return fmt.Errorf("unit is %s in a %s job: %w", u.State, j.State, ErrConflict)
		}
		if err := p.move(ctx, tx, u, UnitPending, 0, setFailed, worker, msg); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE jobs SET retries = retries + 1 WHERE id = $1", int64(job))
		return err
	})
}

// RequeueUnit implements Jobs.
func (p *Postgres) RequeueUnit(ctx context.Context, job, id uint64) error {
	return p.unitOp(ctx, "requeue", job, id, func(tx pgx.Tx, j Job, u Unit) error {
		if u.State != UnitRunning {
			return nil
		}
		return p.move(ctx, tx, u, UnitPending, 0, "")
	})
}

// requeue returns the running units selected by where to pending. It
// locks their jobs first, in ID order, as every other change does.
func (p *Postgres) requeue(ctx context.Context, where string, args ...any) ([]UnitKey, error) {
	var keys []UnitKey
	err := p.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, pg(`SELECT 1 FROM jobs WHERE id IN (SELECT DISTINCT job FROM units
			WHERE state = 'running' AND `+where+`) ORDER BY id FOR UPDATE`), args...); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, pg("SELECT job, id FROM units WHERE state = 'running' AND "+where+" ORDER BY job, id"), args...)
		if err != nil {
			return err
		}
		keys, err = scanKeys(rows)
		rows.Close()
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := p.move(ctx, tx, Unit{Job: k.Job, ID: k.ID, State: UnitRunning}, UnitPending, 0, ""); err != nil {
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
func (p *Postgres) RequeueWorker(ctx context.Context, worker string) ([]UnitKey, error) {
	return p.requeue(ctx, "worker = ?", worker)
}

// ResetRunning implements Jobs.
func (p *Postgres) ResetRunning(ctx context.Context) (int, error) {
	keys, err := p.requeue(ctx, "job IN (SELECT id FROM jobs WHERE state IN (?, ?))", string(JobQueued), string(JobRunning))
	return len(keys), err
}

// FinishJob implements Jobs.
func (p *Postgres) FinishJob(ctx context.Context, id uint64, output string) error {
	// The usual case in one statement; the transaction below says why
	// not, if not.
	tag, err := p.pool.Exec(ctx, `UPDATE jobs SET state = $1, output = $2, finished = $3
		WHERE id = $4 AND state IN ($5, $6) AND done = total AND ($7 = 0 OR epoch = $7)`,
		string(JobDone), output, nanos(p.now()), int64(min(id, math.MaxInt64)), string(JobQueued), string(JobRunning),
		int64(min(fenceOf(ctx), math.MaxInt64)))
	if err != nil {
		return fmt.Errorf("store: finish job %d: %w", id, p.wrap(err))
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	return p.jobOp(ctx, "finish", id, func(tx pgx.Tx, j Job) error {
		if j.State.Final() {
			return fmt.Errorf("job is %s: %w", j.State, ErrConflict)
		}
		if j.Done != j.Total {
			return fmt.Errorf("%d of %d units are not done: %w", j.Total-j.Done, j.Total, ErrConflict)
		}
		_, err := tx.Exec(ctx, "UPDATE jobs SET state = $1, output = $2, finished = $3 WHERE id = $4",
			string(JobDone), output, nanos(p.now()), int64(id))
		return err
	})
}

// FailJob implements Jobs.
func (p *Postgres) FailJob(ctx context.Context, id uint64, msg string) error {
	return p.jobOp(ctx, "fail", id, func(tx pgx.Tx, j Job) error { return p.end(ctx, tx, j, JobFailed, msg) })
}

// CancelJob implements Jobs.
func (p *Postgres) CancelJob(ctx context.Context, id uint64, msg string) error {
	return p.jobOp(ctx, "cancel", id, func(tx pgx.Tx, j Job) error { return p.end(ctx, tx, j, JobCanceled, msg) })
}

// end gives an unfinished job the final state st.
func (p *Postgres) end(ctx context.Context, tx pgx.Tx, j Job, st JobState, msg string) error {
	if j.State.Final() {
		return fmt.Errorf("job is already %s: %w", j.State, ErrConflict)
	}
	if _, err := tx.Exec(ctx, "UPDATE units SET state = $1 WHERE job = $2 AND state IN ($3, $4)",
		string(UnitCanceled), int64(j.ID), string(UnitPending), string(UnitRunning)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "UPDATE jobs SET state = $1, error = $2, finished = $3, running = 0 WHERE id = $4",
		string(st), msg, nanos(p.now()), int64(j.ID))
	return err
}

// DeleteJob implements Jobs.
func (p *Postgres) DeleteJob(ctx context.Context, id uint64) error {
	return p.jobOp(ctx, "delete", id, func(tx pgx.Tx, j Job) error {
		if !j.State.Final() {
			return fmt.Errorf("job is %s; cancel it first: %w", j.State, ErrConflict)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM units WHERE job = $1", int64(id)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM jobs WHERE id = $1", int64(id))
		return err
	})
}

// SetUnits implements Meta.
func (p *Postgres) SetUnits(ctx context.Context, id uint64, input string, units []Unit) error {
	return p.jobOp(ctx, "set units of", id, func(tx pgx.Tx, j Job) error {
		if j.State.Final() || j.Total > 0 {
			return fmt.Errorf("job is %s with %d units: %w", j.State, j.Total, ErrConflict)
		}
		if err := checkUnits(units); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE jobs SET input = $1, total = $2 WHERE id = $3", input, len(units), int64(id)); err != nil {
			return err
		}
		j.Input = input
		return p.addUnits(ctx, tx, j, units)
	})
}

// KeptOutputs implements Meta.
func (p *Postgres) KeptOutputs(ctx context.Context, blob string) ([]uint64, error) {
	rows, err := p.pool.Query(ctx, pg(keptOutputsQuery), keptOutputsArgs(blob)...)
	if err != nil {
		return nil, fmt.Errorf("store: jobs keeping blob %s: %w", blob, p.wrap(err))
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: jobs keeping blob %s: %w", blob, err)
		}
		out = append(out, uint64(id))
	}
	return out, p.wrap(rows.Err())
}

// BlobUsers implements Jobs.
func (p *Postgres) BlobUsers(ctx context.Context, blob string) ([]uint64, error) {
	rows, err := p.pool.Query(ctx, pg(blobUsersQuery), string(JobQueued), string(JobRunning), blob, blob, blob, "%\""+blob+"\"%")
	if err != nil {
		return nil, fmt.Errorf("store: blob users: %w", p.wrap(err))
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
	return out, p.wrap(rows.Err())
}
