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
	var names []string
	for n, c := range commands {
		names = append(names, n)
		for _, s := range c.subs {
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

// Old names keep working with a note naming the new one; long flags with
// one dash, as Go's flag package took them, still work; shorthands
// cluster as in POSIX.
func TestFlagCompat(t *testing.T) {
	for _, tc := range []struct {
		args            []string
		time            float64
		streams         int
		policy          string
		json, reverse   bool
		pos, deprecated string
	}{
		{[]string{"-t", "4", "-P", "3", "-RJ"}, 4, 3, "soonest", true, true, "", ""},
		{[]string{"-t4", "-P3"}, 4, 3, "soonest", false, false, "", ""},
		{[]string{"--time=4", "--parallel", "3", "--json"}, 4, 3, "soonest", true, false, "", ""},
		{[]string{"-time", "4", "-json", "-reverse"}, 4, 1, "soonest", true, true, "", ""},
		{[]string{"--streams", "2", "x"}, 10, 2, "soonest", false, false, "x", "--streams is deprecated: use -P/--parallel"},
		{[]string{"--policy", "round-robin"}, 10, 1, "round-robin", false, false, "", "--policy is deprecated: use --path-policy"},
		{[]string{"--", "-time"}, 10, 1, "soonest", false, false, "-time", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errs syncBuffer
			env := &Env{Stdout: &out, Stderr: &errs}
			fs := newFlags(env, "perf", "", "")
			tm := fs.Float64P("time", "t", 10, "")
			p := fs.IntP("parallel", "P", 1, "")
			alias(fs, "streams", "parallel", "use -P/--parallel, as in iperf3")
			pol := fs.String("path-policy", "soonest", "")
			alias(fs, "policy", "path-policy", "use --path-policy")
			j := fs.BoolP("json", "J", false, "")
			r := fs.BoolP("reverse", "R", false, "")
			pos, code := parseInterspersed(env, fs, tc.args)
			if code != -1 || *tm != tc.time || *p != tc.streams || *pol != tc.policy || *j != tc.json || *r != tc.reverse ||
				strings.Join(pos, " ") != tc.pos {
				t.Errorf("code %d: time %v parallel %d policy %s json %v reverse %v args %q; stderr %s",
					code, *tm, *p, *pol, *j, *r, pos, errs.String())
			}
			if tc.deprecated == "" && errs.String() != "" || !strings.Contains(errs.String(), tc.deprecated) {
				t.Errorf("stderr %q, want %q", errs.String(), tc.deprecated)
			}
		})
	}
	// The help lists the new names only.
	_, help, _ := runQuick(t, "perf", "--help")
	for _, want := range []string{"-P, --parallel", "-t, --time", "-J, --json", "-R, --reverse", "-l, --length", "--path-policy"} {
		if !strings.Contains(help, want) {
			t.Errorf("perf --help lacks %q", want)
		}
	}
	for _, old := range []string{"--streams", "--size", "--policy "} {
		if strings.Contains(help, old) {
			t.Errorf("perf --help lists the deprecated %q", old)
		}
	}
}
