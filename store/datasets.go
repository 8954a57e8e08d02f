package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Datasets. A dataset is a blob, its manifest, that lists other blobs,
// its members (the server reads and writes manifests; the store never
// does). The store keeps an index of (dataset, member) pairs, written
// when a dataset is made (an upload) or a job writes one as its output,
// so that deciding whether a blob is still needed (BlobKept,
// KeptOutputs) does not read manifests: a member is kept while a
// dataset that lists it lives, that is while it is an upload, the
// unexpired output of a job, or the input of an unfinished job. Rows of
// datasets that no longer live change nothing; the server removes them
// with the manifest (RemoveDataset). The index is also what makes a blob
// a dataset: the server takes as one only a blob that has rows, never
// one whose bytes merely look like a manifest (server/dataset.go).
//
// Datasets made before the index (schema 8 on SQLite, 3 on PostgreSQL)
// had no rows. The next migration (schema 10 on SQLite, 5 on
// PostgreSQL) lists every blob that may be one of them in
// dataset_backfill: the uploads, the unexpired outputs and the inputs of
// unfinished jobs that have no rows yet. The server reads each one's
// manifest, if it is one that an uploader of it, or the owner of a job
// whose output it is, may read every member of (a client's upload or
// job output that looks like a manifest of another owner's blobs is no
// dataset), and records its members and that it is
// done with it in one step (IndexDataset), a few at a time, so the work
// resumes where it stopped after a restart (server/backfill.go).

// The index also records each dataset's creator (schema 11 on SQLite,
// 6 on PostgreSQL): the owner who made it (makeDataset), whose job
// assembled it, or whose upload or job output the backfill found it as;
// "" for an admin's, and for the rows from before. The same migration
// lists again for the backfill the unexpired outputs of jobs that are
// not indexed: the backfill before it left them out (which of them the
// server assembled could not be told), and now indexes one whose job's
// owner may read every member, with that owner as creator.

// creatorMigration adds the creator to the index and lists the outputs
// to look at again.
const creatorMigration = `
ALTER TABLE dataset_members ADD COLUMN creator TEXT NOT NULL DEFAULT '';
INSERT INTO dataset_backfill (id)
	SELECT output FROM jobs WHERE output != '' AND expired = 0
	EXCEPT SELECT dataset FROM dataset_members
	EXCEPT SELECT id FROM dataset_backfill;
`

// datasetMigration is the index of members, with the dialect's suffix
// for a table without a rowid (SQLite) or none.
func datasetMigration(tableSuffix string) string {
	return `
CREATE TABLE dataset_members (
	dataset TEXT NOT NULL,
	member  TEXT NOT NULL,
	PRIMARY KEY (dataset, member)
)` + tableSuffix + `;
CREATE INDEX dataset_members_member ON dataset_members(member);
`
}

// datasetLives is the condition, on a row m of dataset_members, that
// its dataset lives: an upload, the unexpired output of a job other than
// the one given (0 for none), or the input of an unfinished job. Its
// arguments are datasetLivesArgs.
const datasetLives = `(EXISTS (SELECT 1 FROM uploads u WHERE u.id = m.dataset)
	OR EXISTS (SELECT 1 FROM jobs j WHERE j.output = m.dataset AND j.output != '' AND j.expired = 0 AND j.id != ?)
	OR EXISTS (SELECT 1 FROM jobs j WHERE j.input = m.dataset AND j.input != '' AND j.state IN (?, ?)))`

func datasetLivesArgs(except uint64) []any {
	return []any{int64(min(except, 1<<62)), string(JobQueued), string(JobRunning)}
}

// memberKeptQuery finds a row if blob (the first argument) is a member
// of a dataset that lives.
const memberKeptQuery = "SELECT 1 FROM dataset_members m WHERE m.member = ? AND " + datasetLives + " LIMIT 1"

// livingDatasetsQuery lists the datasets that live and list a member.
const livingDatasetsQuery = "SELECT m.dataset FROM dataset_members m WHERE m.member = ? AND " + datasetLives + " ORDER BY 1"

// keptOutputsQuery finds the done jobs whose unexpired output is a blob
// or a dataset that lists it; its arguments are the blob and JobDone,
// twice.
const keptOutputsQuery = `SELECT id FROM jobs WHERE output = ? AND state = ? AND expired = 0
	UNION SELECT j.id FROM dataset_members m JOIN jobs j ON j.output = m.dataset
		WHERE m.member = ? AND j.output != '' AND j.state = ? AND j.expired = 0
	ORDER BY 1`

func keptOutputsArgs(blob string) []any {
	return []any{blob, string(JobDone), blob, string(JobDone)}
}

// backfillMigration lists the blobs that may be datasets made before
// the index, with the dialect's table suffix, and tells uploads made on
// their own from those made as members of a dataset (AddMemberUpload),
// with its integer type: rows from before count as members' (alone 0),
// which a dataset's deletion removes, as before.
func backfillMigration(tableSuffix, intType string) string {
	return `
ALTER TABLE uploads ADD COLUMN alone ` + intType + ` NOT NULL DEFAULT 0;
CREATE TABLE dataset_backfill (id TEXT PRIMARY KEY)` + tableSuffix + `;
INSERT INTO dataset_backfill (id)
	SELECT id FROM uploads
	UNION SELECT output FROM jobs WHERE output != '' AND expired = 0
	UNION SELECT input FROM jobs WHERE input != '' AND state IN ('queued', 'running')
	EXCEPT SELECT dataset FROM dataset_members;
`
}

// memberRowsBatch is how many (dataset, member) rows one SQLite INSERT
// carries.
const memberRowsBatch = 400

// AddDataset records that dataset, made by creator, lists members (blob
// IDs), so that each is kept while the dataset lives. Adding a pair
// twice is no error.
func (s *SQLite) AddDataset(ctx context.Context, dataset, creator string, members []string) error {
	err := s.tx(ctx, func(tx *sql.Tx) error { return insertMembers(ctx, tx, dataset, creator, members) })
	if err != nil {
		return fmt.Errorf("store: add dataset %s: %w", dataset, err)
	}
	return nil
}

func insertMembers(ctx context.Context, tx *sql.Tx, dataset, creator string, members []string) error {
	for rest := members; len(rest) > 0; {
		n := min(len(rest), memberRowsBatch)
		args := make([]any, 0, 3*n)
		for _, m := range rest[:n] {
			args = append(args, dataset, m, creator)
		}
		q := "INSERT OR IGNORE INTO dataset_members (dataset, member, creator) VALUES " + valueRows(n, 3)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

// UnindexedDatasets implements Meta.
func (s *SQLite) UnindexedDatasets(ctx context.Context, after string, limit int) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT id FROM dataset_backfill WHERE id > ? ORDER BY id LIMIT ?", after, limit)
	if err != nil {
		return nil, fmt.Errorf("store: datasets to index: %w", wrapDB(err))
	}
	return scanStrings(rows, wrapDB)
}

// IndexDataset implements Meta.
func (s *SQLite) IndexDataset(ctx context.Context, id, creator string, members []string) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if err := insertMembers(ctx, tx, id, creator, members); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "DELETE FROM dataset_backfill WHERE id = ?", id)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: index dataset %s: %w", id, err)
	}
	return nil
}

// DatasetMembers returns the members recorded for dataset, in order.
func (s *SQLite) DatasetMembers(ctx context.Context, dataset string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT member FROM dataset_members WHERE dataset = ? ORDER BY member", dataset)
	if err != nil {
		return nil, fmt.Errorf("store: members of dataset %s: %w", dataset, wrapDB(err))
	}
	return scanStrings(rows, wrapDB)
}

// DatasetCreator implements Meta.
func (s *SQLite) DatasetCreator(ctx context.Context, dataset string) (string, error) {
	var c string
	err := s.db.QueryRowContext(ctx, datasetCreatorQuery, dataset).Scan(&c)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("store: creator of dataset %s: no dataset indexed: %w", dataset, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store: creator of dataset %s: %w", dataset, wrapDB(err))
	}
	return c, nil
}

// datasetCreatorQuery reads a dataset's creator: the least of its rows'
// (they agree unless the dataset was recorded twice by different owners).
const datasetCreatorQuery = "SELECT creator FROM dataset_members WHERE dataset = ? ORDER BY creator LIMIT 1"

// OutputJobs implements Meta.
func (s *SQLite) OutputJobs(ctx context.Context, id string) ([]uint64, error) {
	rows, err := s.db.QueryContext(ctx, outputJobsQuery, id)
	if err != nil {
		return nil, fmt.Errorf("store: the jobs with output %s: %w", id, wrapDB(err))
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var j int64
		if err := rows.Scan(&j); err != nil {
			return nil, fmt.Errorf("store: the jobs with output %s: %w", id, wrapDB(err))
		}
		out = append(out, uint64(j))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: the jobs with output %s: %w", id, wrapDB(err))
	}
	return out, nil
}

// outputJobsQuery lists the jobs whose unexpired output is a blob.
const outputJobsQuery = "SELECT id FROM jobs WHERE output = ? AND expired = 0 ORDER BY id"

// DatasetsOf returns the datasets that live and list blob member, in
// order.
func (s *SQLite) DatasetsOf(ctx context.Context, member string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, livingDatasetsQuery, append([]any{member}, datasetLivesArgs(0)...)...)
	if err != nil {
		return nil, fmt.Errorf("store: datasets of blob %s: %w", member, wrapDB(err))
	}
	return scanStrings(rows, wrapDB)
}

// RemoveDataset forgets the members of dataset (its manifest is gone).
func (s *SQLite) RemoveDataset(ctx context.Context, dataset string) error {
	if _, err := s.db.ExecContext(ctx, "DELETE FROM dataset_members WHERE dataset = ?", dataset); err != nil {
		return fmt.Errorf("store: remove dataset %s: %w", dataset, wrapDB(err))
	}
	return nil
}

// pgInsertMembers records the members $2 of dataset $1, made by $3, on
// PostgreSQL.
const pgInsertMembers = `INSERT INTO dataset_members (dataset, member, creator) SELECT $1, unnest($2::text[]), $3
	ON CONFLICT (dataset, member) DO NOTHING`

// AddDataset implements Meta.
func (p *Postgres) AddDataset(ctx context.Context, dataset, creator string, members []string) error {
	_, err := p.pool.Exec(ctx, pgInsertMembers, dataset, members, creator)
	if err != nil {
		return fmt.Errorf("store: add dataset %s: %w", dataset, p.wrap(err))
	}
	return nil
}

// UnindexedDatasets implements Meta.
func (p *Postgres) UnindexedDatasets(ctx context.Context, after string, limit int) ([]string, error) {
	return p.strings(ctx, "datasets to index", "SELECT id FROM dataset_backfill WHERE id > $1 ORDER BY id LIMIT $2", after, limit)
}

// IndexDataset implements Meta.
func (p *Postgres) IndexDataset(ctx context.Context, id, creator string, members []string) error {
	err := p.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, pgInsertMembers, id, members, creator); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM dataset_backfill WHERE id = $1", id)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: index dataset %s: %w", id, err)
	}
	return nil
}

// DatasetMembers implements Meta.
func (p *Postgres) DatasetMembers(ctx context.Context, dataset string) ([]string, error) {
	return p.strings(ctx, "members of dataset "+dataset, "SELECT member FROM dataset_members WHERE dataset = $1 ORDER BY member", dataset)
}

// DatasetCreator implements Meta.
func (p *Postgres) DatasetCreator(ctx context.Context, dataset string) (string, error) {
	var c string
	err := p.pool.QueryRow(ctx, pg(datasetCreatorQuery), dataset).Scan(&c)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("store: creator of dataset %s: no dataset indexed: %w", dataset, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store: creator of dataset %s: %w", dataset, p.wrap(err))
	}
	return c, nil
}

// OutputJobs implements Meta.
func (p *Postgres) OutputJobs(ctx context.Context, id string) ([]uint64, error) {
	rows, err := p.pool.Query(ctx, pg(outputJobsQuery), id)
	if err != nil {
		return nil, fmt.Errorf("store: the jobs with output %s: %w", id, p.wrap(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("store: the jobs with output %s: %w", id, p.wrap(err))
	}
	out := make([]uint64, len(ids))
	for i, j := range ids {
		out[i] = uint64(j)
	}
	return out, nil
}

// DatasetsOf implements Meta.
func (p *Postgres) DatasetsOf(ctx context.Context, member string) ([]string, error) {
	return p.strings(ctx, "datasets of blob "+member, pg(livingDatasetsQuery), append([]any{member}, datasetLivesArgs(0)...)...)
}

// RemoveDataset implements Meta.
func (p *Postgres) RemoveDataset(ctx context.Context, dataset string) error {
	if _, err := p.pool.Exec(ctx, "DELETE FROM dataset_members WHERE dataset = $1", dataset); err != nil {
		return fmt.Errorf("store: remove dataset %s: %w", dataset, p.wrap(err))
	}
	return nil
}
