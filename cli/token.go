package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/braid-hpc/braid/api"
)

func init() {
	register(&command{
		name:    "token",
		summary: "create, list or revoke control API tokens (admin)",
		run:     runToken,
		subs:    []string{"create", "list", "revoke"},
	})
}

const tokenDescription = `
Manages the server's access tokens. A token has a role: a worker token
registers a worker and downloads modules; a client token uploads data,
submits and follows jobs and manages operations; a monitor token only
looks (Prometheus metrics, jobs, workers: the dashboard at /ui/); an admin
token may do all that and manage tokens. The cluster key's holder is admin. The server
keeps only each token's SHA-256: a token is shown once, when created.

A client sees only the jobs, blobs and pipelines it made, unless its token
is in a group (--group NAME): the tokens of a group share everything, as
one tenant. Admins and monitors see everyone's.

  braid token create --role ROLE [--name NAME] [--group GROUP]   make a token; prints it and its join token
  braid token list                               list the tokens (never their secrets)
  braid token revoke ID|NAME                     revoke one; it fails at once from then on

A join token is the token and the server certificate's fingerprint in one
string: give it to a worker or client as --token (or BRAID_TOKEN) and it
pins the server without the cluster key.

  braid worker --server https://10.0.0.1:7400 --token braid_...`

func runToken(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(env.Stderr, "Usage: braid token create|list|revoke ...")
		fmt.Fprintln(env.Stderr, strings.TrimSpace(tokenDescription))
		return 2
	}
	switch args[0] {
	case "create":
		return runTokenCreate(ctx, env, args[1:])
	case "list", "ls":
		return runTokenList(ctx, env, args[1:])
	case "revoke":
		return runTokenRevoke(ctx, env, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(env.Stdout, "Usage: braid token create|list|revoke ...")
		fmt.Fprintln(env.Stdout, strings.TrimSpace(tokenDescription))
		return 0
	}
	return unknownSubcommand(env, "token", args[0])
}

func runTokenCreate(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "token create", "--role admin|client|worker|monitor [--name NAME] [--group GROUP] [flags]", `
Makes a token and prints it with its join token. Store it now: the server
keeps only its hash.`)
	role := fs.String("role", "", "the token's `role`: admin, client, worker or monitor (required)")
	withChoices(fs, "role", "admin", "client", "worker", "monitor")
	name := fs.String("name", "", "a unique `name` for listings and revoke (default: the role and part of the ID)")
	group := fs.String("group", "", "the `name` of a group whose tokens share their jobs, blobs and pipelines (default: none; the token shares nothing)")
	cf := addClientFlags(fs, 30*time.Second)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		env.Errorf("token create: unexpected argument %q", fs.Arg(0))
		return 2
	}
	if !api.ValidRole(*role) {
		env.Errorf("token create: --role %q: want %s", *role, strings.Join(api.Roles, ", "))
		return 2
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("token create: %v", err)
		return 2
	}
	defer cancel()
	tok, err := c.NewToken(ctx, api.TokenRequest{Role: *role, Name: *name, Group: *group})
	if err != nil {
		return clientFail(env, "token create", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, tok)
		return 0
	}
	fmt.Fprintf(env.Stdout, "token %s (%s), role %s", tok.ID, tok.Name, tok.Role)
	if tok.Group != "" {
		fmt.Fprintf(env.Stdout, ", group %s", tok.Group)
	}
	fmt.Fprintln(env.Stdout)
	fmt.Fprintf(env.Stdout, "  token:       %s\n", tok.Token)
	if tok.Join != "" {
		fmt.Fprintf(env.Stdout, "  fingerprint: %s\n", tok.Fingerprint)
		fmt.Fprintf(env.Stdout, "  join token:  %s\n", tok.Join)
	}
	fmt.Fprintln(env.Stderr, "braid: the server keeps only a hash: store the token now; pass it as --token or BRAID_TOKEN")
	return 0
}

func runTokenList(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "token list", "[flags]", "Lists the server's tokens, revoked ones included; never their secrets.")
	cf := addClientFlags(fs, 30*time.Second)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		env.Errorf("token list: unexpected argument %q", fs.Arg(0))
		return 2
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("token list: %v", err)
		return 2
	}
	defer cancel()
	list, err := c.Tokens(ctx)
	if err != nil {
		return clientFail(env, "token list", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, api.TokenList{Tokens: list})
		return 0
	}
	when := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format("2006-01-02 15:04")
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tGROUP\tCREATED\tLAST USED\tREVOKED")
	for _, t := range list {
		g := t.Group
		if g == "" {
			g = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, g, when(t.Created), when(t.LastUsed), when(t.Revoked))
	}
	tw.Flush()
	return 0
}

func runTokenRevoke(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "token revoke", "ID|NAME [flags]", "Revokes a token: requests with it fail with 401 from now on.")
	cf := addClientFlags(fs, 30*time.Second)
	ref, code := oneArg(env, fs, args, "token ID or NAME")
	if code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("token revoke: %v", err)
		return 2
	}
	defer cancel()
	t, err := c.RevokeToken(ctx, ref)
	if err != nil {
		return clientFail(env, "token revoke", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, t)
	} else {
		fmt.Fprintf(env.Stderr, "braid: revoked token %s (%s, role %s)\n", t.ID, t.Name, t.Role)
	}
	return 0
}
