package storetest

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/store"
)

// lease acquires name for holder on s, failing t on error.
func lease(t *testing.T, s store.Meta, name, holder string, ttl time.Duration) store.Lease {
	t.Helper()
	l, err := s.AcquireLease(t.Context(), name, holder, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testLeases checks the leases several servers share a database by:
// one holder at a time, new epochs on every acquisition, renewals that
// fail once the lease expired or was taken, and releases.
func testLeases(t *testing.T, h *harness) {
	ctx := t.Context()
	a, b := h.open(t), h.open(t)
	la := lease(t, a, "server/a", "a", time.Hour)
	if la.Epoch == 0 || la.Holder != "a" || la.Expires.IsZero() {
		t.Fatalf("acquired %+v: want epoch > 0, holder a, expiring later", la)
	}
	_, err := b.AcquireLease(ctx, "server/a", "b", time.Hour)
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("acquiring a lease another holds: %v; want ErrConflict naming holder a", err)
	}
	// The same holder again (a restarted server) gets a new epoch; the
	// old one can no longer renew.
	la2 := lease(t, b, "server/a", "a", time.Hour)
	if la2.Epoch <= la.Epoch {
		t.Errorf("epoch of a second acquisition %d, not above the first's %d", la2.Epoch, la.Epoch)
	}
	if _, err := a.RenewLease(ctx, la, time.Hour); !errors.Is(err, store.ErrFenced) {
		t.Errorf("renewing a lease acquired again since: %v; want ErrFenced", err)
	}
	if _, err := a.RenewLease(ctx, la2, time.Hour); err != nil {
		t.Errorf("renewing the live lease: %v", err)
	}
	// Released: others take it at once; the release cannot be renewed.
	if err := a.ReleaseLease(ctx, la2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RenewLease(ctx, la2, time.Hour); !errors.Is(err, store.ErrFenced) {
		t.Errorf("renewing a released lease: %v; want ErrFenced", err)
	}
	lb := lease(t, b, "server/a", "b", time.Hour)
	if lb.Epoch <= la2.Epoch {
		t.Errorf("epoch %d after release, not above %d", lb.Epoch, la2.Epoch)
	}
	// Expired: renewal fails, another holder takes it.
	short := lease(t, a, "retention", "a", time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if _, err := a.RenewLease(ctx, short, time.Hour); !errors.Is(err, store.ErrFenced) {
		t.Errorf("renewing an expired lease: %v; want ErrFenced", err)
	}
	if l := lease(t, b, "retention", "b", time.Hour); l.Holder != "b" {
		t.Errorf("expired lease taken by %q, want b", l.Holder)
	}
	all, err := a.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(all))
	for i, l := range all {
		names[i] = l.Name + "=" + l.Holder
	}
	if want := []string{"retention=b", "server/a=b"}; !slices.Equal(names, want) {
		t.Errorf("leases %v, want %v", names, want)
	}
}

// testFencedTakeover has server b take the jobs of server a once a's
// lease is gone, and checks that a's writes under its old epoch fail
// while b's succeed, and that a result is counted once.
func testFencedTakeover(t *testing.T, h *harness) {
	ctx := t.Context()
	a, b := h.open(t), h.open(t)
	la := lease(t, a, "server/a", "a", time.Hour)
	lb := lease(t, b, "server/b", "b", time.Hour)
	job, units := sampleJob()
	job.Server, job.Epoch = "a", la.Epoch
	j := must[store.Job](t)(a.CreateJob(ctx, job, units))
	if j.Server != "a" || j.Epoch != la.Epoch {
		t.Fatalf("created job owned by %q epoch %d, want a epoch %d", j.Server, j.Epoch, la.Epoch)
	}
	fa, fb := store.Fenced(ctx, la.Epoch), store.Fenced(ctx, lb.Epoch)
	if _, err := a.StartUnit(fa, j.ID, 0, "w1"); err != nil {
		t.Fatalf("owner's write: %v", err)
	}
	if _, err := b.StartUnit(fb, j.ID, 1, "w1"); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("another epoch's write: %v; want ErrFenced", err)
	}
	// a is live: b claims nothing.
	if got := must[[]store.Job](t)(b.ClaimJobs(ctx, lb, false)); len(got) != 0 {
		t.Fatalf("claimed %d jobs of a live server", len(got))
	}
	// a stalls and its lease runs out: b takes the job, and its
	// running unit is pending again.
	if err := a.ReleaseLease(ctx, la); err != nil {
		t.Fatal(err)
	}
	got := must[[]store.Job](t)(b.ClaimJobs(ctx, lb, false))
	if len(got) != 1 || got[0].ID != j.ID || got[0].Server != "b" || got[0].Epoch != lb.Epoch || got[0].Running != 0 {
		t.Fatalf("claimed %+v; want job %d owned by b at epoch %d with nothing running", got, j.ID, lb.Epoch)
	}
	if u := must[store.Unit](t)(b.Unit(ctx, j.ID, 0)); u.State != store.UnitPending {
		t.Errorf("unit running under the old owner is %s after the claim, want pending", u.State)
	}
	if again := must[[]store.Job](t)(b.ClaimJobs(ctx, lb, false)); len(again) != 0 {
		t.Errorf("a second claim took %d jobs already b's", len(again))
	}
	// a wakes up: every write under its epoch fails; b's succeed.
	for name, write := range map[string]func() error{
		"StartUnit": func() error { _, err := a.StartUnit(fa, j.ID, 1, "w1"); return err },
		"RetryUnit": func() error { return a.RetryUnit(fa, j.ID, 1, "w1", "x") },
		"FailUnit":  func() error { return a.FailUnit(fa, j.ID, 1, "w1", "x") },
		"FinishJob": func() error { return a.FinishJob(fa, j.ID, "out") },
		"FailJob":   func() error { return a.FailJob(fa, j.ID, "x") },
		"CancelJob": func() error { return a.CancelJob(fa, j.ID, "x") },
	} {
		if err := write(); !errors.Is(err, store.ErrFenced) {
			t.Errorf("%s by the old owner: %v; want ErrFenced", name, err)
		}
	}
	rs := []store.UnitResult{{Job: j.ID, ID: 0, Worker: "w1", Result: "stale", Epoch: la.Epoch}}
	if c := must[[]bool](t)(a.FinishUnits(ctx, rs)); c[0] {
		t.Error("the old owner's result counted")
	}
	rs[0].Result, rs[0].Epoch = "r0", lb.Epoch
	if c := must[[]bool](t)(b.FinishUnits(ctx, rs)); !c[0] {
		t.Error("the new owner's result did not count")
	}
	if c := must[[]bool](t)(b.FinishUnits(ctx, rs)); c[0] {
		t.Error("the same unit's result counted twice")
	}
	if u := must[store.Unit](t)(b.Unit(ctx, j.ID, 0)); u.Result != "r0" {
		t.Errorf("unit 0's result %q, want the new owner's r0", u.Result)
	}
	if _, err := b.StartUnit(fb, j.ID, 1, "w1"); err != nil {
		t.Errorf("the new owner's write: %v", err)
	}
	// A lease that is not live claims nothing.
	if _, err := a.ClaimJobs(ctx, la, true); !errors.Is(err, store.ErrFenced) {
		t.Errorf("claiming with a released lease: %v; want ErrFenced", err)
	}
	// all takes even a live server's jobs (one server on SQLite).
	lc := lease(t, a, "server/c", "c", time.Hour)
	if got := must[[]store.Job](t)(a.ClaimJobs(ctx, lc, true)); len(got) != 1 || got[0].Server != "c" {
		t.Errorf("claim with all took %+v, want the one unfinished job", got)
	}
}

// testConcurrentClaims has three handles claim the jobs of a dead
// server at once: each job goes to exactly one.
func testConcurrentClaims(t *testing.T, h *harness) {
	ctx := t.Context()
	s := []store.Meta{h.open(t), h.open(t), h.open(t)}
	dead := lease(t, s[0], "server/dead", "dead", time.Hour)
	const n = 30
	for range n {
		job, units := sampleJob()
		job.Server, job.Epoch = "dead", dead.Epoch
		must[store.Job](t)(s[0].CreateJob(ctx, job, units))
	}
	if err := s[0].ReleaseLease(ctx, dead); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	owner := map[uint64]string{}
	var wg sync.WaitGroup
	for i, m := range s {
		name := string(rune('a' + i))
		l := lease(t, m, "server/"+name, name, time.Hour)
		wg.Go(func() {
			got, err := m.ClaimJobs(ctx, l, false)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, j := range got {
				if prev, ok := owner[j.ID]; ok {
					t.Errorf("job %d claimed by %s and %s", j.ID, prev, name)
				}
				owner[j.ID] = name
			}
		})
	}
	wg.Wait()
	if len(owner) != n {
		t.Errorf("%d of %d jobs claimed", len(owner), n)
	}
}
