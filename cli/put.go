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
	fs := newFlags(env, "put", "FILE [flags]", `
Uploads FILE ("-" for standard input) to the server and prints the blob id
to pass to submit --input. The id is the SHA-256 of the content, so
uploading the same bytes again gives the same id. The upload streams:
the file is not held in memory. A progress bar is drawn on stderr when it
is a terminal (or with --progress).`)
	cf := addClientFlags(fs, 0)
	showProgress := fs.Bool("progress", false, "draw progress on stderr even when it is not a terminal")
	name, code := oneArg(env, fs, args, "FILE")
	if code >= 0 {
		return code
	}
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
