package store

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a fake time source that advances a second per reading.
type clock struct{ n atomic.Int64 }

func (c *clock) now() time.Time {
	return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(c.n.Add(1)) * time.Second)
}

func openDB(t testing.TB, path string) *SQLite {
	t.Helper()
	c := &clock{}
	s, err := OpenSQLite(t.Context(), path, &SQLiteConfig{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func BenchmarkFinishUnit(b *testing.B) {
	ctx := b.Context()
	s := openDB(b, filepath.Join(b.TempDir(), "bench.db"))
	units := make([]Unit, 1<<14)
	for i := range units {
		units[i].ID = uint64(i)
	}
	var j Job
	i := len(units)
	for b.Loop() {
		if i == len(units) {
			j = must[Job](b)(s.CreateJob(ctx, Job{Op: "noop"}, units))
			i = 0
		}
		must[int](b)(s.StartUnit(ctx, j.ID, uint64(i), "w1"))
		must[bool](b)(s.FinishUnit(ctx, j.ID, uint64(i), "w1", "r", 1))
		i++
	}
}

// BenchmarkFinishUnits records results in batches of 256, as a busy
// server does.
func BenchmarkFinishUnits(b *testing.B) {
	ctx := b.Context()
	s := openDB(b, filepath.Join(b.TempDir(), "bench.db"))
	units := make([]Unit, 1<<14)
	for i := range units {
		units[i].ID = uint64(i)
	}
	const batch = 256
	var j Job
	i := len(units)
	rs := make([]UnitResult, 0, batch)
	for b.Loop() {
		if i == len(units) {
			j = must[Job](b)(s.CreateJob(ctx, Job{Op: "noop"}, units))
			i = 0
		}
		rs = rs[:0]
		for k := range batch {
			rs = append(rs, UnitResult{Job: j.ID, ID: uint64(i + k), Worker: "w1", Result: "r", ComputeNanos: 1})
		}
		must[[]bool](b)(s.FinishUnits(ctx, rs))
		i += batch
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "units/s")
}
