package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Several servers share one database (PostgreSQL) by leases. A lease is
// a named claim by a holder until a time, renewed before it expires;
// every acquisition gets an epoch, a number larger than every epoch
// handed out before, from one counter in the database.
//
// Each server holds the lease "server/NAME". An unfinished job belongs
// to the server whose lease epoch is the job's Epoch: it alone places
// the job's units and writes its progress. A server takes the jobs of
// leases that expired (ClaimJobs), which gives them its own epoch, so
// the writes of a stalled owner that wakes up, made with the old epoch,
// fail with ErrFenced: a context from Fenced carries the epoch a write
// is made under, and each job write checks it under the job row's lock.
// A lease that expired cannot be renewed: its holder lets go of
// everything it held and acquires a new one.
//
// Other leases name singleton work (retention, garbage collection),
// which runs where the lease is held.

// ErrFenced is returned for a write made under a lease epoch that no
// longer owns the job, or for the renewal of a lease that expired:
// another server took over, and the caller must let go.
var ErrFenced = errors.New("store: fenced: another server owns it now")

// Lease is a time-bounded claim of a name by a holder.
type Lease struct {
	Name, Holder string
	// Epoch is the acquisition's number, unique and increasing across
	// every lease of the database.
	Epoch uint64
	// Expires is when the lease ends unless renewed, by the clock of
	// the database (PostgreSQL) or of the process (SQLite).
	Expires time.Time
}

// Live reports whether the lease has not expired at t.
func (l Lease) Live(t time.Time) bool { return !l.Expires.IsZero() && t.Before(l.Expires) }

// Leases is the part of Meta that lets several servers share a database.
type Leases interface {
	// AcquireLease takes the lease name for holder until ttl from now,
	// with a new epoch: if nobody holds it, its last holder's time ran
	// out, or holder holds it already (a restarted server replaces its
	// old incarnation). ErrConflict, naming the holder, if another holds
	// it.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error)
	// RenewLease extends l until ttl from now. ErrFenced if l expired
	// or was acquired again since (by anyone): its holder must let go of
	// what it held under l.Epoch.
	RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)
	// ReleaseLease ends l now, so that others may take over at once.
	// Releasing a lease lost already is no error.
	ReleaseLease(ctx context.Context, l Lease) error
	// Leases returns every lease, live or not, by name.
	Leases(ctx context.Context) ([]Lease, error)
	// ClaimJobs gives l (its holder and epoch) the unfinished jobs that
	// no live lease owns (their server's lease expired, was released or
	// acquired again; or they predate leases), or, with all, every
	// unfinished job not already l's. Their running units return to
	// pending: no stream survived the owner they had. It returns the
	// jobs claimed, oldest first. ErrFenced if l is not live.
	ClaimJobs(ctx context.Context, l Lease, all bool) ([]Job, error)
	// Owners returns the state, server and epoch of the jobs ids that
	// exist: how a server learns that a job it runs was canceled or
	// taken over elsewhere.
	Owners(ctx context.Context, ids []uint64) (map[uint64]JobOwner, error)
}

// JobOwner is where a job is and who owns it.
type JobOwner struct {
	State  JobState
	Server string
	Epoch  uint64
}

var (
	_ Leases = (*SQLite)(nil)
	_ Leases = (*Postgres)(nil)
)

// leaseMigration is the schema change that adds leases, with integer
// columns of type intType.
func leaseMigration(intType string) string {
	return `
ALTER TABLE jobs ADD COLUMN server TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN epoch ` + intType + ` NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS leases (
	name    TEXT PRIMARY KEY,
	holder  TEXT NOT NULL,
	epoch   ` + intType + ` NOT NULL,
	expires ` + intType + ` NOT NULL
);
CREATE TABLE IF NOT EXISTS lease_epoch (n ` + intType + ` NOT NULL);
INSERT INTO lease_epoch SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM lease_epoch);
`
}

type fenceKey struct{}

// Fenced returns ctx for writes of a job's progress made under lease
// epoch: a job write with it fails with ErrFenced unless the job's Epoch
// is epoch. Epoch 0 fences nothing.
func Fenced(ctx context.Context, epoch uint64) context.Context {
	return context.WithValue(ctx, fenceKey{}, epoch)
}

// fenceOf returns the epoch ctx's writes are fenced by, or 0.
func fenceOf(ctx context.Context) uint64 {
	e, _ := ctx.Value(fenceKey{}).(uint64)
	return e
}

// checkFence fails with ErrFenced unless ctx may write job j's progress.
func checkFence(ctx context.Context, j Job) error {
	if e := fenceOf(ctx); e != 0 && e != j.Epoch {
		return fmt.Errorf("job %d belongs to server %q (lease epoch %d), not to epoch %d: %w", j.ID, j.Server, j.Epoch, e, ErrFenced)
	}
	return nil
}

// openJob is what FinishUnits needs to know of a result's job.
type openJob struct {
	open  bool // unfinished
	epoch uint64
}

// takes reports whether r may count for the job.
func (o openJob) takes(r UnitResult) bool { return o.open && (r.Epoch == 0 || r.Epoch == o.epoch) }

// Lease statements, shared by both stores (pg rewrites the placeholders).
const (
	nextEpoch   = "UPDATE lease_epoch SET n = n + 1 RETURNING n"
	upsertLease = `INSERT INTO leases (name, holder, epoch, expires) VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, expires = excluded.expires
		WHERE leases.holder = excluded.holder OR leases.expires <= ?
		RETURNING epoch`
	selectLease   = "SELECT name, holder, epoch, expires FROM leases WHERE name = ?"
	renewLease    = "UPDATE leases SET expires = ? WHERE name = ? AND epoch = ? AND expires > ? RETURNING expires"
	releaseLease  = "UPDATE leases SET expires = 0 WHERE name = ? AND epoch = ?"
	listLeases    = "SELECT name, holder, epoch, expires FROM leases ORDER BY name"
	liveLeaseOf   = "SELECT 1 FROM leases WHERE epoch = ? AND expires > ?"
	claimableJobs = `SELECT id FROM jobs WHERE state IN ('queued', 'running') AND epoch != ?
		AND (? OR NOT EXISTS (SELECT 1 FROM leases l WHERE l.epoch = jobs.epoch AND l.expires > ?)) ORDER BY id`
	// pgLockClaimable locks the claimable jobs, skipping those whose row
	// another transaction holds (a stalled owner's, until its session
	// ends): the next claim takes them.
	pgLockClaimable = claimableJobs + " FOR UPDATE SKIP LOCKED"
	claimJob        = `UPDATE jobs SET server = ?, epoch = ? WHERE id = ? AND state IN ('queued', 'running') AND epoch != ?
		AND (? OR NOT EXISTS (SELECT 1 FROM leases l WHERE l.epoch = jobs.epoch AND l.expires > ?))`
	resetClaimed = "UPDATE units SET state = 'pending' WHERE job = ? AND state = 'running'"
	zeroRunning  = "UPDATE jobs SET running = 0 WHERE id = ?"
)

func leaseErr(name string, err error) error {
	return fmt.Errorf("store: lease %q: %w", name, err)
}

// heldBy is the ErrConflict of a lease another holds.
func heldBy(l Lease) error {
	return fmt.Errorf("held by %q until %s: %w", l.Holder, l.Expires.UTC().Format(time.RFC3339Nano), ErrConflict)
}

func ttlNanos(now int64, ttl time.Duration) int64 {
	if ttl <= 0 {
		ttl = time.Nanosecond
	}
	return now + int64(ttl)
}

// AcquireLease implements Leases.
func (s *SQLite) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	l := Lease{Name: name, Holder: holder}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now := nanos(s.now())
		var epoch int64
		if err := tx.QueryRowContext(ctx, nextEpoch).Scan(&epoch); err != nil {
			return err
		}
		exp := ttlNanos(now, ttl)
		err := tx.QueryRowContext(ctx, upsertLease, name, holder, epoch, exp, now).Scan(&epoch)
		if errors.Is(err, sql.ErrNoRows) {
			cur, err := scanLease(tx.QueryRowContext(ctx, selectLease, name))
			if err != nil {
				return err
			}
			return heldBy(cur)
		}
		if err != nil {
			return err
		}
		l.Epoch, l.Expires = uint64(epoch), fromNanos(exp)
		return nil
	})
	if err != nil {
		return Lease{}, leaseErr(name, err)
	}
	return l, nil
}

// RenewLease implements Leases.
func (s *SQLite) RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	now := nanos(s.now())
	var exp int64
	err := s.db.QueryRowContext(ctx, renewLease, ttlNanos(now, ttl), l.Name, int64(min(l.Epoch, math.MaxInt64)), now).Scan(&exp)
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, leaseErr(l.Name, fmt.Errorf("epoch %d expired or was taken over: %w", l.Epoch, ErrFenced))
	}
	if err != nil {
		return Lease{}, leaseErr(l.Name, wrapDB(err))
	}
	l.Expires = fromNanos(exp)
	return l, nil
}

// ReleaseLease implements Leases.
func (s *SQLite) ReleaseLease(ctx context.Context, l Lease) error {
	if _, err := s.db.ExecContext(ctx, releaseLease, l.Name, int64(min(l.Epoch, math.MaxInt64))); err != nil {
		return leaseErr(l.Name, wrapDB(err))
	}
	return nil
}

// Leases implements Leases.
func (s *SQLite) Leases(ctx context.Context) ([]Lease, error) {
	rows, err := s.db.QueryContext(ctx, listLeases)
	if err != nil {
		return nil, fmt.Errorf("store: leases: %w", wrapDB(err))
	}
	defer rows.Close()
	var out []Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, fmt.Errorf("store: leases: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

func scanLease(sc scanner) (Lease, error) {
	var l Lease
	var epoch, exp int64
	if err := sc.Scan(&l.Name, &l.Holder, &epoch, &exp); err != nil {
		return Lease{}, err
	}
	l.Epoch, l.Expires = uint64(epoch), fromNanos(exp)
	return l, nil
}

// ClaimJobs implements Leases.
func (s *SQLite) ClaimJobs(ctx context.Context, l Lease, all bool) ([]Job, error) {
	var ids []uint64
	err := s.tx(ctx, func(tx *sql.Tx) error {
		ids = ids[:0]
		now := nanos(s.now())
		epoch := int64(min(l.Epoch, math.MaxInt64))
		var one int
		if err := tx.QueryRowContext(ctx, liveLeaseOf, epoch, now).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("epoch %d is not live: %w", l.Epoch, ErrFenced)
		} else if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, claimableJobs, epoch, all, now)
		if err != nil {
			return err
		}
		ids, err = scanIDs(rows)
		rows.Close()
		if err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, claimJob, l.Holder, epoch, int64(id), epoch, all, now); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, resetClaimed, int64(id)); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, zeroRunning, int64(id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, leaseErr(l.Name, fmt.Errorf("claim jobs: %w", err))
	}
	return jobsByID(ctx, s.Job, ids)
}

// jobsByID reads the jobs ids with job, in that order.
func jobsByID(ctx context.Context, job func(context.Context, uint64) (Job, error), ids []uint64) ([]Job, error) {
	out := make([]Job, 0, len(ids))
	for _, id := range ids {
		j, err := job(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

func scanIDs(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}) ([]uint64, error) {
	var ids []uint64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, uint64(id))
	}
	return ids, rows.Err()
}

// dbNow returns the database's clock in Unix nanoseconds: leases of
// several servers are timed by one clock.
func (p *Postgres) dbNow(ctx context.Context, q pgQuerier) (int64, error) {
	var now int64
	err := q.QueryRow(ctx, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000").Scan(&now)
	return now, err
}

// AcquireLease implements Leases.
func (p *Postgres) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	l := Lease{Name: name, Holder: holder}
	err := p.tx(ctx, func(tx pgx.Tx) error {
		now, err := p.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		var epoch int64
		if err := tx.QueryRow(ctx, nextEpoch).Scan(&epoch); err != nil {
			return err
		}
		exp := ttlNanos(now, ttl)
		err = tx.QueryRow(ctx, pg(upsertLease), name, holder, epoch, exp, now).Scan(&epoch)
		if errors.Is(err, pgx.ErrNoRows) {
			cur, err := scanLease(tx.QueryRow(ctx, pg(selectLease), name))
			if err != nil {
				return err
			}
			return heldBy(cur)
		}
		if err != nil {
			return err
		}
		l.Epoch, l.Expires = uint64(epoch), fromNanos(exp)
		return nil
	})
	if err != nil {
		return Lease{}, leaseErr(name, err)
	}
	return l, nil
}

// RenewLease implements Leases.
func (p *Postgres) RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	var exp int64
	err := p.tx(ctx, func(tx pgx.Tx) error {
		now, err := p.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, pg(renewLease), ttlNanos(now, ttl), l.Name, int64(min(l.Epoch, math.MaxInt64)), now).Scan(&exp)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, leaseErr(l.Name, fmt.Errorf("epoch %d expired or was taken over: %w", l.Epoch, ErrFenced))
	}
	if err != nil {
		return Lease{}, leaseErr(l.Name, err)
	}
	l.Expires = fromNanos(exp)
	return l, nil
}

// ReleaseLease implements Leases.
func (p *Postgres) ReleaseLease(ctx context.Context, l Lease) error {
	if _, err := p.pool.Exec(ctx, pg(releaseLease), l.Name, int64(min(l.Epoch, math.MaxInt64))); err != nil {
		return leaseErr(l.Name, p.wrap(err))
	}
	return nil
}

// Leases implements Leases.
func (p *Postgres) Leases(ctx context.Context) ([]Lease, error) {
	rows, err := p.pool.Query(ctx, listLeases)
	if err != nil {
		return nil, fmt.Errorf("store: leases: %w", p.wrap(err))
	}
	defer rows.Close()
	var out []Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, fmt.Errorf("store: leases: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// ClaimJobs implements Leases. Each job is claimed under its row's lock
// with its condition checked again, so two servers claiming at once
// take each job once, and the writes of the job's old owner, which lock
// the row too, come before or after, never between.
func (p *Postgres) ClaimJobs(ctx context.Context, l Lease, all bool) ([]Job, error) {
	var ids []uint64
	err := p.tx(ctx, func(tx pgx.Tx) error {
		ids = ids[:0]
		now, err := p.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		epoch := int64(min(l.Epoch, math.MaxInt64))
		var one int
		if err := tx.QueryRow(ctx, pg(liveLeaseOf), epoch, now).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("epoch %d is not live: %w", l.Epoch, ErrFenced)
		} else if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, pg(pgLockClaimable), epoch, all, now)
		if err != nil {
			return err
		}
		cand, err := scanIDs(rows)
		rows.Close()
		if err != nil {
			return err
		}
		for _, id := range cand {
			tag, err := tx.Exec(ctx, pg(claimJob), l.Holder, epoch, int64(id), epoch, all, now)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				continue // another server claimed it first
			}
			ids = append(ids, id)
			if _, err := tx.Exec(ctx, pg(resetClaimed), int64(id)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, pg(zeroRunning), int64(id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, leaseErr(l.Name, fmt.Errorf("claim jobs: %w", p.wrap(err)))
	}
	return jobsByID(ctx, p.Job, ids)
}

// ownersBatch bounds the IDs of one Owners query.
const ownersBatch = 500

// Owners implements Leases.
func (s *SQLite) Owners(ctx context.Context, ids []uint64) (map[uint64]JobOwner, error) {
	out := make(map[uint64]JobOwner, len(ids))
	for len(ids) > 0 {
		batch := ids[:min(len(ids), ownersBatch)]
		ids = ids[len(batch):]
		args := make([]any, len(batch))
		for i, id := range batch {
			args[i] = int64(min(id, math.MaxInt64))
		}
		rows, err := s.db.QueryContext(ctx, "SELECT id, state, server, epoch FROM jobs WHERE id IN "+valueRows(1, len(batch)), args...)
		if err != nil {
			return nil, fmt.Errorf("store: owners: %w", wrapDB(err))
		}
		err = scanOwners(rows, out)
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("store: owners: %w", err)
		}
	}
	return out, nil
}

func scanOwners(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}, out map[uint64]JobOwner) error {
	for rows.Next() {
		var id, epoch int64
		var o JobOwner
		if err := rows.Scan(&id, &o.State, &o.Server, &epoch); err != nil {
			return err
		}
		o.Epoch = uint64(epoch)
		out[uint64(id)] = o
	}
	return rows.Err()
}

// Owners implements Leases.
func (p *Postgres) Owners(ctx context.Context, ids []uint64) (map[uint64]JobOwner, error) {
	out := make(map[uint64]JobOwner, len(ids))
	arg := make([]int64, len(ids))
	for i, id := range ids {
		arg[i] = int64(min(id, math.MaxInt64))
	}
	rows, err := p.pool.Query(ctx, "SELECT id, state, server, epoch FROM jobs WHERE id = ANY($1)", arg)
	if err != nil {
		return nil, fmt.Errorf("store: owners: %w", p.wrap(err))
	}
	defer rows.Close()
	if err := scanOwners(rows, out); err != nil {
		return nil, fmt.Errorf("store: owners: %w", p.wrap(err))
	}
	return out, nil
}

// Notifier is a store that tells its listeners when a job's state or
// owner changed, or a token or an operation did, anywhere: PostgreSQL's
// LISTEN/NOTIFY. Servers sharing a database wake on it instead of
// waiting for their next poll.
type Notifier interface {
	// Listen calls fn for every change until ctx ends or the connection
	// fails, and returns why. fn gets the job's ID, or 0 for a token or
	// an operation. It must not block.
	Listen(ctx context.Context, fn func(job uint64)) error
}

var _ Notifier = (*Postgres)(nil)

// Notification channels.
const (
	pgJobsChannel = "braid_jobs"
	pgMetaChannel = "braid_meta"
)

// pgNotifyTriggers make every change of a job's state or owner, and of
// a token or an operation, a notification.
const pgNotifyTriggers = `
CREATE OR REPLACE FUNCTION braid_job_changed() RETURNS trigger AS $$
BEGIN
	PERFORM pg_notify('` + pgJobsChannel + `', NEW.id::text);
	RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER jobs_changed AFTER INSERT OR UPDATE OF state, epoch ON jobs
	FOR EACH ROW EXECUTE PROCEDURE braid_job_changed();
CREATE OR REPLACE FUNCTION braid_meta_changed() RETURNS trigger AS $$
BEGIN
	PERFORM pg_notify('` + pgMetaChannel + `', '');
	RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER api_tokens_changed AFTER INSERT OR UPDATE OR DELETE ON api_tokens
	FOR EACH STATEMENT EXECUTE PROCEDURE braid_meta_changed();
CREATE TRIGGER user_ops_changed AFTER INSERT OR UPDATE OR DELETE ON user_ops
	FOR EACH STATEMENT EXECUTE PROCEDURE braid_meta_changed();
`

// Listen implements Notifier on a connection of its own.
func (p *Postgres) Listen(ctx context.Context, fn func(job uint64)) error {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("store: listen: %w", p.wrap(err))
	}
	// The connection leaves the pool: LISTEN is its state, and a pool
	// must not hand it to anyone else.
	c := conn.Hijack()
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "LISTEN "+pgJobsChannel+"; LISTEN "+pgMetaChannel); err != nil {
		return fmt.Errorf("store: listen: %w", p.wrap(err))
	}
	for {
		n, err := c.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("store: listen: %w", p.wrap(err))
		}
		var id uint64
		if n.Channel == pgJobsChannel {
			fmt.Sscan(n.Payload, &id)
		}
		fn(id)
	}
}
