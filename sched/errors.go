package sched

import (
	"errors"
	"fmt"
)

// ErrJobComplete is returned by AddJob for a job whose units are all done
// already (a resumed job that only needs assembling).
var ErrJobComplete = errors.New("sched: every unit of the job is done")

// UnitError says why the scheduler gave up a job: which unit, and why.
type UnitError struct {
	Job, Unit uint64
	// Tries is how many times the unit's operation failed; 0 when the
	// job failed for another reason (its copies were lost).
	Tries int
	Err   error
}

func (e *UnitError) Error() string { return fmt.Sprintf("job %d unit %d: %v", e.Job, e.Unit, e.Err) }

func (e *UnitError) Unwrap() error { return e.Err }

// ErrTooManyAttempts is the cause in a UnitError for a unit whose streams
// kept breaking.
var ErrTooManyAttempts = errors.New("sched: unit lost too many times; its input may be crashing workers")
