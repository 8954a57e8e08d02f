package store

import (
	"database/sql"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestMigrateV1 opens a database of schema version 1 (before user
// operations) holding a finished job and a queued one, and checks that
// OpenSQLite migrates it to the current version with both jobs and their
// units intact, and that the store works on it afterwards.
func TestMigrateV1(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	sub := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fin := sub.Add(time.Minute)
	for _, q := range []string{
		schema,
		"PRAGMA user_version = 1",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	insertJob := `INSERT INTO jobs (op, input, params, hint_units, tile_w, tile_h, hint_repeat, policy, in_flight,
		state, output, submitted, started, finished, total, done, compute_ns) VALUES (?, ?, ?, 0, 256, 256, 0, '', 16, ?, ?, ?, ?, ?, ?, ?, ?)`
	for _, args := range [][]any{
		{"blur", "in1", `{"radius":"5"}`, JobDone, "out1", sub.UnixNano(), sub.UnixNano(), fin.UnixNano(), 2, 2, 1234},
		{"grayscale", "in2", `{}`, JobQueued, "", fin.UnixNano(), 0, 0, 1, 0, 0},
	} {
		if _, err := db.ExecContext(ctx, insertJob, args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`INSERT INTO units (job, id, blob, off, len, state, worker, attempts, result, compute_ns) VALUES (1, 0, 'in1', 0, 10, 'done', 'w1', 1, 'r0', 600)`,
		`INSERT INTO units (job, id, blob, off, len, state, worker, attempts, result, compute_ns) VALUES (1, 1, 'in1', 10, 10, 'done', 'w1', 1, 'r1', 634)`,
		`INSERT INTO units (job, id, params, blob, off, len, deps, state) VALUES (2, 0, '{"k":"v"}', 'in2', 0, 99, '[7]', 'pending')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := openDB(t, path)
	var v int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version %d (%v), want %d", v, err, schemaVersion)
	}
	j1 := must[Job](t)(s.Job(ctx, 1))
	if j1.Op != "blur" || j1.Input != "in1" || j1.Params["radius"] != "5" || j1.State != JobDone || j1.Output != "out1" ||
		j1.Total != 2 || j1.Done != 2 || j1.ComputeNanos != 1234 || !j1.Submitted.Equal(sub) || !j1.Finished.Equal(fin) ||
		j1.TileW != 256 || j1.InFlight != 16 || !reflect.ValueOf(j1.Spec).IsZero() || j1.Retries != 0 {
		t.Errorf("job 1 after migration: %+v", j1)
	}
	u1 := must[[]Unit](t)(s.Units(ctx, 1))
	if len(u1) != 2 || u1[1].Result != "r1" || u1[1].Off != 10 || u1[1].State != UnitDone || u1[1].Worker != "w1" || u1[1].Reduce {
		t.Errorf("units of job 1 after migration: %+v", u1)
	}
	j2 := must[Job](t)(s.Job(ctx, 2))
	if j2.Op != "grayscale" || j2.State != JobQueued || j2.Total != 1 {
		t.Errorf("job 2 after migration: %+v", j2)
	}
	u2 := must[Unit](t)(s.Unit(ctx, 2, 0))
	if u2.Params["k"] != "v" || len(u2.Deps) != 1 || u2.Deps[0] != 7 || u2.Len != 99 || u2.State != UnitPending {
		t.Errorf("unit 2/0 after migration: %+v", u2)
	}
	if un := must[[]Job](t)(s.Unfinished(ctx)); len(un) != 1 || un[0].ID != 2 {
		t.Errorf("unfinished after migration: %+v", un)
	}

	// The store carries on: the queued job runs, and what version 2
	// added works.
	if _, err := s.StartUnit(ctx, 2, 0, "w2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FinishUnit(ctx, 2, 0, "w2", "r2", 5); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishJob(ctx, 2, "out2"); err != nil {
		t.Fatal(err)
	}
	if j2 := must[Job](t)(s.Job(ctx, 2)); j2.State != JobDone || j2.Done != 1 || j2.Output != "out2" {
		t.Errorf("job 2 finished: %+v", j2)
	}
	if _, err := s.AddOp(ctx, UserOp{Name: "cat", Hash: "ab", Size: 2}); err != nil {
		t.Fatal(err)
	}
	if j3 := must[Job](t)(s.CreateJob(ctx, Job{Op: "cat", Input: "in3", Spec: JobSpec{Module: "ab"}}, []Unit{{ID: 0, Blob: "in3", Len: 1}})); j3.ID != 3 {
		t.Errorf("new job after migration got ID %d, want 3", j3.ID)
	}

	// Version 6: a job that ended before has no timeline; one saved now
	// is kept.
	if _, err := s.Timeline(ctx, 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("timeline of a job that ended before version 6: %v, want ErrNotFound", err)
	}
	if err := s.SaveTimeline(ctx, 2, []byte("spans")); err != nil {
		t.Fatal(err)
	}

	// Version 7: rows from before have no owner (only admins see them);
	// the uploads version 3 made from old inputs are the empty owner's.
	if j1.Owner != "" {
		t.Errorf("job 1 owner %q after migration, want none", j1.Owner)
	}
	if up := must[[]string](t)(s.Uploaders(ctx, "in1")); len(up) != 1 || up[0] != "" {
		t.Errorf("uploaders of in1 after migration: %q, want the empty owner", up)
	}
	if err := s.AddUpload(ctx, "in1", "group:lab"); err != nil {
		t.Fatal(err)
	}
	if up := must[[]string](t)(s.Uploaders(ctx, "in1")); len(up) != 2 {
		t.Errorf("uploaders of in1 after a second owner's upload: %q", up)
	}

	// Opening it again changes nothing.
	s.Close()
	s = openDB(t, path)
	if j1b := must[Job](t)(s.Job(ctx, 1)); j1b.Output != "out1" || j1b.Done != 2 {
		t.Errorf("job 1 after reopening: %+v", j1b)
	}
	if tl := must[[]byte](t)(s.Timeline(ctx, 2)); string(tl) != "spans" {
		t.Errorf("timeline of job 2 after reopening: %q", tl)
	}
}
