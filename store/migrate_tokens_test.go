package store

import (
	"database/sql"
	"path/filepath"
	"testing"
)

// TestMigrateTokens: a database of schema version 2 gets the tokens table
// and keeps its jobs.
func TestMigrateTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{schema, migrations[0], "INSERT INTO pipelines (name, steps, submitted) VALUES ('p', '[]', 1)",
		"PRAGMA user_version = 2"} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s := openDB(t, path)
	var v, n int
	if err := s.db.QueryRowContext(t.Context(), "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Errorf("version %d, %v", v, err)
	}
	if err := s.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM pipelines").Scan(&n); err != nil || n != 1 {
		t.Errorf("pipelines %d, %v", n, err)
	}
	if _, err := s.AddToken(t.Context(), Token{ID: "1", Hash: "h", Name: "n", Role: "admin"}); err != nil {
		t.Error(err)
	}
}
