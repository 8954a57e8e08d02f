package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The records of Postgres besides jobs and units: workers, tokens, user
// operations, pipelines, uploads and retention, timelines and tries.

// RegisterWorker implements Jobs. A new worker's ID comes from the
// workers' sequence, so servers sharing the database never hand out the
// same one.
func (p *Postgres) RegisterWorker(ctx context.Context, w Worker) (Worker, error) {
	now := nanos(p.now())
	var out Worker
	err := p.tx(ctx, func(tx pgx.Tx) error {
		id := w.ID
		if id == "" {
			err := tx.QueryRow(ctx, `INSERT INTO workers (seq, id, name, addresses, cores, memory, disk, cpu_mhz,
				threads, ops, registered, last_seen)
				VALUES (nextval('workers_seq_seq'), 'w' || currval('workers_seq_seq'), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
				RETURNING id`,
				w.Name, toJSON(w.Addresses), w.Cores, w.Memory, w.Disk, w.CPUMHz, w.Threads, toJSON(w.Ops), now, now).Scan(&id)
			if err != nil {
				return err
			}
		} else {
			tag, err := tx.Exec(ctx, `UPDATE workers SET name = $1, addresses = $2, cores = $3, memory = $4, disk = $5,
				cpu_mhz = $6, threads = $7, ops = $8, last_seen = $9 WHERE id = $10`,
				w.Name, toJSON(w.Addresses), w.Cores, w.Memory, w.Disk, w.CPUMHz, w.Threads, toJSON(w.Ops), now, w.ID)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("worker %s: %w", w.ID, ErrNotFound)
			}
		}
		var err error
		out, err = scanWorker(tx.QueryRow(ctx, "SELECT "+workerColumns+" FROM workers WHERE id = $1", id))
		return err
	})
	if err != nil {
		return Worker{}, fmt.Errorf("store: register worker: %w", err)
	}
	return out, nil
}

// Heartbeats implements Jobs: one statement for the whole batch. A
// worker has an ID per server it registered with, so the batches of two
// servers never update the same rows.
func (p *Postgres) Heartbeats(ctx context.Context, beats []Beat) (int, error) {
	if len(beats) == 0 {
		return 0, nil
	}
	ids, running, queued, load := make([]string, len(beats)), make([]int64, len(beats)), make([]int64, len(beats)), make([]float64, len(beats))
	for i, b := range beats {
		ids[i], running[i], queued[i], load[i] = b.Worker, int64(b.Running), int64(b.Queued), b.Load
	}
	tag, err := p.pool.Exec(ctx, `UPDATE workers AS w SET last_seen = $1, running = b.running, queued = b.queued, load = b.load
		FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::float8[]) AS b(id, running, queued, load)
		WHERE w.id = b.id`, nanos(p.now()), ids, running, queued, load)
	if err != nil {
		return 0, fmt.Errorf("store: heartbeats of %d workers: %w", len(beats), p.wrap(err))
	}
	return int(tag.RowsAffected()), nil
}

// Worker implements Jobs.
func (p *Postgres) Worker(ctx context.Context, id string) (Worker, error) {
	w, err := scanWorker(p.pool.QueryRow(ctx, "SELECT "+workerColumns+" FROM workers WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Worker{}, fmt.Errorf("store: worker %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Worker{}, fmt.Errorf("store: worker %s: %w", id, p.wrap(err))
	}
	return w, nil
}

// Workers implements Jobs.
func (p *Postgres) Workers(ctx context.Context) ([]Worker, error) {
	rows, err := p.pool.Query(ctx, "SELECT "+workerColumns+" FROM workers ORDER BY seq")
	if err != nil {
		return nil, fmt.Errorf("store: workers: %w", p.wrap(err))
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
	return out, p.wrap(rows.Err())
}

// DeleteWorker implements Jobs.
func (p *Postgres) DeleteWorker(ctx context.Context, id string) error {
	tag, err := p.pool.Exec(ctx, "DELETE FROM workers WHERE id = $1", id)
	if err != nil {
		return fmt.Errorf("store: delete worker %s: %w", id, p.wrap(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: delete worker %s: %w", id, ErrNotFound)
	}
	return nil
}

// AddToken implements Meta. Two servers adding the same name at once:
// the unique keys refuse the second with ErrConflict.
func (p *Postgres) AddToken(ctx context.Context, t Token) (Token, error) {
	t.Created, t.LastUsed, t.Revoked = p.now().UTC(), time.Time{}, time.Time{}
	err := p.tx(ctx, func(tx pgx.Tx) error {
		var n int
		err := tx.QueryRow(ctx, "SELECT COUNT(*) FROM api_tokens WHERE id = $1 OR hash = $2 OR name = $3",
			t.ID, t.Hash, t.Name).Scan(&n)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("a token named %q or with the same id exists: %w", t.Name, ErrConflict)
		}
		_, err = tx.Exec(ctx, "INSERT INTO api_tokens ("+tokenColumns+") VALUES ($1, $2, $3, $4, $5, 0, 0, $6)",
			t.ID, t.Hash, t.Name, t.Role, nanos(t.Created), t.Group)
		return err
	})
	if err != nil {
		return Token{}, fmt.Errorf("store: add token: %w", err)
	}
	return t, nil
}

// Tokens implements Meta.
func (p *Postgres) Tokens(ctx context.Context) ([]Token, error) {
	rows, err := p.pool.Query(ctx, "SELECT "+tokenColumns+" FROM api_tokens ORDER BY created, id")
	if err != nil {
		return nil, fmt.Errorf("store: tokens: %w", p.wrap(err))
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("store: tokens: %w", p.wrap(err))
		}
		out = append(out, t)
	}
	return out, p.wrap(rows.Err())
}

// RevokeToken implements Meta.
func (p *Postgres) RevokeToken(ctx context.Context, ref string) (Token, error) {
	var t Token
	err := p.tx(ctx, func(tx pgx.Tx) error {
		var err error
		t, err = scanToken(tx.QueryRow(ctx, "SELECT "+tokenColumns+
			" FROM api_tokens WHERE id = $1 OR name = $1 ORDER BY id = $1 DESC LIMIT 1 FOR UPDATE", ref))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("no token with id or name %q: %w", ref, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if !t.Revoked.IsZero() {
			return fmt.Errorf("token %s (%s) was revoked at %s: %w", t.ID, t.Name, t.Revoked.Format(time.RFC3339), ErrConflict)
		}
		t.Revoked = p.now().UTC()
		_, err = tx.Exec(ctx, "UPDATE api_tokens SET revoked = $1 WHERE id = $2", nanos(t.Revoked), t.ID)
		return err
	})
	if err != nil {
		return Token{}, fmt.Errorf("store: revoke token: %w", err)
	}
	return t, nil
}

// TouchToken implements Meta.
func (p *Postgres) TouchToken(ctx context.Context, id string, at time.Time) error {
	_, err := p.pool.Exec(ctx, "UPDATE api_tokens SET last_used = $1 WHERE id = $2 AND last_used < $1", nanos(at), id)
	if err != nil {
		return fmt.Errorf("store: token %s used: %w", id, p.wrap(err))
	}
	return nil
}

// userOpsLock is the advisory lock key that orders the versions of user
// operations added by several servers at once.
const userOpsLock = 0x62726169640002

// AddOp implements Meta.
func (p *Postgres) AddOp(ctx context.Context, op UserOp) (UserOp, error) {
	op.Added = p.now().UTC()
	if op.Params == nil {
		op.Params = []UserParam{}
	}
	err := p.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(userOpsLock)); err != nil {
			return err
		}
		var v int
		if err := tx.QueryRow(ctx, "SELECT COALESCE(MAX(version), 0) FROM user_ops WHERE name = $1", op.Name).Scan(&v); err != nil {
			return err
		}
		op.Version = v + 1
		_, err := tx.Exec(ctx, `INSERT INTO user_ops (name, version, hash, size, doc, split, merge, params, added, owner)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, op.Name, op.Version, op.Hash, op.Size, op.Doc, op.Split, op.Merge,
			toJSON(op.Params), nanos(op.Added), op.Owner)
		return err
	})
	if err != nil {
		return UserOp{}, fmt.Errorf("store: add operation %s: %w", op.Name, err)
	}
	return op, nil
}

// Ops implements Meta.
func (p *Postgres) Ops(ctx context.Context) ([]UserOp, error) {
	rows, err := p.pool.Query(ctx, opsQuery)
	if err != nil {
		return nil, fmt.Errorf("store: operations: %w", p.wrap(err))
	}
	defer rows.Close()
	var out []UserOp
	for rows.Next() {
		op, err := scanOp(rows)
		if err != nil {
			return nil, fmt.Errorf("store: operations: %w", err)
		}
		out = append(out, op)
	}
	return out, p.wrap(rows.Err())
}

// RemoveOp implements Meta.
func (p *Postgres) RemoveOp(ctx context.Context, name string) error {
	tag, err := p.pool.Exec(ctx, "UPDATE user_ops SET removed = $1 WHERE name = $2 AND removed = 0", nanos(p.now()), name)
	if err != nil {
		return fmt.Errorf("store: remove operation: %w", p.wrap(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: remove operation: operation %q: %w", name, ErrNotFound)
	}
	return nil
}

// ModuleUsed implements Meta.
func (p *Postgres) ModuleUsed(ctx context.Context, hash string) (bool, error) {
	var n int
	if err := p.pool.QueryRow(ctx, pg(moduleUsedQuery), hash).Scan(&n); err != nil {
		return false, fmt.Errorf("store: module users: %w", p.wrap(err))
	}
	return n > 0, nil
}

// IsModule implements Meta.
func (p *Postgres) IsModule(ctx context.Context, hash string) (bool, error) {
	var n int
	if err := p.pool.QueryRow(ctx, "SELECT COUNT(*) FROM user_ops WHERE hash = $1", hash).Scan(&n); err != nil {
		return false, fmt.Errorf("store: module %s: %w", hash, p.wrap(err))
	}
	return n > 0, nil
}

// CreatePipeline implements Meta.
func (p *Postgres) CreatePipeline(ctx context.Context, pl Pipeline) (Pipeline, error) {
	pl.Submitted = p.now().UTC()
	var id int64
	err := p.pool.QueryRow(ctx, "INSERT INTO pipelines (name, steps, submitted, owner) VALUES ($1, $2, $3, $4) RETURNING id",
		pl.Name, toJSON(pl.Steps), nanos(pl.Submitted), pl.Owner).Scan(&id)
	if err != nil {
		return Pipeline{}, fmt.Errorf("store: create pipeline: %w", p.wrap(err))
	}
	pl.ID = uint64(id)
	return pl, nil
}

// SetPipelineSteps implements Meta.
func (p *Postgres) SetPipelineSteps(ctx context.Context, id uint64, steps []PipelineStep) error {
	if _, err := p.pool.Exec(ctx, "UPDATE pipelines SET steps = $1 WHERE id = $2", toJSON(steps), int64(min(id, math.MaxInt64))); err != nil {
		return fmt.Errorf("store: pipeline %d: %w", id, p.wrap(err))
	}
	return nil
}

// Pipeline implements Meta.
func (p *Postgres) Pipeline(ctx context.Context, id uint64) (Pipeline, error) {
	pl, err := scanPipeline(p.pool.QueryRow(ctx, "SELECT id, name, steps, submitted, owner FROM pipelines WHERE id = $1",
		int64(min(id, math.MaxInt64))))
	if errors.Is(err, pgx.ErrNoRows) {
		return Pipeline{}, fmt.Errorf("store: pipeline %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Pipeline{}, fmt.Errorf("store: pipeline %d: %w", id, p.wrap(err))
	}
	return pl, nil
}

// AddUpload implements Meta.
func (p *Postgres) AddUpload(ctx context.Context, id, owner string) error {
	if _, err := p.pool.Exec(ctx, pg(addUploadQuery), id, owner, nanos(p.now())); err != nil {
		return fmt.Errorf("store: add upload %s: %w", id, p.wrap(err))
	}
	return nil
}

// AddMemberUpload implements Meta.
func (p *Postgres) AddMemberUpload(ctx context.Context, id, owner string) error {
	if _, err := p.pool.Exec(ctx, pg(addMemberUploadQuery), id, owner, nanos(p.now())); err != nil {
		return fmt.Errorf("store: add upload %s: %w", id, p.wrap(err))
	}
	return nil
}

// RemoveUpload implements Meta.
func (p *Postgres) RemoveUpload(ctx context.Context, id, owner string) error {
	if _, err := p.pool.Exec(ctx, "DELETE FROM uploads WHERE id = $1 AND owner = $2", id, owner); err != nil {
		return fmt.Errorf("store: remove upload %s: %w", id, p.wrap(err))
	}
	return nil
}

// BlobKept implements Meta.
func (p *Postgres) BlobKept(ctx context.Context, id string, except uint64) (string, error) {
	kept, err := p.KeptBlobs(ctx, []string{id}, except)
	return kept[id], err
}

// KeptBlobs implements Meta.
func (p *Postgres) KeptBlobs(ctx context.Context, ids []string, except uint64) (map[string]string, error) {
	return p.keptBy(ctx, ids, keptChecks(except))
}

// BusyBlobs implements Meta.
func (p *Postgres) BusyBlobs(ctx context.Context, ids []string) (map[string]string, error) {
	return p.keptBy(ctx, ids, busyChecks())
}

// keptBy is SQLite.keptBy: the ids travel as one array a check.
func (p *Postgres) keptBy(ctx context.Context, ids []string, checks []keptCheck) (map[string]string, error) {
	kept := map[string]string{}
	left := slices.Clone(ids)
	for _, c := range checks {
		if len(left) == 0 {
			break
		}
		q := pg("WITH b(id) AS (SELECT unnest(CAST(? AS TEXT[]))) SELECT b.id FROM b WHERE " + c.cond)
		found, err := p.strings(ctx, "users of blobs", q, append([]any{left}, c.args...)...)
		if err != nil {
			return nil, err
		}
		for _, id := range found {
			kept[id] = c.why
		}
		left = slices.DeleteFunc(left, func(id string) bool { return kept[id] != "" })
	}
	return kept, nil
}

// RemoveMemberUploads implements Meta.
func (p *Postgres) RemoveMemberUploads(ctx context.Context, ids, owners []string) error {
	if _, err := p.pool.Exec(ctx, "DELETE FROM uploads WHERE alone = 0 AND id = ANY($1) AND owner = ANY($2)", ids, owners); err != nil {
		return fmt.Errorf("store: remove %d uploads: %w", len(ids), p.wrap(err))
	}
	return nil
}

// DueOutputs implements Meta.
func (p *Postgres) DueOutputs(ctx context.Context, t time.Time, limit int) ([]Job, error) {
	return p.jobs(ctx, "WHERE state = ? AND finished < ? AND expired = 0 AND output != '' ORDER BY finished LIMIT ?",
		string(JobDone), nanos(t), limit)
}

// ExpireOutput implements Meta.
func (p *Postgres) ExpireOutput(ctx context.Context, id uint64) error {
	if _, err := p.pool.Exec(ctx, "UPDATE jobs SET expired = $1 WHERE id = $2 AND expired = 0", nanos(p.now()), int64(min(id, 1<<62))); err != nil {
		return fmt.Errorf("store: expire the output of job %d: %w", id, p.wrap(err))
	}
	return nil
}

// ExpiredOutput implements Meta.
func (p *Postgres) ExpiredOutput(ctx context.Context, id string) (Job, error) {
	jobs, err := p.jobs(ctx, "WHERE output = ? AND expired != 0 ORDER BY id DESC LIMIT 1", id)
	if err != nil {
		return Job{}, err
	}
	if len(jobs) == 0 {
		return Job{}, fmt.Errorf("store: expired output %s: %w", id, ErrNotFound)
	}
	return jobs[0], nil
}

// SaveTimeline implements Meta.
func (p *Postgres) SaveTimeline(ctx context.Context, job uint64, data []byte) error {
	if len(data) > MaxTimeline {
		return fmt.Errorf("store: timeline of job %d: %d bytes, limit %d", job, len(data), MaxTimeline)
	}
	id, err := id64(job, "job")
	if err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, `INSERT INTO timelines (job, data) VALUES ($1, $2)
		ON CONFLICT (job) DO UPDATE SET data = excluded.data`, id, data); err != nil {
		return fmt.Errorf("store: saving the timeline of job %d: %w", job, p.wrap(err))
	}
	return nil
}

// Timeline implements Meta.
func (p *Postgres) Timeline(ctx context.Context, job uint64) ([]byte, error) {
	id, err := id64(job, "job")
	if err != nil {
		return nil, err
	}
	var data []byte
	err = p.pool.QueryRow(ctx, "SELECT data FROM timelines WHERE job = $1", id).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: no timeline of job %d: %w", job, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: the timeline of job %d: %w", job, p.wrap(err))
	}
	return data, nil
}

// SaveTries implements Meta.
func (p *Postgres) SaveTries(ctx context.Context, job uint64, tries []UnitTries) error {
	if len(tries) == 0 {
		return nil
	}
	ids := make([]int64, len(tries))
	fails := make([]int64, len(tries))
	lost := make([]int64, len(tries))
	errs := make([]string, len(tries))
	for i, t := range tries {
		ids[i], fails[i], lost[i], errs[i] = int64(min(t.Unit, math.MaxInt64)), int64(t.Fails), int64(t.Lost), t.Error
	}
	_, err := p.pool.Exec(ctx, `UPDATE units SET fails = t.fails, lost = t.lost,
		error = CASE WHEN t.error = '' THEN units.error ELSE t.error END
		FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::text[]) AS t(id, fails, lost, error)
		WHERE units.job = $1 AND units.id = t.id`, int64(min(job, math.MaxInt64)), ids, fails, lost, errs)
	if err != nil {
		return fmt.Errorf("store: recording the tries of job %d's units: %w", job, p.wrap(err))
	}
	return nil
}

// Tries implements Meta.
func (p *Postgres) Tries(ctx context.Context, job uint64, limit int) ([]UnitTries, int, error) {
	var total int
	j := int64(min(job, math.MaxInt64))
	err := p.pool.QueryRow(ctx, "SELECT COUNT(*) FROM units WHERE job = $1 AND (fails > 0 OR lost > 0)", j).Scan(&total)
	if err != nil {
		return nil, 0, fmt.Errorf("store: tries of job %d's units: %w", job, p.wrap(err))
	}
	if total == 0 || limit <= 0 {
		return nil, total, nil
	}
	rows, err := p.pool.Query(ctx, `SELECT id, fails, lost, error FROM units
		WHERE job = $1 AND (fails > 0 OR lost > 0) ORDER BY id LIMIT $2`, j, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("store: tries of job %d's units: %w", job, p.wrap(err))
	}
	defer rows.Close()
	var out []UnitTries
	for rows.Next() {
		var t UnitTries
		var id int64
		if err := rows.Scan(&id, &t.Fails, &t.Lost, &t.Error); err != nil {
			return nil, 0, fmt.Errorf("store: tries of job %d's units: %w", job, p.wrap(err))
		}
		t.Unit = uint64(id)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("store: tries of job %d's units: %w", job, p.wrap(err))
	}
	return out, total, nil
}
