package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/braid-hpc/braid/store"
)

func init() {
	register(&command{name: "rm", summary: "delete blobs or datasets from a server (a dataset with its members)", run: runRm})
}

func runRm(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "rm", "ID... [flags]", `
Deletes each blob or dataset ID from the server (DELETE /v1/blobs/ID): an
upload, or a job's output once its retention allows. A dataset goes with
its members, but those something else needs: your own upload of the
same bytes on its own (braid put FILE), another client's upload of the
same bytes, another dataset, an unfinished job, a kept output. Only
your own upload goes while another owner's upload, dataset or job needs
the same bytes. Refused, naming why: a blob an unfinished job uses, a
kept output, a member of a dataset (delete the dataset), an operation's
module. Prints "deleted ID" for each; after trying them all, exits 1 if
any failed (2 for a credential to fix).`)
	cf := addClientFlags(fs, 30*time.Second)
	ids, code := parseInterspersed(env, fs, args)
	if code >= 0 {
		return code
	}
	if len(ids) == 0 {
		env.Errorf("rm: want at least one blob or dataset ID")
		helpHint(env, "rm")
		return 2
	}
	for _, id := range ids {
		if !store.ValidID(id) {
			env.Errorf("rm: %q is not a blob id (64 hex digits, as braid put prints)", id)
			return 2
		}
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("rm: %v", err)
		return 2
	}
	defer cancel()
	code = 0
	for _, id := range ids {
		if err := c.DeleteBlob(ctx, id); err != nil {
			if c := clientFail(env, "rm", err); c > code {
				code = c
			}
			continue
		}
		fmt.Fprintf(env.Stdout, "deleted %s\n", id)
	}
	return code
}
