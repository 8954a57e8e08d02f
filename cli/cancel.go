package cli

import (
	"context"
	"time"
)

func init() {
	register(&command{name: "cancel", summary: "cancel an unfinished job", run: runCancel})
}

func runCancel(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "cancel", "JOB [flags]", "Cancels an unfinished job; its units stop being sent.")
	cf := addClientFlags(fs, 30*time.Second)
	arg, code := oneArg(env, fs, args, "JOB id")
	if code >= 0 {
		return code
	}
	id, code := parseJobID(env, "cancel", arg)
	if code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("cancel: %v", err)
		return 2
	}
	defer cancel()
	st, err := c.Cancel(ctx, id)
	if err != nil {
		return clientFail(env, "cancel", err)
	}
	printJob(env.Stdout, st, *cf.json)
	return 0
}
