// Package sched decides which worker stream runs which computation unit.
// It is pure placement logic: it never talks to the network or the disk.
// The server tells it about workers, jobs and outcomes, and asks it what
// each stream should run next.
//
//	         AddJob ──▶ ┌───────────────────────────┐ ◀── SetWorker / RemoveWorker
//	                    │ per job: units, deps,     │
//	stream ── Next ───▶ │ ready queues, copies;     │ ──▶ Assignment (job, unit,
//	                    │ per stream: in flight     │      worker, stream, attempt)
//	result ── Done ───▶ │                           │ ──▶ counted? job done?
//	broken ── Lost ───▶ └───────────────────────────┘
//
// A job's policy decides which worker may run which unit:
//
//   - Equal: when the job arrives, the units of each operation are split
//     evenly among the live workers that run it.
//   - Proportional: likewise, in proportion to each worker's streams
//     (the threads it lends).
//   - Dynamic (the default): no plan; any stream with room takes the next
//     ready unit, but no more than its share of what is left of the job
//     (the unfinished units over the streams that can run them), so the
//     first stream to ask does not take a whole small job, nor a slow
//     stream a queue of the last units. When nothing is ready, an idle stream takes a backup
//     copy of the unit on another worker that would start last (deepest
//     in its stream's queue, else running longest), so a slow worker
//     cannot hold up the end of a job. In simulation, adding a slow worker
//     to fast ones then never lengthens a job; with Equal it does.
//
// Jobs carry a Tenant (who submitted them). With one tenant, jobs are
// served in the order they came. With several, the tenants share the
// streams: a stream takes a unit of the tenant holding the fewest copies
// first, and holds one unit at a time (InFlight is 1), since a worker
// runs what is queued on all its streams in the order it came, on
// whichever thread frees first: a unit queued there could wait behind
// another tenant's for as long as that one lasts, unseen. Preempt, which
// the server calls after events, takes back the copies queued while one
// tenant had jobs, and takes streams back for a tenant whose ready unit
// no idle stream can take, from a tenant running at least two units more
// (a backup copy first, then a unit taken back fewer times, then the unit
// started last): the server
// stops those copies on the worker, and their units run again later,
// counted neither as lost nor as failed. A tenant that fills every
// stream with units that run until their timeout so delays another's job
// by one stop, not by that timeout. A worker that cannot stop a copy
// (Worker.NoPreempt: one older than the server's stop request) is never
// preempted.
//
// Whatever the policy, a stream holds at most InFlight units at once, a
// unit goes only to a worker whose Ops include the unit's operation, and a
// unit is ready only when the units it depends on are done. The first
// result for a unit counts; later copies' results are dropped. When a
// worker dies its units run elsewhere: dynamic jobs requeue them, static
// plans share them among the surviving workers by the same policy.
//
// A Scheduler is safe for concurrent use. Stream loops sleep on Wait,
// which an event closes only for the streams it may give work to (the
// stream whose slot freed, as many waiting streams as units became ready,
// one idle stream for a possible backup copy, every stream when the
// workers change), so the cost of a result does not grow with the number
// of streams (BenchmarkResultCost). Changed is closed at every event:
//
//	for {
//		changed := s.Wait(worker, stream)
//		a, ok := s.Next(worker, stream)
//		if !ok {
//			select { case <-changed: continue; case <-ctx.Done(): return }
//		}
//		... send a.Unit on the stream ...
//	}
package sched
