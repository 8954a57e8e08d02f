package sched

import (
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time of the calling OS thread, in ns.
func threadCPU() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// BenchmarkResultCost measures the scheduler's CPU per result as a
// server drives it, in a pure simulation: every stream's loop holds its
// InFlight units and sleeps on its channel; results come back one at a
// time, oldest unit first; after each, every stream whose channel closed
// runs its loop (Next until it has nothing, then sleeps again). With
// Changed, every result wakes every stream; with Wait, only those it may
// give work to. sched-cpu-ns/result is the thread CPU time spent inside
// the scheduler's calls (Done, and the woken loops' Wait/Changed and
// Next, each timed with two clock_gettime calls, which it includes);
// wakes/result counts the loops woken.
// The goal: at 1,000 workers within 2x of that at 10.
//
//	go test -run '^$' -bench BenchmarkResultCost -benchtime 2000x ./sched/
func BenchmarkResultCost(b *testing.B) {
	for _, mode := range []string{"wait", "changed"} {
		for _, workers := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("%s/workers=%d", mode, workers), func(b *testing.B) {
				benchResults(b, workers, 2, mode == "wait")
			})
		}
	}
}

func benchResults(b *testing.B, workers, streams int, wait bool) {
	// 16 in flight, as a server's streams hold by default.
	const inFlight = 16
	s := New(Config{InFlight: inFlight, NoBackups: true})
	type loop struct {
		id string
		st int
		ch <-chan struct{}
	}
	var loops []*loop
	for i := range workers {
		id := fmt.Sprint("w", i)
		s.SetWorker(Worker{ID: id, Streams: streams, Ops: []string{"op"}})
		for st := range streams {
			loops = append(loops, &loop{id: id, st: st})
		}
	}
	// Enough units that no stream runs dry before b.N results.
	mustAdd(b, s, Job{ID: 1, Units: units(b.N+workers*streams*inFlight, "op")})
	var fifo []Assignment
	run := func(l *loop) {
		for {
			var ch <-chan struct{}
			if wait {
				ch = s.Wait(l.id, l.st)
			} else {
				ch = s.Changed()
			}
			a, ok := s.Next(l.id, l.st)
			if !ok {
				l.ch = ch
				return
			}
			fifo = append(fifo, a)
		}
	}
	for _, l := range loops {
		run(l)
	}
	if len(fifo) != workers*streams*inFlight {
		b.Fatalf("streams hold %d units, want %d", len(fifo), workers*streams*inFlight)
	}
	// CPU time, not wall time: the machine may be busy with other work.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var inSched int64
	wakes := 0
	b.ResetTimer()
	for range b.N {
		a := fifo[0]
		fifo = fifo[1:]
		t := threadCPU()
		s.Done(a)
		inSched += threadCPU() - t
		for _, l := range loops {
			select {
			case <-l.ch:
				wakes++
				t := threadCPU()
				run(l)
				inSched += threadCPU() - t
			default:
			}
		}
	}
	b.StopTimer()
	if len(fifo) != workers*streams*inFlight {
		b.Fatalf("after %d results streams hold %d units, want %d: a wake was missed", b.N, len(fifo), workers*streams*inFlight)
	}
	b.ReportMetric(float64(inSched)/float64(b.N), "sched-cpu-ns/result")
	b.ReportMetric(float64(wakes)/float64(b.N), "wakes/result")
}

// BenchmarkJobTail runs whole dynamic jobs in the simulation on 1,000
// equal workers of one stream each, with 16 units in flight a stream,
// as one of three servers sees a job of 20 units a worker
// (BenchmarkManyWorkers in server): most of such a job is its tail,
// where streams hold their shares and idle ones look for backup copies.
// It reports the scheduler's CPU per unit (the whole simulation's thread
// CPU, so an upper bound) and the copies made per unit.
//
//	go test -run '^$' -bench BenchmarkJobTail -benchtime 5x ./sched/
func BenchmarkJobTail(b *testing.B) {
	workers := make([]simWorker, 1000)
	for i := range workers {
		workers[i] = simWorker{id: fmt.Sprint("w", i), streams: 1, cost: 10}
	}
	const n = 6667
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu int64
	var copies, backups int
	for b.Loop() {
		t := threadCPU()
		run := simulateRun(b, Dynamic, workers, n, Config{InFlight: 16}, "", 0)
		cpu += threadCPU() - t
		copies += run.copies
		backups += run.backups
	}
	b.ReportMetric(float64(cpu)/float64(b.N*n), "sim-cpu-ns/unit")
	b.ReportMetric(float64(copies)/float64(b.N*n), "copies/unit")
	b.ReportMetric(float64(backups)/float64(b.N*n), "backups/unit")
}
