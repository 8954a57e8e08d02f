package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The blobs a server must keep, and the outputs it keeps for a while:
// uploads are kept until a client deletes them, outputs until they
// expire, and everything an unfinished job or a listed operation needs.
// A job's other blobs (unit results, tile data) are intermediate: they
// may go when the job ends.

// addUploadQueries are AddUpload's and AddMemberUpload's: the first
// makes an upload alone, the second leaves an upload as it was.
const (
	addUploadQuery       = "INSERT INTO uploads (id, owner, added, alone) VALUES (?, ?, ?, 1) ON CONFLICT (id, owner) DO UPDATE SET alone = 1"
	addMemberUploadQuery = "INSERT INTO uploads (id, owner, added, alone) VALUES (?, ?, ?, 0) ON CONFLICT (id, owner) DO NOTHING"
)

// AddUpload records that owner uploaded blob id on its own, so it is
// kept until the owner deletes it.
func (s *SQLite) AddUpload(ctx context.Context, id, owner string) error {
	if _, err := s.db.ExecContext(ctx, addUploadQuery, id, owner, nanos(s.now())); err != nil {
		return fmt.Errorf("store: add upload %s: %w", id, wrapDB(err))
	}
	return nil
}

// AddMemberUpload implements Meta.
func (s *SQLite) AddMemberUpload(ctx context.Context, id, owner string) error {
	if _, err := s.db.ExecContext(ctx, addMemberUploadQuery, id, owner, nanos(s.now())); err != nil {
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
	kept, err := s.KeptBlobs(ctx, []string{id}, except)
	return kept[id], err
}

// KeptBlobs implements Meta.
func (s *SQLite) KeptBlobs(ctx context.Context, ids []string, except uint64) (map[string]string, error) {
	return s.keptBy(ctx, ids, keptChecks(except))
}

// BusyBlobs implements Meta.
func (s *SQLite) BusyBlobs(ctx context.Context, ids []string) (map[string]string, error) {
	return s.keptBy(ctx, ids, busyChecks())
}

// keptBy returns why each of ids is kept, by the first of checks that
// holds for it, keptBatch ids a query.
func (s *SQLite) keptBy(ctx context.Context, ids []string, checks []keptCheck) (map[string]string, error) {
	kept := map[string]string{}
	for rest := ids; len(rest) > 0; {
		batch := rest[:min(len(rest), keptBatch)]
		rest = rest[len(batch):]
		for _, c := range checks {
			left := make([]any, 0, len(batch)+len(c.args))
			for _, id := range batch {
				if kept[id] == "" {
					left = append(left, id)
				}
			}
			if len(left) == 0 {
				break
			}
			q := "WITH b(id) AS (VALUES " + valueRows(len(left), 1) + ") SELECT b.id FROM b WHERE " + c.cond
			rows, err := s.db.QueryContext(ctx, q, append(left, c.args...)...)
			if err != nil {
				return nil, fmt.Errorf("store: users of blobs: %w", wrapDB(err))
			}
			found, err := scanStrings(rows, wrapDB)
			if err != nil {
				return nil, fmt.Errorf("store: users of blobs: %w", err)
			}
			for _, id := range found {
				kept[id] = c.why
			}
		}
	}
	return kept, nil
}

// keptBatch is how many blobs one query of KeptBlobs asks about.
const keptBatch = 500

// keptCheck is one reason to keep a blob: cond holds, with args, for
// the blob b.id.
type keptCheck struct {
	why, cond string
	args      []any
}

// keptChecks are the reasons BlobKept tries, in order.
func keptChecks(except uint64) []keptCheck {
	return append([]keptCheck{
		{"an upload", "EXISTS (SELECT 1 FROM uploads WHERE id = b.id)", nil},
		{"the output of another job", "EXISTS (SELECT 1 FROM jobs WHERE output = b.id AND expired = 0 AND id != ?)", []any{int64(min(except, 1<<62))}},
		{"a member of a dataset", "EXISTS (SELECT 1 FROM dataset_members m WHERE m.member = b.id AND " + datasetLives + ")", datasetLivesArgs(except)},
	}, append(busyChecks(),
		keptCheck{"an operation's module", "EXISTS (SELECT 1 FROM user_ops WHERE hash = b.id AND removed = 0)", nil})...)
}

// busyChecks are the reasons to keep a blob that an unfinished job
// uses (BusyBlobs).
func busyChecks() []keptCheck {
	unfinished := []any{string(JobQueued), string(JobRunning)}
	return []keptCheck{
		{"the input of an unfinished job", "EXISTS (SELECT 1 FROM jobs WHERE input = b.id AND state IN (?, ?))", unfinished},
		{"data of an unfinished job", `EXISTS (SELECT 1 FROM units u JOIN jobs j ON j.id = u.job WHERE u.blob = b.id AND u.blob != '' AND j.state IN (?, ?))
			OR EXISTS (SELECT 1 FROM units u JOIN jobs j ON j.id = u.job WHERE u.result = b.id AND u.result != '' AND j.state IN (?, ?))`,
			append(slices.Clone(unfinished), unfinished...)},
		{"the module of an unfinished job", `EXISTS (SELECT 1 FROM jobs WHERE state IN (?, ?) AND spec LIKE '%"' || b.id || '"%')`, unfinished},
	}
}

// RemoveMemberUploads implements Meta.
func (s *SQLite) RemoveMemberUploads(ctx context.Context, ids, owners []string) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		for _, o := range owners {
			for rest := ids; len(rest) > 0; {
				batch := rest[:min(len(rest), keptBatch)]
				rest = rest[len(batch):]
				args := make([]any, 0, len(batch)+1)
				args = append(args, o)
				for _, id := range batch {
					args = append(args, id)
				}
				q := "DELETE FROM uploads WHERE alone = 0 AND owner = ? AND id IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(batch)), ", ") + ")"
				if _, err := tx.ExecContext(ctx, q, args...); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: remove %d uploads: %w", len(ids), err)
	}
	return nil
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
