package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/braid-hpc/braid/api"
)

func init() {
	register(&command{name: "ops", summary: "list the operations a server runs", run: runOps})
}

func runOps(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "ops", "[flags]", "Lists the operations jobs may name, with their parameters.")
	cf := addClientFlags(fs, 30*time.Second)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("ops: %v", err)
		return 2
	}
	defer cancel()
	list, err := c.Ops(ctx)
	if err != nil {
		return clientFail(env, "ops", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, api.OpList{Ops: list})
		return 0
	}
	for _, op := range list {
		tiles := ""
		if op.Tiles {
			tiles = " (takes --tile)"
		}
		fmt.Fprintf(env.Stdout, "%-10s %s%s\n", op.Name, op.Doc, tiles)
		if op.Kind == api.OpModule {
			fmt.Fprintf(env.Stdout, "  module v%d sha256 %s, %s, added %s\n", op.Version, op.Hash, formatBytes(op.Size),
				op.Added.Local().Format(time.DateTime))
			if op.Split != "" || op.Merge != "" {
				fmt.Fprintf(env.Stdout, "  default --split %s --merge %s\n", or(op.Split, "whole"), or(op.Merge, "concat"))
			}
			if len(op.Params) == 0 {
				fmt.Fprintf(env.Stdout, "  --param NAME=VALUE  any; each is an environment variable of the module\n")
			}
		}
		for _, p := range op.Params {
			def := ""
			if p.Default != "" {
				def = " (default " + p.Default + ")"
			}
			fmt.Fprintf(env.Stdout, "  --param %s=...  %s%s\n", p.Name, p.Doc, def)
		}
	}
	return 0
}
