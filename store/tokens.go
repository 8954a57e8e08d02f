package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Token is a control API access token as the server keeps it: the
// SHA-256 of its secret, never the secret.
type Token struct {
	// ID identifies the token in listings and revocations.
	ID string
	// Hash is the hex SHA-256 of the secret.
	Hash string
	// Name is unique among the tokens, revoked ones included.
	Name string
	// Role is what the token may do: admin, client, worker or monitor.
	Role    string
	Created time.Time
	// LastUsed is zero if the token was never used.
	LastUsed time.Time
	// Revoked is zero while the token is valid.
	Revoked time.Time
	// Group names the group whose tokens share what they make (see
	// owners.go); empty for a token on its own.
	Group string
}

const tokenColumns = "id, hash, name, role, created, last_used, revoked, grp"

func scanToken(sc interface{ Scan(...any) error }) (Token, error) {
	var t Token
	var created, used, revoked int64
	if err := sc.Scan(&t.ID, &t.Hash, &t.Name, &t.Role, &created, &used, &revoked, &t.Group); err != nil {
		return Token{}, err
	}
	t.Created, t.LastUsed, t.Revoked = fromNanos(created), fromNanos(used), fromNanos(revoked)
	return t, nil
}

// AddToken stores a new token and returns it with Created set. A token
// with the same ID, hash or name exists already: ErrConflict.
func (s *SQLite) AddToken(ctx context.Context, t Token) (Token, error) {
	t.Created, t.LastUsed, t.Revoked = s.now().UTC(), time.Time{}, time.Time{}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var n int
		err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM api_tokens WHERE id = ? OR hash = ? OR name = ?",
			t.ID, t.Hash, t.Name).Scan(&n)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("a token named %q or with the same id exists: %w", t.Name, ErrConflict)
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO api_tokens ("+tokenColumns+") VALUES (?, ?, ?, ?, ?, 0, 0, ?)",
			t.ID, t.Hash, t.Name, t.Role, nanos(t.Created), t.Group)
		return err
	})
	if err != nil {
		return Token{}, fmt.Errorf("store: add token: %w", err)
	}
	return t, nil
}

// Tokens returns every token, revoked ones included, oldest first.
func (s *SQLite) Tokens(ctx context.Context) ([]Token, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT "+tokenColumns+" FROM api_tokens ORDER BY created, id")
	if err != nil {
		return nil, fmt.Errorf("store: tokens: %w", wrapDB(err))
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("store: tokens: %w", wrapDB(err))
		}
		out = append(out, t)
	}
	return out, wrapDB(rows.Err())
}

// RevokeToken revokes the token with ID or name ref and returns it with
// Revoked set: ErrNotFound if there is none, ErrConflict if it is revoked
// already.
func (s *SQLite) RevokeToken(ctx context.Context, ref string) (Token, error) {
	var t Token
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		t, err = scanToken(tx.QueryRowContext(ctx, "SELECT "+tokenColumns+" FROM api_tokens WHERE id = ? OR name = ? ORDER BY id = ? DESC LIMIT 1",
			ref, ref, ref))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("no token with id or name %q: %w", ref, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if !t.Revoked.IsZero() {
			return fmt.Errorf("token %s (%s) was revoked at %s: %w", t.ID, t.Name, t.Revoked.Format(time.RFC3339), ErrConflict)
		}
		t.Revoked = s.now().UTC()
		_, err = tx.ExecContext(ctx, "UPDATE api_tokens SET revoked = ? WHERE id = ?", nanos(t.Revoked), t.ID)
		return err
	})
	if err != nil {
		return Token{}, fmt.Errorf("store: revoke token: %w", err)
	}
	return t, nil
}

// TouchToken records that token id was used at time at.
func (s *SQLite) TouchToken(ctx context.Context, id string, at time.Time) error {
	_, err := s.db.ExecContext(ctx, "UPDATE api_tokens SET last_used = ? WHERE id = ? AND last_used < ?", nanos(at), id, nanos(at))
	if err != nil {
		return fmt.Errorf("store: token %s used: %w", id, wrapDB(err))
	}
	return nil
}
