package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/braid-hpc/braid/store"
)

func init() {
	register(&command{
		name:    "db",
		summary: "migrate a server's metadata store, or copy it into another (SQLite, PostgreSQL)",
		run:     runDB,
		subs:    []string{"migrate", "copy"},
	})
}

const dbDescription = `
Manages the metadata store of braid servers: jobs, units, workers, tokens,
operations, pipelines, uploads and timelines; not the blobs, which stay
in the server's data directory. A store is named by a URL:

  sqlite:PATH        a SQLite file (a bare path works too); the default of
                     'braid server', DATA/jobs.db, needs no flag
  postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=...
                     a PostgreSQL database (postgresql:// too); several
                     servers can share one

  braid db migrate --db URL             create or upgrade the schema; a
                                        schema newer than this braid is refused
  braid db copy --from URL --to URL     copy every record, IDs included

A server migrates its store itself when it starts; 'braid db migrate'
does it ahead of time, or checks what a database holds. To move a server
from SQLite to PostgreSQL: stop it, copy, start it with --db:

  braid db copy --from sqlite:/var/lib/braid/jobs.db --to postgres://braid@db:5432/braid
  braid server --data /var/lib/braid --db postgres://braid@db:5432/braid

--db also reads BRAID_DB, so a password need not be on the command line
(or put it in ~/.pgpass, or PGPASSWORD).`

func runDB(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(env.Stderr, "Usage: braid db migrate|copy ...")
		fmt.Fprintln(env.Stderr, strings.TrimSpace(dbDescription))
		return 2
	}
	switch args[0] {
	case "migrate":
		return runDBMigrate(ctx, env, args[1:])
	case "copy":
		return runDBCopy(ctx, env, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(env.Stdout, "Usage: braid db migrate|copy ...")
		fmt.Fprintln(env.Stdout, strings.TrimSpace(dbDescription))
		return 0
	}
	return unknownSubcommand(env, "db", args[0])
}

// dbTimeout bounds a db command's connecting and migrating.
const dbTimeout = 10 * time.Minute

func runDBMigrate(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "db migrate", "--db URL", `
Creates the metadata store's schema, or upgrades it to this braid's
version, and prints the version before and after. A schema newer than this
braid understands is refused: upgrade braid instead.`)
	db := fs.String("db", "", "the store's `url`: sqlite:PATH or postgres://USER@HOST:PORT/DB (required; also BRAID_DB)")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return failUsage(env, "db migrate", fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if *db == "" {
		*db = getenv("BRAID_DB")
	}
	if *db == "" {
		return failUsage(env, "db migrate", errors.New("give the store with --db URL (or BRAID_DB)"))
	}
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	from, to, err := store.Migrate(ctx, *db)
	if err != nil {
		env.Errorf("db migrate: %v", err)
		return 1
	}
	switch {
	case from == 0:
		fmt.Fprintf(env.Stdout, "%s: created the schema, version %d\n", store.Redact(*db), to)
	case from == to:
		fmt.Fprintf(env.Stdout, "%s: schema version %d, up to date\n", store.Redact(*db), to)
	default:
		fmt.Fprintf(env.Stdout, "%s: migrated the schema from version %d to %d\n", store.Redact(*db), from, to)
	}
	return 0
}

func runDBCopy(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "db copy", "--from URL --to URL [--replace]", `
Copies every record of one metadata store into another, in one transaction
on the target: jobs and their units, workers, tokens, operations,
pipelines, uploads, timelines, with their IDs, and the counters that hand
out new IDs, so that jobs submitted after the copy do not reuse an ID. A
target that holds records is refused unless --replace is given. Stop the
servers that use the source first: a copy of a store in use may miss what
they write meanwhile. Blobs are not copied; they stay in the data
directory.

  braid db copy --from sqlite:/var/lib/braid/jobs.db --to postgres://braid@db:5432/braid`)
	from := fs.String("from", "", "`url` of the store to read: sqlite:PATH or postgres://... (required)")
	to := fs.String("to", "", "`url` of the store to write, created or migrated as needed (required)")
	replace := fs.Bool("replace", false, "delete the target's records first, instead of refusing a target that has some")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return failUsage(env, "db copy", fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if *from == "" || *to == "" {
		return failUsage(env, "db copy", errors.New("give both --from URL and --to URL"))
	}
	if *from == *to {
		return failUsage(env, "db copy", errors.New("--from and --to name the same store"))
	}
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	src, err := store.OpenMeta(ctx, *from, nil)
	if err != nil {
		env.Errorf("db copy: --from: %v", err)
		return 1
	}
	defer src.Close()
	dst, err := store.OpenMeta(ctx, *to, nil)
	if err != nil {
		env.Errorf("db copy: --to: %v", err)
		return 1
	}
	defer dst.Close()
	stats, err := store.Copy(ctx, src, dst, *replace)
	if errors.Is(err, store.ErrNotEmpty) {
		env.Errorf("db copy: %s: %v; give --replace to delete them first", store.Redact(*to), err)
		return 1
	}
	if err != nil {
		env.Errorf("db copy: %v", err)
		return 1
	}
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(stats)) {
		parts = append(parts, fmt.Sprintf("%d %s", stats[t], t))
	}
	fmt.Fprintf(env.Stdout, "copied %s into %s: %s\n", store.Redact(*from), store.Redact(*to), strings.Join(parts, ", "))
	return 0
}
