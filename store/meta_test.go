package store_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/store"

	"github.com/braid-hpc/braid/store/storetest"
)

// TestMetaSQLite holds the embedded store to the conformance suite.
func TestMetaSQLite(t *testing.T) { storetest.Run(t, storetest.SQLite()) }

// TestMetaPostgres holds the PostgreSQL store to the same suite, on the
// server BRAID_TEST_POSTGRES names.
func TestMetaPostgres(t *testing.T) { storetest.Run(t, storetest.Postgres(t)) }

// TestCopy copies every kind of record between the stores, in every
// direction that can run here.
func TestCopy(t *testing.T) {
	t.Run("sqlite-sqlite", func(t *testing.T) { storetest.RunCopy(t, storetest.SQLite(), storetest.SQLite()) })
	t.Run("sqlite-postgres", func(t *testing.T) { storetest.RunCopy(t, storetest.SQLite(), storetest.Postgres(t)) })
	t.Run("postgres-sqlite", func(t *testing.T) { storetest.RunCopy(t, storetest.Postgres(t), storetest.SQLite()) })
}

func TestParseMetaURL(t *testing.T) {
	for _, tc := range []struct{ in, kind, target, err string }{
		{"sqlite:/var/lib/braid/jobs.db", store.KindSQLite, "/var/lib/braid/jobs.db", ""},
		{"sqlite:///var/lib/braid/jobs.db", store.KindSQLite, "/var/lib/braid/jobs.db", ""},
		{"jobs.db", store.KindSQLite, "jobs.db", ""},
		{"postgres://u@h:5432/d", store.KindPostgres, "postgres://u@h:5432/d", ""},
		{"postgresql://u@h/d?sslmode=disable", store.KindPostgres, "postgresql://u@h/d?sslmode=disable", ""},
		{"", "", "", "empty database URL"},
		{"sqlite:", "", "", "names no file"},
		{"mysql://u@h/d", "", "", `scheme "mysql"`},
	} {
		kind, target, err := store.ParseMetaURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseMetaURL(%q) = %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || kind != tc.kind || target != tc.target {
			t.Errorf("ParseMetaURL(%q) = %q, %q, %v; want %q, %q", tc.in, kind, target, err, tc.kind, tc.target)
		}
	}
}

// TestPostgresUnreachable: a PostgreSQL that does not answer fails the
// open with an error that names the host and port, not the password.
func TestPostgresUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = store.OpenMeta(ctx, "postgres://braid:s3cret-pw@"+addr+"/braid?connect_timeout=5", nil)
	if err == nil {
		t.Fatal("opened a PostgreSQL nobody serves")
	}
	if msg := err.Error(); !strings.Contains(msg, addr) || !strings.Contains(msg, "connect to PostgreSQL") || strings.Contains(msg, "s3cret") {
		t.Errorf("error %q: want the address %s and what failed, without the password", msg, addr)
	}
	if got := store.Redact("postgres://braid:s3cret-pw@db:5432/braid?sslmode=disable"); strings.Contains(got, "s3cret") || !strings.Contains(got, "db:5432") {
		t.Errorf("Redact = %q", got)
	}
}
