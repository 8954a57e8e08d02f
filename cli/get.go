package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/braid-hpc/braid/internal/outfile"
)

func init() {
	register(&command{name: "get", summary: "download a blob (e.g. a job's output) to a file", run: runGet})
}

func runGet(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "get", "ID -o FILE [flags]", `
Downloads blob ID, e.g. a job's output, into FILE ("-" for standard
output). The file appears whole or not at all. A dataset's ID (see
'braid put DIR') fetches its members as files into the directory FILE
(made if missing), and -o - writes its manifest. An existing file (or, for
a dataset, member file) is not replaced unless --force is given. A progress
bar is drawn on stderr when it is a terminal (or with --progress).`)
	out := fs.StringP("output", "o", "", "write to this `file` (required; - for standard output)")
	force := fs.Bool("force", false, "replace an existing output file")
	cf := addClientFlags(fs, 0)
	showProgress := fs.Bool("progress", false, "draw progress on stderr even when it is not a terminal")
	id, code := oneArg(env, fs, args, "blob ID")
	if code >= 0 {
		return code
	}
	if *out == "" {
		env.Errorf("get: give the output file with -o FILE (or -o - for standard output)")
		return 2
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("get: %v", err)
		return 2
	}
	defer cancel()
	var prog *progress
	if *showProgress || isTerminal(env.Stderr) {
		prog = startProgress(env.Stderr, isTerminal(env.Stderr), 0, nil)
		defer prog.stop()
	}
	if *out == "-" {
		_, err := c.Get(ctx, id, progressWriter{env.Stdout, prog})
		if prog != nil {
			prog.stop()
		}
		if err != nil {
			return clientFail(env, "get", err)
		}
		return 0
	}
	if d, err := c.Dataset(ctx, id); err == nil {
		if !*force {
			for _, m := range d.Members {
				if err := outfile.CheckFree(filepath.Join(*out, m.Name)); err != nil {
					env.Errorf("get: %v", forceHint("get", err))
					return 1
				}
			}
		}
		n, err := getDataset(ctx, c, id, d, *out, *force)
		if prog != nil {
			prog.stop()
		}
		if err != nil {
			return clientFail(env, "get", err)
		}
		if *cf.json {
			jsonLine(env.Stdout, map[string]any{"id": id, "size": n, "dir": *out, "members": len(d.Members)})
		} else {
			fmt.Fprintf(env.Stderr, "braid: wrote %d files into %s (%d bytes)\n", len(d.Members), *out, n)
		}
		return 0
	}
	// download writes the blob to f and closes it.
	download := func(f *os.File) (int64, error) {
		n, err := c.Get(ctx, id, progressWriter{f, prog})
		if prog != nil {
			prog.stop()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return n, err
	}
	if f, ok, err := outfile.OpenSpecial(*out); ok || err != nil {
		// A device or pipe (-o /dev/null): written into, never replaced.
		if err != nil {
			env.Errorf("get: %v", err)
			return 1
		}
		n, err := download(f)
		if err != nil {
			return clientFail(env, "get", err)
		}
		if *cf.json {
			jsonLine(env.Stdout, map[string]any{"id": id, "size": n, "file": *out})
		}
		return 0
	}
	if !*force {
		if err := outfile.CheckFree(*out); err != nil {
			env.Errorf("get: %v", forceHint("get", err))
			return 1
		}
	}
	tmp, err := outfile.CreateTemp(filepath.Dir(*out), "."+filepath.Base(*out)+".part-*", outfile.Perm)
	if err != nil {
		env.Errorf("get: %v", err)
		return 1
	}
	defer os.Remove(tmp.Name())
	n, err := download(tmp)
	if err != nil {
		return clientFail(env, "get", err)
	}
	if err := outfile.Place(tmp.Name(), *out, *force); err != nil {
		env.Errorf("get: %v", forceHint("get", err))
		return 1
	}
	if *cf.json {
		jsonLine(env.Stdout, map[string]any{"id": id, "size": n, "file": *out})
	} else {
		fmt.Fprintf(env.Stderr, "braid: wrote %s (%d bytes)\n", *out, n)
	}
	return 0
}

// forceHint adds to an *outfile.ExistsError how cmd replaces the file.
func forceHint(cmd string, err error) error {
	if _, ok := errors.AsType[*outfile.ExistsError](err); ok {
		return fmt.Errorf("%w (braid %s --force replaces it)", err, cmd)
	}
	return err
}
