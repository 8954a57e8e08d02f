package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Owners. Every job, pipeline, upload and operation version records who
// made it, as an owner string the server chooses (server/access.go): the
// ID of the token that made it, or "group:NAME" for a token of a group,
// whose tokens share everything. The store only keeps and matches the
// string; it decides nothing. The empty owner is the cluster key's, and
// that of every row written before owners existed (schema 7 on SQLite,
// 2 on PostgreSQL): only admins see those.
//
// Blobs are named by their content, so two owners uploading the same
// bytes share one blob: each has its own upload row, and the blob stays
// while any row (or any other need, BlobKept) remains.

// ownersMigration adds the owner columns common to both stores; each
// store then gives its uploads table an owner in its own dialect.
const ownersMigration = `
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE pipelines ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE user_ops ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN grp TEXT NOT NULL DEFAULT '';
CREATE INDEX jobs_owner ON jobs(owner, id);
`

// where returns the WHERE clause of f, with "?" placeholders, and its
// arguments; "" if f selects every job.
func (f JobFilter) where() (string, []any) {
	switch {
	case f.State != "" && f.Owner != "":
		return "WHERE state = ? AND owner = ?", []any{string(f.State), f.Owner}
	case f.State != "":
		return "WHERE state = ?", []any{string(f.State)}
	case f.Owner != "":
		return "WHERE owner = ?", []any{f.Owner}
	}
	return "", nil
}

// blobVisibleQuery finds a row if owner uploaded blob id or owns a job
// whose input or output it is.
const blobVisibleQuery = `SELECT 1 FROM uploads WHERE id = ? AND owner = ?
	UNION ALL SELECT 1 FROM jobs WHERE owner = ? AND input = ? AND input != ''
	UNION ALL SELECT 1 FROM jobs WHERE owner = ? AND output = ? AND output != ''
	LIMIT 1`

func blobVisibleArgs(id, owner string) []any { return []any{id, owner, owner, id, owner, id} }

// ownedBlobsQuery lists the blobs owner uploaded and the kept outputs
// of its jobs.
const ownedBlobsQuery = `SELECT id FROM uploads WHERE owner = ?
	UNION SELECT output FROM jobs WHERE owner = ? AND output != '' AND expired = 0
	ORDER BY 1`

// BlobVisible reports whether owner uploaded blob id or owns a job whose
// input or output it is.
func (s *SQLite) BlobVisible(ctx context.Context, id, owner string) (bool, error) {
	var one int
	err := s.db.QueryRowContext(ctx, blobVisibleQuery, blobVisibleArgs(id, owner)...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: owner of blob %s: %w", id, wrapDB(err))
	}
	return true, nil
}

// OwnedBlobs returns the IDs of the blobs owner uploaded and of the
// unexpired outputs of its jobs, in order.
func (s *SQLite) OwnedBlobs(ctx context.Context, owner string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, ownedBlobsQuery, owner, owner)
	if err != nil {
		return nil, fmt.Errorf("store: blobs of %q: %w", owner, wrapDB(err))
	}
	return scanStrings(rows, wrapDB)
}

// Uploaders returns the owners that uploaded blob id, in order.
func (s *SQLite) Uploaders(ctx context.Context, id string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT owner FROM uploads WHERE id = ? ORDER BY owner", id)
	if err != nil {
		return nil, fmt.Errorf("store: uploaders of blob %s: %w", id, wrapDB(err))
	}
	return scanStrings(rows, wrapDB)
}

// scanStrings reads every row of one text column and closes rows.
func scanStrings(rows *sql.Rows, wrap func(error) error) ([]string, error) {
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("store: %w", wrap(err))
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: %w", wrap(err))
	}
	return out, nil
}

// BlobVisible implements Meta.
func (p *Postgres) BlobVisible(ctx context.Context, id, owner string) (bool, error) {
	var one int
	err := p.pool.QueryRow(ctx, pg(blobVisibleQuery), blobVisibleArgs(id, owner)...).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: owner of blob %s: %w", id, p.wrap(err))
	}
	return true, nil
}

// OwnedBlobs implements Meta.
func (p *Postgres) OwnedBlobs(ctx context.Context, owner string) ([]string, error) {
	return p.strings(ctx, "blobs of "+owner, pg(ownedBlobsQuery), owner, owner)
}

// Uploaders implements Meta.
func (p *Postgres) Uploaders(ctx context.Context, id string) ([]string, error) {
	return p.strings(ctx, "uploaders of blob "+id, "SELECT owner FROM uploads WHERE id = $1 ORDER BY owner", id)
}

// strings returns the one text column of query's rows; what names them
// in errors.
func (p *Postgres) strings(ctx context.Context, what, query string, args ...any) ([]string, error) {
	rows, err := p.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, p.wrap(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, p.wrap(err))
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}
