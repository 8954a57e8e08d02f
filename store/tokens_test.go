package store

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokens(t *testing.T) {
	ctx := t.Context()
	s := openDB(t, filepath.Join(t.TempDir(), "tokens.db"))
	a := must[Token](t)(s.AddToken(ctx, Token{ID: "00000000000000aa", Hash: "h1", Name: "ci", Role: "client"}))
	if a.Created.IsZero() || !a.LastUsed.IsZero() || !a.Revoked.IsZero() {
		t.Errorf("new token %+v", a)
	}
	b := must[Token](t)(s.AddToken(ctx, Token{ID: "00000000000000bb", Hash: "h2", Name: "node7", Role: "worker"}))
	for _, dup := range []Token{
		{ID: "00000000000000cc", Hash: "h3", Name: "ci", Role: "admin"},          // name
		{ID: "00000000000000cc", Hash: "h1", Name: "other", Role: "admin"},       // hash
		{ID: "00000000000000aa", Hash: "h4", Name: "other-again", Role: "admin"}, // id
	} {
		if _, err := s.AddToken(ctx, dup); !errors.Is(err, ErrConflict) {
			t.Errorf("duplicate %+v: %v", dup, err)
		}
	}
	used := b.Created.Add(90 * 1e9)
	if err := s.TouchToken(ctx, b.ID, used); err != nil {
		t.Fatal(err)
	}
	// An older use does not move it back.
	if err := s.TouchToken(ctx, b.ID, b.Created); err != nil {
		t.Fatal(err)
	}
	// Revoke by name, then by ID; a second revocation is a conflict.
	r := must[Token](t)(s.RevokeToken(ctx, "ci"))
	if r.ID != a.ID || r.Revoked.IsZero() {
		t.Errorf("revoked %+v", r)
	}
	if _, err := s.RevokeToken(ctx, a.ID); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "was revoked at") {
		t.Errorf("second revocation: %v", err)
	}
	if _, err := s.RevokeToken(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoking a missing token: %v", err)
	}
	list := must[[]Token](t)(s.Tokens(ctx))
	if len(list) != 2 || list[0].ID != a.ID || list[0].Revoked.IsZero() || list[1].ID != b.ID ||
		!list[1].LastUsed.Equal(used) || !list[1].Revoked.IsZero() || list[1].Hash != "h2" || list[1].Role != "worker" {
		t.Errorf("tokens %+v", list)
	}
}

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
