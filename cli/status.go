package cli

import (
	"context"
	"time"
)

func init() {
	register(&command{name: "status", summary: "show a job's status", run: runStatus})
}

func runStatus(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "status", "JOB|pPIPELINE [flags]", "Prints a job's state, unit counts, output blob id or error; for pN, every step of pipeline N.")
	cf := addClientFlags(fs, 30*time.Second)
	arg, code := oneArg(env, fs, args, "JOB id")
	if code >= 0 {
		return code
	}
	if pid, ok := pipelineID(arg); ok {
		c, ctx, cancel, err := cf.client(ctx)
		if err != nil {
			env.Errorf("status: %v", err)
			return 2
		}
		defer cancel()
		ps, err := c.Pipeline(ctx, pid)
		if err != nil {
			return clientFail(env, "status", err)
		}
		printPipeline(env.Stdout, ps, *cf.json)
		return 0
	}
	id, code := parseJobID(env, "status", arg)
	if code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("status: %v", err)
		return 2
	}
	defer cancel()
	st, err := c.Status(ctx, id)
	if err != nil {
		return clientFail(env, "status", err)
	}
	printJob(env.Stdout, st, *cf.json)
	return 0
}
