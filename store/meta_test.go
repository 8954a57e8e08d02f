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
