package sched

import (
	"fmt"
	"testing"
)

// BenchmarkPreempt measures one call of Preempt, which the server makes
// after events, at most every 20 ms, on clusters of workers x 2 streams
// with several tenants:
//
//   - steady: every tenant runs its fair share and has units waiting (the
//     common call: nothing to take);
//
//   - arrive: one tenant holds every stream and the others' jobs just
//     arrived (the call that takes half the streams back; the setup is
//     not timed).
//
//     go test -run '^$' -bench BenchmarkPreempt ./sched/
func BenchmarkPreempt(b *testing.B) {
	for _, workers := range []int{10, 100, 1000} {
		for _, tenants := range []int{2, 10} {
			b.Run(fmt.Sprintf("steady/workers=%d/tenants=%d", workers, tenants), func(b *testing.B) {
				s := preemptCluster(workers, tenants, false)
				b.ResetTimer()
				for range b.N {
					if got := s.Preempt(); len(got) != 0 {
						b.Fatalf("balanced, Preempt took %d copies", len(got))
					}
				}
			})
			b.Run(fmt.Sprintf("arrive/workers=%d/tenants=%d", workers, tenants), func(b *testing.B) {
				taken := 0
				for range b.N {
					b.StopTimer()
					s := preemptCluster(workers, tenants, true)
					b.StartTimer()
					taken += len(s.Preempt())
				}
				b.ReportMetric(float64(taken)/float64(b.N), "taken/op")
			})
		}
	}
}

// preemptCluster returns a scheduler of workers x 2 streams, all busy:
// with one job per tenant, each holding its share of the streams
// (hog false), or tenant 0 holding every stream and the others' jobs
// added after (hog true).
func preemptCluster(workers, tenants int, hog bool) *Scheduler {
	s := New(Config{NoBackups: true})
	streams := 2
	for i := range workers {
		s.SetWorker(Worker{ID: fmt.Sprint("w", i), Streams: streams, Ops: []string{"op"}})
	}
	n := 4 * workers * streams // units a job: more than the streams
	add := func(t int) {
		if err := s.AddJob(Job{ID: uint64(t + 1), Policy: Dynamic, Tenant: fmt.Sprint("t", t), Units: units(n, "op")}); err != nil {
			panic(err)
		}
	}
	fill := func() {
		for i := range workers {
			for st := range streams {
				s.Next(fmt.Sprint("w", i), st)
			}
		}
	}
	if hog {
		add(0)
		fill()
		for t := 1; t < tenants; t++ {
			add(t)
		}
		return s
	}
	for t := range tenants {
		add(t)
	}
	fill()
	for s.Preempt() != nil { // settle, at most a few rounds
		fill()
	}
	return s
}
