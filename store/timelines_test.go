package store

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestTimeline keeps a job's timeline, replaces it, reads it after the
// database is reopened, and checks that it goes with the job.
func TestTimeline(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "braid.db")
	s := openDB(t, path)
	j := must[Job](t)(s.CreateJob(ctx, Job{Op: "checksum", Input: "in"}, []Unit{{ID: 0, Blob: "in", Len: 1}}))
	if _, err := s.Timeline(ctx, j.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("timeline before any was saved: %v, want ErrNotFound", err)
	}
	if err := s.SaveTimeline(ctx, j.ID, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveTimeline(ctx, j.ID, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveTimeline(ctx, 999, []byte("x")); err == nil {
		t.Error("saved the timeline of a job that does not exist")
	}
	if err := s.SaveTimeline(ctx, j.ID, make([]byte, MaxTimeline+1)); err == nil {
		t.Error("saved a timeline over the limit")
	}
	s.Close()
	s = openDB(t, path)
	if got := must[[]byte](t)(s.Timeline(ctx, j.ID)); string(got) != "second" {
		t.Errorf("timeline after reopening = %q, want %q", got, "second")
	}
	if err := s.CancelJob(ctx, j.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Timeline(ctx, j.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("timeline of a deleted job: %v, want ErrNotFound", err)
	}
}
