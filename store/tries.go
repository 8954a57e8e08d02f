package store

import (
	"context"
	"database/sql"
	"fmt"
)

// UnitTries counts the tries of one unit that brought no result: Fails
// whose operation failed on a worker (or that the server could not
// prepare), Lost whose copy went away with its stream, path or worker.
// Error says what the last of them was.
type UnitTries struct {
	Unit        uint64
	Fails, Lost int
	Error       string
}

// SaveTries records the tries of a job's units that brought no result,
// as counted while the job ran: each named unit's counts are replaced,
// and its error too when one is given.
func (s *SQLite) SaveTries(ctx context.Context, job uint64, tries []UnitTries) error {
	if len(tries) == 0 {
		return nil
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `UPDATE units SET fails = ?, lost = ?,
			error = CASE WHEN ? = '' THEN error ELSE ? END WHERE job = ? AND id = ?`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, t := range tries {
			if _, err := st.ExecContext(ctx, t.Fails, t.Lost, t.Error, t.Error, int64(job), int64(t.Unit)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: recording the tries of job %d's units: %w", job, wrapDB(err))
	}
	return nil
}

// Tries returns the units of a job that had a try without a result, by
// unit ID, at most limit of them, and how many there are in all.
func (s *SQLite) Tries(ctx context.Context, job uint64, limit int) ([]UnitTries, int, error) {
	var total int
	err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM units WHERE job = ? AND (fails > 0 OR lost > 0)", int64(job)).Scan(&total)
	if err != nil {
		return nil, 0, fmt.Errorf("store: tries of job %d's units: %w", job, wrapDB(err))
	}
	if total == 0 || limit <= 0 {
		return nil, total, nil
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, fails, lost, error FROM units
		WHERE job = ? AND (fails > 0 OR lost > 0) ORDER BY id LIMIT ?`, int64(job), limit)
	if err != nil {
		return nil, 0, fmt.Errorf("store: tries of job %d's units: %w", job, wrapDB(err))
	}
	defer rows.Close()
	var out []UnitTries
	for rows.Next() {
		var t UnitTries
		var id int64
		if err := rows.Scan(&id, &t.Fails, &t.Lost, &t.Error); err != nil {
			return nil, 0, fmt.Errorf("store: tries of job %d's units: %w", job, wrapDB(err))
		}
		t.Unit = uint64(id)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("store: tries of job %d's units: %w", job, wrapDB(err))
	}
	return out, total, nil
}
