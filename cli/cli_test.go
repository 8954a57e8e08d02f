package cli

import (
	"context"
	"sort"
	"strings"
	"testing"
)

// runQuick runs braid in-process with args and returns its exit code,
// stdout and stderr. It is for commands that return at once (help, usage
// errors).
func runQuick(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	var out, errs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := Run(ctx, args, &out, &errs)
	return code, out.String(), errs.String()
}

// commandNames lists every command and subcommand: "perf", "op add", ...
func commandNames() []string {
	subs := map[string][]string{
		"op":      {"add", "rm", "run"},
		"token":   {"create", "list", "revoke"},
		"testbed": {"up", "down", "show", "exec", "link", "rate", "loss", "list"},
		"bench":   {"report"},
	}
	var names []string
	for n := range commands {
		names = append(names, n)
		for _, s := range subs[n] {
			names = append(names, n+" "+s)
		}
	}
	sort.Strings(names)
	return names
}

// --help, -h and 'braid help CMD' print the command's help on stdout,
// nothing on stderr, and exit 0.
func TestHelpOnStdout(t *testing.T) {
	for _, name := range commandNames() {
		cmd := strings.Fields(name)
		for _, args := range [][]string{
			append(cmd, "--help"),
			append(cmd, "-h"),
			append([]string{"help"}, cmd...),
		} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				code, out, errs := runQuick(t, args...)
				if code != 0 || errs != "" || !strings.HasPrefix(out, "Usage: braid "+name) {
					t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
				}
			})
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errs := runQuick(t, args...)
		if code != 0 || errs != "" || !strings.Contains(out, "Commands:") || !strings.Contains(out, "perf") {
			t.Errorf("braid %s: exit %d\nstdout:\n%s\nstderr:\n%s", args[0], code, out, errs)
		}
	}
}

// A bad flag, an unknown command or subcommand prints the error and one
// line pointing to the help, on stderr, and exits 2.
func TestUsageErrorIsShort(t *testing.T) {
	type tc struct {
		args []string
		hint string
	}
	var tcs []tc
	for _, name := range commandNames() {
		tcs = append(tcs, tc{append(strings.Fields(name), "--no-such-flag"), "Run 'braid " + name + " --help' for usage."})
	}
	tcs = append(tcs,
		tc{[]string{"no-such-command"}, "Run 'braid --help' for the list of commands."},
		tc{[]string{"help", "no-such-command"}, "Run 'braid --help' for the list of commands."},
		tc{[]string{"op", "frob"}, "Run 'braid op --help' for usage."},
		tc{[]string{"token", "frob"}, "Run 'braid token --help' for usage."},
		tc{[]string{"testbed", "frob"}, "Run 'braid testbed --help' for usage."},
		tc{[]string{"perf", "-t", "x"}, "Run 'braid perf --help' for usage."},
		tc{[]string{"get", "--timeout", "soon", "1"}, "Run 'braid get --help' for usage."},
		tc{[]string{"send", "--to", "127.0.0.1:1"}, "Run 'braid send --help' for usage."},
		tc{[]string{"perf"}, "Run 'braid perf --help' for usage."},
	)
	for _, c := range tcs {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errs := runQuick(t, c.args...)
			lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
			if code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "braid: ") || lines[1] != c.hint {
				t.Errorf("exit %d, want 2; want two lines on stderr, the second %q\nstdout:\n%s\nstderr:\n%s", code, c.hint, out, errs)
			}
		})
	}
}
