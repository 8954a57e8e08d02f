package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Copying a metadata store into another (braid db copy) goes table by
// table, row by row, column for column: both stores have the same
// tables and columns, so nothing is rebuilt through the Meta methods and
// nothing is lost, IDs included. The sequences that hand out job,
// worker and pipeline IDs are copied too (a deleted job's ID is not
// handed out again), and kept at least at the largest ID copied.

// colKind is how a column's values travel between the stores.
type colKind byte

const (
	colInt     colKind = iota // int64
	colText                   // string
	colNulText                // string or nil (NULL)
	colBool                   // bool
	colFloat                  // float64
	colBytes                  // []byte
)

type column struct {
	name string
	kind colKind
}

// table is one table to copy: its columns, its key (the order rows are
// read in) and the column, if any, whose sequence hands out IDs.
type table struct {
	name string
	cols []column
	key  string
	seq  string
}

func cols(kind colKind, names ...string) []column {
	out := make([]column, len(names))
	for i, n := range names {
		out[i] = column{n, kind}
	}
	return out
}

func concat(parts ...[]column) []column {
	var out []column
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// tables are every table of the schema, parents before children.
var tables = []table{
	{name: "jobs", key: "id", seq: "id", cols: concat(
		cols(colInt, "id"), cols(colText, "op", "input", "params"),
		cols(colInt, "hint_units", "tile_w", "tile_h", "hint_repeat"), cols(colText, "policy"), cols(colInt, "in_flight"),
		cols(colText, "state", "output", "error"),
		cols(colInt, "submitted", "started", "finished", "total", "done", "failed", "running", "compute_ns"),
		cols(colText, "spec"), cols(colInt, "retries", "expired"), cols(colText, "owner"))},
	{name: "units", key: "job, id", cols: concat(
		cols(colInt, "job", "id"), cols(colNulText, "params"), cols(colText, "blob"), cols(colInt, "off", "len"),
		cols(colText, "deps", "state", "worker"), cols(colInt, "attempts"), cols(colText, "result", "error"),
		cols(colInt, "compute_ns"), cols(colBool, "reduce"), cols(colInt, "fails", "lost"))},
	{name: "workers", key: "seq", seq: "seq", cols: concat(
		cols(colInt, "seq"), cols(colText, "id", "name", "addresses"),
		cols(colInt, "cores", "memory", "disk", "cpu_mhz", "threads"), cols(colText, "ops"),
		cols(colInt, "registered", "last_seen", "running", "queued"), cols(colFloat, "load"), cols(colInt, "done"))},
	{name: "user_ops", key: "name, version", cols: concat(
		cols(colText, "name"), cols(colInt, "version"), cols(colText, "hash"), cols(colInt, "size"),
		cols(colText, "doc", "split", "merge", "params"), cols(colInt, "added", "removed"), cols(colText, "owner"))},
	{name: "pipelines", key: "id", seq: "id", cols: concat(
		cols(colInt, "id"), cols(colText, "name", "steps"), cols(colInt, "submitted"), cols(colText, "owner"))},
	{name: "uploads", key: "id, owner", cols: concat(cols(colText, "id", "owner"), cols(colInt, "added", "alone"))},
	{name: "api_tokens", key: "id", cols: concat(
		cols(colText, "id", "hash", "name", "role"), cols(colInt, "created", "last_used", "revoked"), cols(colText, "grp"))},
	{name: "timelines", key: "job", cols: concat(cols(colInt, "job"), cols(colBytes, "data"))},
	{name: "dataset_members", key: "dataset, member", cols: cols(colText, "dataset", "member", "creator")},
	{name: "dataset_backfill", key: "id", cols: cols(colText, "id")},
}

func (t table) colNames() string {
	names := make([]string, len(t.cols))
	for i, c := range t.cols {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// newRow returns scan destinations for one row of t, and a function
// that returns the values scanned, in their travelling kinds.
func (t table) newRow() ([]any, func() []any) {
	dst := make([]any, len(t.cols))
	for i, c := range t.cols {
		switch c.kind {
		case colInt:
			dst[i] = new(int64)
		case colText:
			dst[i] = new(string)
		case colNulText:
			dst[i] = new(sql.NullString)
		case colBool:
			dst[i] = new(bool)
		case colFloat:
			dst[i] = new(float64)
		case colBytes:
			dst[i] = new([]byte)
		}
	}
	return dst, func() []any {
		out := make([]any, len(dst))
		for i, d := range dst {
			switch v := d.(type) {
			case *int64:
				out[i] = *v
			case *string:
				out[i] = *v
			case *sql.NullString:
				if v.Valid {
					out[i] = v.String
				}
			case *bool:
				out[i] = *v
			case *float64:
				out[i] = *v
			case *[]byte:
				out[i] = append([]byte{}, *v...)
			}
		}
		return out
	}
}

// each calls fn with every row of t that rows hold.
func (t table) each(rows keyRows, fn func([]any) error) error {
	dst, vals := t.newRow()
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return err
		}
		if err := fn(vals()); err != nil {
			return err
		}
	}
	return rows.Err()
}

// copier is a store that can be copied from and into.
type copier interface {
	// dump calls fn with every row of t, by key.
	dump(ctx context.Context, t table, fn func(row []any) error) error
	// load runs fn in one transaction that may add rows of a table
	// and set its sequence; clear first removes every row.
	load(ctx context.Context, clear bool, fn func(l loader) error) error
	// sequence returns the last ID t's sequence handed out, 0 if none.
	sequence(ctx context.Context, t table) (int64, error)
	// rows counts the rows of t.
	rows(ctx context.Context, t table) (int64, error)
}

// loader adds rows inside a copier's load transaction.
type loader interface {
	add(ctx context.Context, t table, rows [][]any) error
	// setSequence makes t's sequence hand out IDs after last.
	setSequence(ctx context.Context, t table, last int64) error
}

// CopyStats counts what Copy copied, by table.
type CopyStats map[string]int64

// ErrNotEmpty is returned by Copy for a target that holds records, when
// it was not told to replace them.
var ErrNotEmpty = errors.New("store: the target database is not empty")

// Copy copies every record of from into to, IDs and ID sequences
// included, in one transaction on to: a failed copy leaves to as it was.
// A target that holds any record is refused with ErrNotEmpty unless
// replace is set; then its records are deleted first.
func Copy(ctx context.Context, from, to Meta, replace bool) (CopyStats, error) {
	src, ok := from.(copier)
	if !ok {
		return nil, fmt.Errorf("store: copy: cannot read a %T", from)
	}
	dst, ok := to.(copier)
	if !ok {
		return nil, fmt.Errorf("store: copy: cannot write a %T", to)
	}
	if !replace {
		for _, t := range tables {
			n, err := dst.rows(ctx, t)
			if err != nil {
				return nil, fmt.Errorf("store: copy: count the target's %s: %w", t.name, err)
			}
			if n > 0 {
				return nil, fmt.Errorf("%w: it holds %d rows of %s (replace them, or copy into a new database)", ErrNotEmpty, n, t.name)
			}
		}
	}
	stats := CopyStats{}
	err := dst.load(ctx, replace, func(l loader) error {
		clear(stats)
		for _, t := range tables {
			const batch = 1024
			var rows [][]any
			var maxID int64
			err := src.dump(ctx, t, func(row []any) error {
				if t.seq != "" {
					maxID = max(maxID, row[0].(int64))
				}
				rows = append(rows, row)
				if len(rows) < batch {
					return nil
				}
				err := l.add(ctx, t, rows)
				stats[t.name] += int64(len(rows))
				rows = rows[:0]
				return err
			})
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			if len(rows) > 0 {
				if err := l.add(ctx, t, rows); err != nil {
					return fmt.Errorf("%s: %w", t.name, err)
				}
				stats[t.name] += int64(len(rows))
			}
			if t.seq == "" {
				continue
			}
			last, err := src.sequence(ctx, t)
			if err != nil {
				return fmt.Errorf("%s: sequence: %w", t.name, err)
			}
			if err := l.setSequence(ctx, t, max(last, maxID)); err != nil {
				return fmt.Errorf("%s: sequence: %w", t.name, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: copy: %w", err)
	}
	return stats, nil
}

// SQLite's side of a copy.

func (s *SQLite) dump(ctx context.Context, t table, fn func([]any) error) error {
	rows, err := s.db.QueryContext(ctx, "SELECT "+t.colNames()+" FROM "+t.name+" ORDER BY "+t.key)
	if err != nil {
		return wrapDB(err)
	}
	defer rows.Close()
	return wrapDB(t.each(rows, fn))
}

func (s *SQLite) sequence(ctx context.Context, t table) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, "SELECT seq FROM sqlite_sequence WHERE name = ?", t.name).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return n, wrapDB(err)
}

func (s *SQLite) rows(ctx context.Context, t table) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+t.name).Scan(&n)
	return n, wrapDB(err)
}

type sqliteLoader struct{ tx *sql.Tx }

func (s *SQLite) load(ctx context.Context, clear bool, fn func(loader) error) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		if clear {
			for i := len(tables) - 1; i >= 0; i-- {
				if _, err := tx.ExecContext(ctx, "DELETE FROM "+tables[i].name); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, "DELETE FROM sqlite_sequence"); err != nil {
				return err
			}
		}
		return fn(sqliteLoader{tx})
	})
}

func (l sqliteLoader) add(ctx context.Context, t table, rows [][]any) error {
	st, err := l.tx.PrepareContext(ctx, "INSERT INTO "+t.name+" ("+t.colNames()+") VALUES "+valueRows(1, len(t.cols)))
	if err != nil {
		return err
	}
	defer st.Close()
	for _, r := range rows {
		if _, err := st.ExecContext(ctx, r...); err != nil {
			return err
		}
	}
	return nil
}

func (l sqliteLoader) setSequence(ctx context.Context, t table, last int64) error {
	if _, err := l.tx.ExecContext(ctx, "DELETE FROM sqlite_sequence WHERE name = ?", t.name); err != nil {
		return err
	}
	if last == 0 {
		return nil
	}
	_, err := l.tx.ExecContext(ctx, "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", t.name, last)
	return err
}

// PostgreSQL's side of a copy.

func (p *Postgres) dump(ctx context.Context, t table, fn func([]any) error) error {
	rows, err := p.pool.Query(ctx, "SELECT "+t.colNames()+" FROM "+t.name+" ORDER BY "+t.key)
	if err != nil {
		return p.wrap(err)
	}
	defer rows.Close()
	return p.wrap(t.each(rows, fn))
}

// pgSequence names the sequence of t's ID column.
func pgSequence(t table) string { return t.name + "_" + t.seq + "_seq" }

func (p *Postgres) sequence(ctx context.Context, t table) (int64, error) {
	var last int64
	var called bool
	if err := p.pool.QueryRow(ctx, "SELECT last_value, is_called FROM "+pgSequence(t)).Scan(&last, &called); err != nil {
		return 0, p.wrap(err)
	}
	if !called {
		return 0, nil
	}
	return last, nil
}

func (p *Postgres) rows(ctx context.Context, t table) (int64, error) {
	var n int64
	err := p.pool.QueryRow(ctx, "SELECT COUNT(*) FROM "+t.name).Scan(&n)
	return n, p.wrap(err)
}

type pgLoader struct{ tx pgx.Tx }

func (p *Postgres) load(ctx context.Context, clear bool, fn func(loader) error) error {
	return p.tx(ctx, func(tx pgx.Tx) error {
		if clear {
			names := make([]string, len(tables))
			for i, t := range tables {
				names[i] = t.name
			}
			if _, err := tx.Exec(ctx, "TRUNCATE "+strings.Join(names, ", ")+" RESTART IDENTITY"); err != nil {
				return err
			}
		}
		return fn(pgLoader{tx})
	})
}

func (l pgLoader) add(ctx context.Context, t table, rows [][]any) error {
	names := make([]string, len(t.cols))
	for i, c := range t.cols {
		names[i] = c.name
	}
	_, err := l.tx.CopyFrom(ctx, pgx.Identifier{t.name}, names, pgx.CopyFromRows(rows))
	return err
}

func (l pgLoader) setSequence(ctx context.Context, t table, last int64) error {
	var err error
	if last == 0 {
		_, err = l.tx.Exec(ctx, "SELECT setval($1, 1, false)", pgSequence(t))
	} else {
		_, err = l.tx.Exec(ctx, "SELECT setval($1, $2, true)", pgSequence(t), last)
	}
	return err
}
