package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// UserOp is one version of an operation a user uploaded as a WebAssembly
// module.
type UserOp struct {
	Name string
	// Version counts the uploads under Name, from 1.
	Version int
	// Hash is the module's sha256, the ID of the blob that holds it.
	Hash string
	Size int64
	// Doc describes the operation.
	Doc string
	// Split and Merge are the defaults of jobs that do not say.
	Split, Merge string
	// Params are the parameters the operation declares.
	Params []UserParam
	Added  time.Time
	// Owner added this version (see owners.go).
	Owner string
}

// UserParam is a parameter a user operation declares.
type UserParam struct {
	Name    string `json:"name"`
	Default string `json:"default,omitempty"`
	Doc     string `json:"doc,omitempty"`
}

// AddOp stores a new version of the operation op.Name and returns it
// with its Version and Added set.
func (s *SQLite) AddOp(ctx context.Context, op UserOp) (UserOp, error) {
	op.Added = s.now().UTC()
	if op.Params == nil {
		op.Params = []UserParam{}
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var v sql.NullInt64
		if err := tx.QueryRowContext(ctx, "SELECT MAX(version) FROM user_ops WHERE name = ?", op.Name).Scan(&v); err != nil {
			return err
		}
		op.Version = int(v.Int64) + 1
		_, err := tx.ExecContext(ctx, `INSERT INTO user_ops (name, version, hash, size, doc, split, merge, params, added, owner)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, op.Name, op.Version, op.Hash, op.Size, op.Doc, op.Split, op.Merge,
			toJSON(op.Params), nanos(op.Added), op.Owner)
		return err
	})
	if err != nil {
		return UserOp{}, fmt.Errorf("store: add operation %s: %w", op.Name, err)
	}
	return op, nil
}

// opsQuery selects the newest version of every operation not removed.
const opsQuery = `SELECT name, version, hash, size, doc, split, merge, params, added, owner
		FROM user_ops o WHERE removed = 0 AND version = (SELECT MAX(version) FROM user_ops WHERE name = o.name)
		ORDER BY name`

// scanOp reads a row of opsQuery.
func scanOp(sc scanner) (UserOp, error) {
	var op UserOp
	var params string
	var added int64
	if err := sc.Scan(&op.Name, &op.Version, &op.Hash, &op.Size, &op.Doc, &op.Split, &op.Merge, &params, &added, &op.Owner); err != nil {
		return UserOp{}, err
	}
	op.Added = fromNanos(added)
	var err error
	if op.Params, err = fromJSON[[]UserParam](params); err != nil {
		return UserOp{}, fmt.Errorf("operation %s params: %w", op.Name, err)
	}
	return op, nil
}

// Ops returns the newest version of every operation not removed, by name.
func (s *SQLite) Ops(ctx context.Context) ([]UserOp, error) {
	rows, err := s.db.QueryContext(ctx, opsQuery)
	if err != nil {
		return nil, fmt.Errorf("store: operations: %w", wrapDB(err))
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
	return out, wrapDB(rows.Err())
}

// RemoveOp removes the operation name: it is no longer listed or
// offered to new jobs. Jobs that use it keep their module. ErrNotFound if
// there is no such operation.
func (s *SQLite) RemoveOp(ctx context.Context, name string) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "UPDATE user_ops SET removed = ? WHERE name = ? AND removed = 0", nanos(s.now()), name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, fmt.Errorf("operation %q: %w", name, ErrNotFound))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: remove operation: %w", err)
	}
	return nil
}

// moduleUsedQuery counts the listed operations whose newest version
// has the module hash.
const moduleUsedQuery = `SELECT COUNT(*) FROM user_ops o WHERE hash = ? AND removed = 0
		AND version = (SELECT MAX(version) FROM user_ops WHERE name = o.name)`

// ModuleUsed reports whether the module hash belongs to an operation that
// is listed, so its blob must be kept.
func (s *SQLite) ModuleUsed(ctx context.Context, hash string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, moduleUsedQuery, hash).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("store: module users: %w", wrapDB(err))
	}
	return n > 0, nil
}

// IsModule reports whether hash is the module of any version of any user
// operation, removed ones included (jobs submitted before a removal
// still run it).
func (s *SQLite) IsModule(ctx context.Context, hash string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM user_ops WHERE hash = ?", hash).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("store: module %s: %w", hash, wrapDB(err))
	}
	return n > 0, nil
}

// RetryUnit records that a try of the unit failed with msg and that it
// runs again: it is pending, its error is msg, and its job counts one
// more retry. ErrConflict if the unit or its job is finished.
func (s *SQLite) RetryUnit(ctx context.Context, job, id uint64, worker, msg string) error {
	return s.unitOp(ctx, "retry", job, id, func(tx *sql.Tx, j Job, u Unit) error {
		if j.State.Final() || u.State == UnitDone || u.State == UnitCanceled {
			return fmt.Errorf("unit is %s in a %s job: %w", u.State, j.State, ErrConflict)
		}
		if err := s.move(ctx, tx, u, UnitPending, 0, setFailed, worker, msg); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE jobs SET retries = retries + 1 WHERE id = ?", int64(job))
		return err
	})
}

// SetUnits gives a job created without units (it waited for its input
// job) its input and units, in one transaction. ErrConflict if the job is
// finished or has units.
func (s *SQLite) SetUnits(ctx context.Context, id uint64, input string, units []Unit) error {
	return s.jobOp(ctx, "set units of", id, func(tx *sql.Tx, j Job) error {
		if j.State.Final() || j.Total > 0 {
			return fmt.Errorf("job is %s with %d units: %w", j.State, j.Total, ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE jobs SET input = ?, total = ? WHERE id = ?", input, len(units), int64(id)); err != nil {
			return err
		}
		j.Input = input
		if err := checkUnits(units); err != nil {
			return err
		}
		return s.addUnits(ctx, tx, j, units)
	})
}

func specJSON(sp JobSpec) string {
	if b := toJSON(sp); b != "{}" {
		return b
	}
	return ""
}

// Pipeline is a pipeline's record: its steps' names and jobs.
type Pipeline struct {
	ID        uint64
	Name      string
	Steps     []PipelineStep
	Submitted time.Time
	// Owner submitted the pipeline (see owners.go).
	Owner string
}

// PipelineStep names one step's job.
type PipelineStep struct {
	Name string `json:"name"`
	Job  uint64 `json:"job"`
}

// CreatePipeline stores a pipeline and returns it with its ID.
func (s *SQLite) CreatePipeline(ctx context.Context, p Pipeline) (Pipeline, error) {
	p.Submitted = s.now().UTC()
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "INSERT INTO pipelines (name, steps, submitted, owner) VALUES (?, ?, ?, ?)",
			p.Name, toJSON(p.Steps), nanos(p.Submitted), p.Owner)
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		p.ID = uint64(id)
		return err
	})
	if err != nil {
		return Pipeline{}, fmt.Errorf("store: create pipeline: %w", err)
	}
	return p, nil
}

// SetPipelineSteps records the steps' jobs of pipeline id.
func (s *SQLite) SetPipelineSteps(ctx context.Context, id uint64, steps []PipelineStep) error {
	_, err := s.db.ExecContext(ctx, "UPDATE pipelines SET steps = ? WHERE id = ?", toJSON(steps), int64(id))
	if err != nil {
		return fmt.Errorf("store: pipeline %d: %w", id, wrapDB(err))
	}
	return nil
}

// Pipeline returns one pipeline.
func (s *SQLite) Pipeline(ctx context.Context, id uint64) (Pipeline, error) {
	p, err := scanPipeline(s.db.QueryRowContext(ctx, "SELECT id, name, steps, submitted, owner FROM pipelines WHERE id = ?",
		int64(min(id, math.MaxInt64))))
	if errors.Is(err, sql.ErrNoRows) {
		return Pipeline{}, fmt.Errorf("store: pipeline %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Pipeline{}, fmt.Errorf("store: pipeline %d: %w", id, wrapDB(err))
	}
	return p, nil
}

// scanPipeline reads a row of id, name, steps, submitted, owner.
func scanPipeline(sc scanner) (Pipeline, error) {
	var p Pipeline
	var steps string
	var sub, pid int64
	if err := sc.Scan(&pid, &p.Name, &steps, &sub, &p.Owner); err != nil {
		return Pipeline{}, err
	}
	p.ID, p.Submitted = uint64(pid), fromNanos(sub)
	var err error
	if p.Steps, err = fromJSON[[]PipelineStep](steps); err != nil {
		return Pipeline{}, fmt.Errorf("pipeline %d steps: %w", pid, err)
	}
	return p, nil
}
