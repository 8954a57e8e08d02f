// Package lifecycle owns the life of braid's jobs and their units: what
// is out on workers, which result counts, what runs again, when a job is
// complete, failed or canceled, which jobs wait for another's output, and
// the writes of all of it to the job store. The server's HTTP handlers
// and peer sessions report events to a Lifecycle and ask it; none keeps
// a copy of a job's state. Placement stays in package sched (pure, no
// I/O); the bytes (units' data, results, the output) stay with the
// caller, which the Lifecycle calls through Hooks.
//
// A job's states (store.JobState; "waiting" and "assembling" are queued
// and running in the store) and the events that move it:
//
//	           WaitFor               input job done: Hooks.Release, Add
//	submit ──────────────▶ waiting ─────────────────────────────────────┐
//	  │                      │ input job failed or canceled,            │
//	  │ Add                  │ CancelWaiting                            │
//	  │                      ▼                                          │
//	  │                failed / canceled                                │
//	  ▼                                                                 │
//	queued ◀────────────────────────────────────────────────────────────┘
//	  │ first copy sent (Started)
//	  ▼
//	running ─── End (a client's cancel), a unit failed  ──▶ canceled / failed
//	  │         MaxTries times or lost MaxLosses times,     (from queued too)
//	  │         results the store refused for long
//	  │ the last unit's result is queued for the store
//	  ▼
//	assembling ─── Hooks.Assemble failed, or the store ──▶ failed
//	  │            disagrees on the units done
//	  │ recorder flushed, Hooks.Assemble, FinishJob
//	  ▼
//	done
//
// A unit's states, as a Job counts them (the scheduler keeps its own
// view of what is ready; the store keeps pending, running, done):
//
//	          Dispatched                 Result (the first to count)
//	pending ─────────────▶ out ───────────────────────────────────▶ done: queued
//	   ▲                  │ ▲ │                                     for the store,
//	   │ Lost: its stream │ └─┘ Dispatched again: a backup copy     then counted
//	   │ or worker went   │     (the first result counts, the       once
//	   │ away. Failed: it │     other is spare)
//	   │ runs again, a    │
//	   │ retry, until     │
//	   │ MaxTries         │
//	   └──────────────────┘
//
//	any unit not done ── the job ends ──▶ canceled (in the store)
//
// A second copy's result for a done unit is not counted; its blob is
// spare, removed when the job ends. "Done" is counted in one place, Job's
// unit state: a result counts when the scheduler accepts it, goes to the
// recorder (batched store writes) at once, and only then counts toward
// the job's end, so the result that completes a job is always behind
// every other in the recorder's queue, and the flush before assembly
// finds the store in agreement (issue 25: a job whose units had all
// completed failed "1 of 9 units are not done" when the end was decided
// by the scheduler's count, ahead of another stream's store write).
//
// A job's end must reach the store; a write that fails (a full disk) is
// kept as unsaved, shown in the job's status, and written again with
// backoff until it succeeds or the server stops (the job then resumes at
// the next start).
//
// Restart: the caller resets running units to pending in the store and
// Adds every unfinished job again with its done units; a job whose units
// are all done is assembled once Start is called. Waiting jobs are put
// back with RecoverWaiting.
//
// Lock order: Lifecycle.mu, then Job.mu; the scheduler's, the recorder's
// and the store's locks are leaves. Hooks are never called with a lock
// held.
package lifecycle
