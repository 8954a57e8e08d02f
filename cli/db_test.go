package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/store/storetest"
)

// TestDBMigrate creates a schema, finds it up to date the second time,
// and refuses one from a newer braid.
func TestDBMigrate(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "jobs.db")
	code, out, stderr := runBraid(t, time.Minute, "db", "migrate", "--db", db)
	if code != 0 || !strings.Contains(out, "created the schema, version") {
		t.Fatalf("first migrate: exit %d\n%s%s", code, out, stderr)
	}
	t.Setenv("BRAID_DB", db)
	code, out, stderr = runBraid(t, time.Minute, "db", "migrate")
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate (BRAID_DB): exit %d\n%s%s", code, out, stderr)
	}
	storetest.SQLite().SetVersion(t, db, 99)
	code, _, stderr = runBraid(t, time.Minute, "db", "migrate", "--db", db)
	if code != 1 || !strings.Contains(stderr, "schema version 99 is newer") || !strings.Contains(stderr, "upgrade braid") {
		t.Errorf("migrate of a newer schema: exit %d\n%s", code, stderr)
	}
	// A server on it refuses to start, saying why; BRAID_DB reaches it.
	t.Setenv("BRAID_KEY", "db-test-cluster-key-0123456789")
	code, _, stderr = runBraid(t, time.Minute, "server", "--data", t.TempDir(), "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "upgrade braid") {
		t.Errorf("server over a newer schema: exit %d\n%s", code, stderr)
	}
	// So does the config file's db key.
	t.Setenv("BRAID_DB", "")
	os.Unsetenv("BRAID_DB")
	cfg := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(cfg, []byte("db: "+db+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runBraid(t, time.Minute, "server", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--config", cfg)
	if code != 1 || !strings.Contains(stderr, "upgrade braid") {
		t.Errorf("server with db: in its config file, over a newer schema: exit %d\n%s", code, stderr)
	}
	code, _, stderr = runBraid(t, time.Minute, "db", "migrate", "--db", "mysql://u@h/d")
	if code != 1 || !strings.Contains(stderr, `scheme "mysql"`) {
		t.Errorf("migrate of an unknown scheme: exit %d\n%s", code, stderr)
	}
}

// TestDBCopy copies a SQLite store into a new SQLite file, and into
// PostgreSQL when BRAID_TEST_POSTGRES names one; a second copy into the
// same target is refused until --replace is given.
func TestDBCopy(t *testing.T) {
	src := "sqlite:" + filepath.Join(t.TempDir(), "src.db")
	s, err := store.OpenMeta(t.Context(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err := s.CreateJob(t.Context(), store.Job{Op: "noop", Input: "in"}, []store.Unit{{ID: 0}, {ID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RegisterWorker(t.Context(), store.Worker{Name: "w"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	targets := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return storetest.SQLite().Fresh(t) },
		"postgres": func(t *testing.T) string { return storetest.Postgres(t).Fresh(t) },
	}
	for name, fresh := range targets {
		t.Run(name, func(t *testing.T) {
			dst := fresh(t)
			code, out, stderr := runBraid(t, time.Minute, "db", "copy", "--from", src, "--to", dst)
			if code != 0 || !strings.Contains(out, "1 jobs") || !strings.Contains(out, "2 units") || !strings.Contains(out, "1 workers") {
				t.Fatalf("copy: exit %d\n%s%s", code, out, stderr)
			}
			code, _, stderr = runBraid(t, time.Minute, "db", "copy", "--from", src, "--to", dst)
			if code != 1 || !strings.Contains(stderr, "not empty") || !strings.Contains(stderr, "--replace") {
				t.Errorf("second copy: exit %d\n%s", code, stderr)
			}
			if code, out, stderr := runBraid(t, time.Minute, "db", "copy", "--from", src, "--to", dst, "--replace"); code != 0 {
				t.Errorf("copy --replace: exit %d\n%s%s", code, out, stderr)
			}
			d, err := store.OpenMeta(context.Background(), dst, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			got, err := d.Job(t.Context(), j.ID)
			if err != nil || got.Op != "noop" || got.Total != 2 || !got.Submitted.Equal(j.Submitted) {
				t.Errorf("copied job: %+v, %v; want %+v", got, err, j)
			}
		})
	}
	if code, _, stderr := runBraid(t, time.Minute, "db", "copy", "--from", src); code != 2 || !strings.Contains(stderr, "--to") {
		t.Errorf("copy without --to: exit %d\n%s", code, stderr)
	}
}
