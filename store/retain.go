package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The blobs a server must keep, and the outputs it keeps for a while:
// uploads are kept until a client deletes them, outputs until they
// expire, and everything an unfinished job or a listed operation needs.
// A job's other blobs (unit results, tile data) are intermediate: they
// may go when the job ends.

// AddUpload records that owner uploaded blob id, so it is kept until
// the owner deletes it.
func (s *SQLite) AddUpload(ctx context.Context, id, owner string) error {
	_, err := s.db.ExecContext(ctx, "INSERT OR IGNORE INTO uploads (id, owner, added) VALUES (?, ?, ?)", id, owner, nanos(s.now()))
	if err != nil {
		return fmt.Errorf("store: add upload %s: %w", id, wrapDB(err))
	}
	return nil
}

// RemoveUpload forgets owner's upload of blob id (the owner deleted it).
func (s *SQLite) RemoveUpload(ctx context.Context, id, owner string) error {
	if _, err := s.db.ExecContext(ctx, "DELETE FROM uploads WHERE id = ? AND owner = ?", id, owner); err != nil {
		return fmt.Errorf("store: remove upload %s: %w", id, wrapDB(err))
	}
	return nil
}

// BlobKept says why blob id must be kept, or returns "" if nothing
// needs it: it is an upload, the unexpired output of a job other than
// except, a member of a dataset that lives (datasets.go; not counting
// except's output), data of an unfinished job, or a listed operation's
// module.
func (s *SQLite) BlobKept(ctx context.Context, id string, except uint64) (string, error) {
	for _, c := range keptChecks(id, except) {
		var one int
		err := s.db.QueryRowContext(ctx, c.query, c.args...).Scan(&one)
		if err == nil {
			return c.why, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("store: users of blob %s: %w", id, wrapDB(err))
		}
	}
	return "", nil
}

// keptCheck is one reason to keep a blob: query finds a row if it holds.
type keptCheck struct {
	why, query string
	args       []any
}

// keptChecks are the reasons BlobKept tries, in order.
func keptChecks(id string, except uint64) []keptCheck {
	return []keptCheck{
		{"an upload", "SELECT 1 FROM uploads WHERE id = ?", []any{id}},
		{"the output of another job", "SELECT 1 FROM jobs WHERE output = ? AND expired = 0 AND id != ? LIMIT 1", []any{id, int64(min(except, 1<<62))}},
		{"a member of a dataset", memberKeptQuery, append([]any{id}, datasetLivesArgs(except)...)},
		{"the input of an unfinished job", "SELECT 1 FROM jobs WHERE input = ? AND state IN (?, ?) LIMIT 1", []any{id, string(JobQueued), string(JobRunning)}},
		{"data of an unfinished job", `SELECT 1 FROM units u JOIN jobs j ON j.id = u.job WHERE (u.blob = ? OR u.result = ?)
			AND j.state IN (?, ?) LIMIT 1`, []any{id, id, string(JobQueued), string(JobRunning)}},
		{"the module of an unfinished job", "SELECT 1 FROM jobs WHERE state IN (?, ?) AND spec LIKE ? LIMIT 1", []any{string(JobQueued), string(JobRunning), "%\"" + id + "\"%"}},
		{"an operation's module", "SELECT 1 FROM user_ops WHERE hash = ? AND removed = 0 LIMIT 1", []any{id}},
	}
}

// KeptOutputs implements Meta.
func (s *SQLite) KeptOutputs(ctx context.Context, blob string) ([]uint64, error) {
	rows, err := s.db.QueryContext(ctx, keptOutputsQuery, keptOutputsArgs(blob)...)
	if err != nil {
		return nil, fmt.Errorf("store: jobs keeping blob %s: %w", blob, wrapDB(err))
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
	return out, wrapDB(rows.Err())
}

// DueOutputs returns up to limit done jobs that finished before t and
// whose output is not expired yet, oldest first.
func (s *SQLite) DueOutputs(ctx context.Context, t time.Time, limit int) ([]Job, error) {
	return s.jobs(ctx, "WHERE state = ? AND finished < ? AND expired = 0 AND output != '' ORDER BY finished LIMIT ?",
		JobDone, nanos(t), limit)
}

// ExpireOutput records that job id's output was removed.
func (s *SQLite) ExpireOutput(ctx context.Context, id uint64) error {
	if _, err := s.db.ExecContext(ctx, "UPDATE jobs SET expired = ? WHERE id = ? AND expired = 0", nanos(s.now()), int64(min(id, 1<<62))); err != nil {
		return fmt.Errorf("store: expire the output of job %d: %w", id, wrapDB(err))
	}
	return nil
}

// ExpiredOutput returns the newest job whose output was blob id and
// expired. ErrNotFound if there is none.
func (s *SQLite) ExpiredOutput(ctx context.Context, id string) (Job, error) {
	jobs, err := s.jobs(ctx, "WHERE output = ? AND expired != 0 ORDER BY id DESC LIMIT 1", id)
	if err != nil {
		return Job{}, err
	}
	if len(jobs) == 0 {
		return Job{}, fmt.Errorf("store: expired output %s: %w", id, ErrNotFound)
	}
	return jobs[0], nil
}
