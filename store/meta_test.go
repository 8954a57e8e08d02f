package store_test

import (
	"context"
	"fmt"
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

// BenchmarkMeta measures the store under a server's load, SQLite and
// PostgreSQL side by side: each iteration creates a job of 64 units,
// records their results in batches of batch (as the server's recorder
// does: one transaction for whatever arrived together), and finishes
// the job.
//
//	BRAID_TEST_POSTGRES=postgres://... go test -run '^$' -bench Meta ./store/
func BenchmarkMeta(b *testing.B) {
	const units = 64
	backends := []func(testing.TB) storetest.Backend{
		func(testing.TB) storetest.Backend { return storetest.SQLite() },
		storetest.Postgres,
	}
	for _, backend := range backends {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("store=%s/batch=%d", backend(b).Name, batch), func(b *testing.B) {
				ctx := b.Context()
				s, err := store.OpenMeta(ctx, backend(b).Fresh(b), nil)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				w, err := s.RegisterWorker(ctx, store.Worker{Name: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				us := make([]store.Unit, units)
				for i := range us {
					us[i] = store.Unit{ID: uint64(i), Blob: strings.Repeat("a", 64), Off: int64(i) << 20, Len: 1 << 20}
				}
				rs := make([]store.UnitResult, units)
				for b.Loop() {
					j, err := s.CreateJob(ctx, store.Job{Op: "checksum", Input: strings.Repeat("a", 64)}, us)
					if err != nil {
						b.Fatal(err)
					}
					for i := range rs {
						rs[i] = store.UnitResult{Job: j.ID, ID: uint64(i), Worker: w.ID, Result: strings.Repeat("b", 64), ComputeNanos: 1}
					}
					for i := 0; i < units; i += batch {
						if _, err := s.FinishUnits(ctx, rs[i:i+batch]); err != nil {
							b.Fatal(err)
						}
					}
					if err := s.FinishJob(ctx, j.ID, strings.Repeat("c", 64)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
				b.ReportMetric(float64(b.N*units)/b.Elapsed().Seconds(), "units/s")
			})
		}
	}
}
