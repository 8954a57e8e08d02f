package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/store/storetest"
)

// TestPostgresNotifies: a listener hears of a job created, started and
// ended, and of a token added, by another handle on the database.
func TestPostgresNotifies(t *testing.T) {
	url := storetest.Postgres(t).Fresh(t)
	ctx := t.Context()
	open := func() store.Meta {
		m, err := store.OpenMeta(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	l, w := open(), open()
	heard := make(chan uint64, 64)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.(store.Notifier).Listen(lctx, func(job uint64) { heard <- job }) }()
	defer func() {
		cancel()
		<-done
	}()
	expect := func(what string, want uint64) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case got := <-heard:
				if got == want {
					return
				}
			case err := <-done:
				t.Fatalf("listener ended: %v", err)
			case <-deadline:
				t.Fatalf("no notification of %s (%d) within 10s", what, want)
			}
		}
	}
	// The listener may start after the first change: make changes until
	// one is heard.
	var j store.Job
	for try, got := 0, false; !got; try++ {
		if try == 50 {
			t.Fatal("no notification of a created job")
		}
		var err error
		if j, err = w.CreateJob(ctx, store.Job{Op: "noop", Policy: "dynamic"}, []store.Unit{{ID: 0}}); err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-heard:
			got = id == j.ID
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := w.StartUnit(ctx, j.ID, 0, "w1"); err != nil {
		t.Fatal(err)
	}
	expect("the job started", j.ID)
	if err := w.CancelJob(ctx, j.ID, "x"); err != nil {
		t.Fatal(err)
	}
	expect("the job canceled", j.ID)
	if _, err := w.AddToken(ctx, store.Token{ID: "t1", Hash: "h1", Name: "n1", Role: "client"}); err != nil {
		t.Fatal(err)
	}
	expect("a token added", 0)
}
