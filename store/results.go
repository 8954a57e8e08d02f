package store

import (
	"maps"
	"slices"
)

// What both stores share of recording results and requeueing units.

// keyRows is what database/sql's and pgx's rows have in common.
type keyRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// scanKeys reads rows of (job, id) to their end.
func scanKeys(rows keyRows) ([]UnitKey, error) {
	var keys []UnitKey
	for rows.Next() {
		var job, id int64
		if err := rows.Scan(&job, &id); err != nil {
			return nil, err
		}
		keys = append(keys, UnitKey{Job: uint64(job), ID: uint64(id)})
	}
	return keys, rows.Err()
}

// jobDelta is the change of one job's counters.
type jobDelta struct {
	running, done, failed int
	computeNanos          int64
}

// tally adds up what a batch of counted results changes: each job's
// counters and each worker's credit, written once each.
type tally struct {
	jobs    map[uint64]*jobDelta
	credits map[string]int
}

// count adds result r, whose unit was in state from.
func (t *tally) count(r UnitResult, from UnitState) {
	if t.jobs == nil {
		t.jobs, t.credits = map[uint64]*jobDelta{}, map[string]int{}
	}
	d := t.jobs[r.Job]
	if d == nil {
		d = &jobDelta{}
		t.jobs[r.Job] = d
	}
	switch from {
	case UnitRunning:
		d.running--
	case UnitFailed:
		d.failed--
	}
	d.done++
	d.computeNanos += r.ComputeNanos
	t.credits[r.Worker]++
}

// write applies the tally through exec (a query with "?" placeholders):
// jobs by ID, then workers by ID, the order in which rows are locked.
func (t *tally) write(exec func(query string, args ...any) error) error {
	for _, job := range slices.Sorted(maps.Keys(t.jobs)) {
		d := t.jobs[job]
		if err := exec(countUnits, d.running, d.done, d.failed, d.computeNanos, int64(job)); err != nil {
			return err
		}
	}
	for _, w := range slices.Sorted(maps.Keys(t.credits)) {
		if err := exec(creditDoneN, t.credits[w], w); err != nil {
			return err
		}
	}
	return nil
}
