package cli

import (
	"context"
	"fmt"
	"io"
	"os"
)

func init() {
	register(&command{name: "put", summary: "upload a file to a braid server; prints its blob id", run: runPut})
}

func runPut(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "put", "FILE [flags] | DIR | FILE FILE...", `
Uploads FILE ("-" for standard input) to the server and prints the blob id
to pass to submit --input. The id is the SHA-256 of the content, so
uploading the same bytes again gives the same id. The upload streams:
the file is not held in memory. A progress bar is drawn on stderr when it
is a terminal (or with --progress).

Given a directory, several files or --dataset, it makes a dataset: every
file (of a directory: its regular files; subdirectories are refused) is
uploaded as a member named by its base name, names unique, and the
dataset id, the SHA-256 of its manifest, is printed on the last line. A
job over a dataset maps its operation over every member (see 'braid
submit --help'); 'braid ls' lists one, 'braid get' fetches one into a
directory.

  braid put book.txt
  braid put logs/                  # a dataset of the files in logs/
  braid put a.csv b.csv c.csv      # a dataset of three files`)
	cf := addClientFlags(fs, 0)
	showProgress := fs.Bool("progress", false, "draw progress on stderr even when it is not a terminal")
	asDataset := fs.Bool("dataset", false, "make a dataset even of one file")
	pos, code := parseInterspersed(env, fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) == 0 {
		env.Errorf("put: give a FILE, a DIR or several files")
		helpHint(env, "put")
		return 2
	}
	if fi, err := os.Stat(pos[0]); *asDataset || len(pos) > 1 || (err == nil && fi.IsDir()) {
		return runPutDataset(ctx, env, cf, pos)
	}
	name := pos[0]
	var in io.Reader = os.Stdin
	var size int64 // 0: unknown
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			env.Errorf("put: %v", err)
			return 1
		}
		defer f.Close()
		in = f
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("put: %v", err)
		return 2
	}
	defer cancel()
	var prog *progress
	if *showProgress || isTerminal(env.Stderr) {
		prog = startProgress(env.Stderr, isTerminal(env.Stderr), size, nil)
		in = progressReader{in, prog}
		defer prog.stop()
	}
	info, err := c.PutInfo(ctx, in)
	if prog != nil {
		prog.stop() // the bar's last line before any other output
	}
	if err != nil {
		return clientFail(env, "put", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, info)
	} else {
		fmt.Fprintln(env.Stdout, info.ID)
	}
	return 0
}

// runPutDataset is put of a dataset.
func runPutDataset(ctx context.Context, env *Env, cf *clientFlags, paths []string) int {
	files, err := datasetFiles(paths)
	if err != nil {
		env.Errorf("put: %v", err)
		return 1
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("put: %v", err)
		return 2
	}
	defer cancel()
	info, err := putDataset(ctx, c, files)
	if err != nil {
		return clientFail(env, "put", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, info)
	} else {
		fmt.Fprintf(env.Stderr, "braid: dataset of %d members, %d bytes\n", info.Members, info.Size)
		fmt.Fprintln(env.Stdout, info.ID)
	}
	return 0
}
