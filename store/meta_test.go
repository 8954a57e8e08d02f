package store_test

import (
	"testing"

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
