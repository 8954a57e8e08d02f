// Package storetest holds one conformance suite for every store.Meta:
// Run opens fresh databases of a Backend and checks that jobs, units,
// workers, tokens, operations, pipelines, uploads, timelines and tries
// behave as the store package documents, including results counted once
// when several handles (servers) share a database, restarts, and the
// refusal of a schema newer than the build.
//
// SQLite always runs; PostgreSQL runs when BRAID_TEST_POSTGRES holds the
// URL of a server where the test may create databases (each test creates
// its own, uniquely named, and drops it when it ends, failed or not).
// With BRAID_REQUIRE_POSTGRES=1 and no URL the tests fail instead of
// skipping.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/store"

	"github.com/jackc/pgx/v5"
)

// Backend is a kind of store under test.
type Backend struct {
	// Name names the backend in subtest names: sqlite, postgres.
	Name string
	// Fresh returns the --db URL of a new, empty database that is
	// removed when t ends.
	Fresh func(t testing.TB) string
	// SetVersion stamps the schema version of the (closed) database at
	// url as v, as a newer braid would have left it.
	SetVersion func(t testing.TB, url string, v int)
	// Exec runs query (plain SQL common to both dialects) on the
	// (closed) database at url, as an older braid would have left it.
	Exec func(t testing.TB, url, query string)
}

// SQLite is the embedded store, a file in t's temporary directory.
func SQLite() Backend {
	return Backend{
		Name:  store.KindSQLite,
		Fresh: func(t testing.TB) string { return "sqlite:" + filepath.Join(t.TempDir(), "braid.db") },
		SetVersion: func(t testing.TB, u string, v int) {
			t.Helper()
			sqliteExec(t, u, fmt.Sprintf("PRAGMA user_version = %d", v))
		},
		Exec: sqliteExec,
	}
}

func sqliteExec(t testing.TB, u, query string) {
	t.Helper()
	_, path, err := store.ParseMetaURL(u)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// Env names the variables that point the tests at PostgreSQL.
const (
	EnvPostgres        = "BRAID_TEST_POSTGRES"
	EnvRequirePostgres = "BRAID_REQUIRE_POSTGRES"
)

// Postgres is PostgreSQL at the URL in BRAID_TEST_POSTGRES: each Fresh
// database is created there and dropped when its test ends. Without the
// variable it skips t, or fails it under BRAID_REQUIRE_POSTGRES=1.
func Postgres(t testing.TB) Backend {
	t.Helper()
	admin := os.Getenv(EnvPostgres)
	if admin == "" {
		if os.Getenv(EnvRequirePostgres) == "1" {
			t.Fatalf("%s=1 but %s is empty: give the URL of a PostgreSQL server where the tests may create databases", EnvRequirePostgres, EnvPostgres)
		}
		t.Skipf("no PostgreSQL: set %s=postgres://USER@HOST:PORT/postgres (a server where the tests may create databases)", EnvPostgres)
	}
	return Backend{
		Name: store.KindPostgres,
		Fresh: func(t testing.TB) string {
			t.Helper()
			return freshPostgres(t, admin)
		},
		SetVersion: func(t testing.TB, u string, v int) {
			t.Helper()
			postgresExec(t, u, fmt.Sprintf("UPDATE braid_schema SET version = %d", v))
		},
		Exec: postgresExec,
	}
}

func postgresExec(t testing.TB, u, query string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

var dbSeq atomic.Int64

// freshPostgres creates a database with a name no other run uses on the
// server at admin, drops it when t ends, and returns its URL.
func freshPostgres(t testing.TB, admin string) string {
	t.Helper()
	var b [4]byte
	rand.Read(b[:])
	name := fmt.Sprintf("braid_test_%d_%d_%s", os.Getpid(), dbSeq.Add(1), hex.EncodeToString(b[:]))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("%s: %v", EnvPostgres, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("%s: %v", EnvPostgres, err)
	}
	u.Path = "/" + name
	return u.String()
}

// Clock is a fake time source that advances a second per reading, so
// every recorded time differs from the one before.
type Clock struct{ n atomic.Int64 }

// Now returns the next second.
func (c *Clock) Now() time.Time {
	return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(c.n.Add(1)) * time.Second)
}

// harness is one test's database: open opens (again) a handle on it.
type harness struct {
	b     Backend
	url   string
	clock Clock
}

// open opens a handle on the test's database, closed when t ends.
func (h *harness) open(t testing.TB) store.Meta {
	t.Helper()
	s, err := store.OpenMeta(t.Context(), h.url, &store.MetaOptions{Now: h.clock.Now})
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

// Run runs the conformance suite on b, each test on a fresh database.
func Run(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, *harness)
	}{
		{"JobLifecycle", testJobLifecycle},
		{"RestartMidJob", testRestartMidJob},
		{"FailCancelRequeue", testFailCancelRequeue},
		{"CreateJobValidates", testCreateJobValidates},
		{"FirstResultCountsOnce", testFirstResultCountsOnce},
		{"SharedDatabase", testSharedDatabase},
		{"BlobUsers", testBlobUsers},
		{"Workers", testWorkers},
		{"FinishUnits", testFinishUnits},
		{"CreateJobManyUnitsRoundTrip", testCreateJobManyUnitsRoundTrip},
		{"JobCounts", testJobCounts},
		{"RetryAndTries", testRetryAndTries},
		{"SetUnits", testSetUnits},
		{"Tokens", testTokens},
		{"Timeline", testTimeline},
		{"IsModule", testIsModule},
		{"Ops", testOps},
		{"Pipelines", testPipelines},
		{"Retention", testRetention},
		{"Datasets", testDatasets},
		{"DatasetBackfill", testDatasetBackfill},
		{"DatasetCreators", testDatasetCreators},
		{"KeptBlobs", testKeptBlobs},
		{"Owners", testOwners},
		{"SchemaNewerThanBuild", testSchemaNewerThanBuild},
		{"Leases", testLeases},
		{"FencedTakeover", testFencedTakeover},
		{"ConcurrentClaims", testConcurrentClaims},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, &harness{b: b, url: b.Fresh(t)})
		})
	}
}
