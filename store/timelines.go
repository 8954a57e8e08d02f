package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// MaxTimeline bounds what SaveTimeline keeps of one job. The server
// keeps at most 65,536 tries a job (a job has at most as many units),
// which encode in well under this.
const MaxTimeline = 64 << 20

// SaveTimeline keeps data, the timeline of a job's units in the server's
// encoding, replacing one kept before. It is removed with the job.
func (s *SQLite) SaveTimeline(ctx context.Context, job uint64, data []byte) error {
	if len(data) > MaxTimeline {
		return fmt.Errorf("store: timeline of job %d: %d bytes, limit %d", job, len(data), MaxTimeline)
	}
	id, err := id64(job, "job")
	if err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, "INSERT OR REPLACE INTO timelines (job, data) VALUES (?, ?)", id, data); err != nil {
		return fmt.Errorf("store: saving the timeline of job %d: %w", job, wrapDB(err))
	}
	return nil
}

// Timeline returns what SaveTimeline kept for job, or ErrNotFound.
func (s *SQLite) Timeline(ctx context.Context, job uint64) ([]byte, error) {
	id, err := id64(job, "job")
	if err != nil {
		return nil, err
	}
	var data []byte
	err = s.db.QueryRowContext(ctx, "SELECT data FROM timelines WHERE job = ?", id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: no timeline of job %d: %w", job, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: the timeline of job %d: %w", job, wrapDB(err))
	}
	return data, nil
}
