package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/braid-hpc/braid/store"
)

func init() {
	register(&command{
		name:    "blobs",
		summary: "copy a server's blobs between stores (a directory, an S3 bucket)",
		run:     runBlobs,
		subs:    []string{"copy"},
	})
}

const blobsDescription = `
Works on a server's blob store directly, not through a server.

  braid blobs copy --from SPEC --to SPEC   copy every blob the second lacks

Run 'braid blobs copy --help' for its flags.`

func runBlobs(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 {
		env.Errorf("Usage: braid blobs copy ...")
		env.Errorf("%s", strings.TrimSpace(blobsDescription))
		return 2
	}
	switch args[0] {
	case "copy":
		return runBlobsCopy(ctx, env, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(env.Stdout, "Usage: braid blobs copy ...")
		fmt.Fprintln(env.Stdout, strings.TrimSpace(blobsDescription))
		return 0
	}
	return unknownSubcommand(env, "blobs", args[0])
}

func runBlobsCopy(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "blobs copy", "--from SPEC --to SPEC", `
Copies every blob of the store --from into the store --to, unless it is
there already: to move a server's blobs from its data directory into an
S3-compatible object store (then start the server with --blobs), or
back. Stores are given as to 'braid server --blobs': dir:PATH (a server's
is DATA/blobs) or s3://BUCKET/PREFIX?endpoint=https://HOST:PORT, with the
credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or
~/.aws/credentials. Stop the server first, or blobs it adds meanwhile
are not copied (copy again: what is there already is skipped).

Every blob is verified as it is copied: a corrupt one is reported and not
copied, and the command exits 1 after copying the others. Running it
again copies only what is missing.

  braid blobs copy --from dir:/var/lib/braid/blobs \
    --to 's3://braid/blobs?endpoint=https://s3.example.net:9000'`)
	from := fs.String("from", "", "the `store` to copy from: "+store.BlobSpecHelp)
	to := fs.String("to", "", "the `store` to copy into (same forms as --from)")
	verbose := fs.BoolP("verbose", "V", false, "print every blob copied")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return failUsage(env, "blobs copy", fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if *from == "" || *to == "" {
		return failUsage(env, "blobs copy", fmt.Errorf("give both stores: --from SPEC --to SPEC"))
	}
	src, err := store.OpenBlobStore(ctx, *from, nil)
	if err != nil {
		env.Errorf("blobs copy: --from: %v", err)
		return 1
	}
	defer src.Close()
	dst, err := store.OpenBlobStore(ctx, *to, nil)
	if err != nil {
		env.Errorf("blobs copy: --to: %v", err)
		return 1
	}
	defer dst.Close()
	rep, err := store.CopyBlobs(ctx, dst, src, func(b store.BlobInfo, copied bool, err error) {
		switch {
		case err != nil:
			env.Errorf("blobs copy: %v", err)
		case copied && *verbose:
			fmt.Fprintf(env.Stdout, "copied %s (%s)\n", b.ID, formatBytes(b.Size))
		}
	})
	fmt.Fprintf(env.Stdout, "%d blobs copied (%s), %d there already, %d failed, from %s to %s\n",
		rep.Copied, formatBytes(rep.Bytes), rep.Skipped, len(rep.Failed), src, dst)
	if err != nil {
		env.Errorf("blobs copy: %v", err)
		return 1
	}
	if len(rep.Failed) > 0 {
		return 1
	}
	return 0
}
