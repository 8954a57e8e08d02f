// Package cli implements braid's subcommands. Each subcommand lives in its
// own file and registers itself in commands; flags are parsed only here and
// only fill library Config structs.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// command is one braid subcommand.
type command struct {
	name    string
	summary string
	// run executes the subcommand with the arguments after its name.
	// It returns the process exit code.
	run func(ctx context.Context, env *Env, args []string) int
	// subs lists the subcommands of a command group (op, token,
	// testbed); each has flags of its own.
	subs []string
	// args, if set, are the values its positional argument takes, which
	// shell completion offers instead of file names.
	args []string
}

// Env carries the standard streams so tests can run commands in-process.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer

	// collect, when set, receives each command's FlagSet instead of
	// parsing it: the command returns at once. Shell completion lists
	// the real flags this way.
	collect func(*pflag.FlagSet)
}

// Errorf prints a braid-prefixed error line to stderr.
func (e *Env) Errorf(format string, args ...any) {
	fmt.Fprintf(e.Stderr, "braid: "+format+"\n", args...)
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("cli: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// Run executes braid with args (without the program name) and returns the
// exit code: 0 success, 1 failure, 2 usage error.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	env := &Env{Stdout: stdout, Stderr: stderr}
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if len(args) > 1 {
			// braid help CMD [SUB]: the help of CMD (or of CMD SUB).
			c, ok := commands[args[1]]
			if !ok {
				env.Errorf("help: unknown command %q%s", args[1], didYouMean(args[1], topCommands(), ""))
				fmt.Fprintln(stderr, "Run 'braid --help' for the list of commands.")
				return 2
			}
			return c.run(ctx, env, append(args[2:len(args):len(args)], "--help"))
		}
		usage(stdout)
		return 0
	}
	if args[0] == "--version" {
		return commands["version"].run(ctx, env, args[1:])
	}
	c, ok := commands[args[0]]
	if !ok {
		env.Errorf("unknown command %q%s", args[0], didYouMean(args[0], topCommands(), ""))
		fmt.Fprintln(stderr, "Run 'braid --help' for the list of commands.")
		return 2
	}
	return c.run(ctx, env, args[1:])
}

// topCommands returns the names of the commands.
func topCommands() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	return names
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "braid: multi-path, multi-stream data transport and batch job system")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: braid <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every command reads the cluster key from BRAID_KEY or --key-file; client commands")
	fmt.Fprintln(w, "may use a token instead (--token or BRAID_TOKEN; see braid token --help).")
	fmt.Fprintln(w, "Run 'braid <command> --help' for a command's flags.")
}

// newFlags returns a FlagSet whose Usage prints the full help (synopsis,
// description, flags) on env.Stdout. parseFlags reports bad flags itself,
// briefly, on env.Stderr.
//
// Flags follow POSIX and GNU conventions through spf13/pflag: long flags
// with two dashes (--time 10, --time=10), one-letter shorthands with one
// (-t 10, -t10, -RJ), -h and --help for the help. A long flag written with
// one dash (-time 10), which Go's flag package accepted, still works.
func newFlags(env *Env, name, synopsis, description string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(env.Stdout)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: braid %s %s\n\n", name, synopsis)
		if description != "" {
			fmt.Fprintln(out, strings.TrimSpace(description))
			fmt.Fprintln(out)
		}
		fmt.Fprintln(out, "Flags:")
		fmt.Fprint(out, fs.FlagUsagesWrapped(100))
	}
	return fs
}

// failUsage reports a usage error of command name (e.g. "perf", "op add"):
// the error, then one line pointing to the command's help, on stderr. It
// returns 2, the exit code of a usage error.
func failUsage(env *Env, name string, err error) int {
	env.Errorf("%s: %v", name, err)
	helpHint(env, name)
	return 2
}

// helpHint prints the one line that follows a usage error on stderr.
func helpHint(env *Env, name string) {
	fmt.Fprintf(env.Stderr, "Run 'braid %s --help' for usage.\n", name)
}

// parseFlags parses args, flags and positional arguments in any order
// ("send a b --to x", "get ID -o FILE"; "--" ends the flags), and maps the
// outcome to an exit code: -1 means continue, 0 means --help was printed on
// stdout, 2 means a usage error, reported on stderr in two lines (the
// error, then where help is). A deprecated flag name works and earns a
// line on stderr naming the one to use.
func parseFlags(env *Env, fs *pflag.FlagSet, args []string) int {
	return parse(env, fs, args, true)
}

// parseFlagsFirst is parseFlags for commands whose flags all come before
// the first positional argument, which starts arguments of their own
// ("testbed exec HOST braid perf -c ...").
func parseFlagsFirst(env *Env, fs *pflag.FlagSet, args []string) int {
	fs.SetInterspersed(false)
	return parse(env, fs, args, false)
}

func parse(env *Env, fs *pflag.FlagSet, args []string, interspersed bool) int {
	if env.collect != nil {
		env.collect(fs)
		return 0
	}
	args = longOneDash(fs, args, interspersed)
	// pflag prints some errors and deprecation notes itself; silence it
	// while parsing and report here instead.
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fs.Usage()
		return 0
	case err != nil:
		return failUsage(env, fs.Name(), badValue(suggestFlag(fs, err), func(f *pflag.Flag, v string) string { return fmt.Sprintf("--%s %q", f.Name, v) }))
	}
	fs.Visit(func(f *pflag.Flag) {
		if f.Deprecated != "" {
			env.Errorf("%s: --%s is deprecated: %s", fs.Name(), f.Name, f.Deprecated)
		}
	})
	var all map[string]bool
	for _, w := range envTypos(fs, os.Environ(), func() map[string]bool {
		if all == nil {
			all = allVariables(context.Background())
		}
		return all
	}) {
		env.Errorf("warning: %s", w)
	}
	if f := fs.Lookup("config"); f != nil && f.Annotations[configAnnotation] != nil {
		if err := applyConfig(fs, os.LookupEnv); err != nil {
			env.Errorf("%s: %v", fs.Name(), err)
			return 2
		}
	}
	return -1
}

// longOneDash rewrites long flags written with one dash, as Go's flag
// package took them ("-time 4", "-json"), to two ("--time 4"): pflag
// would read them as a cluster of shorthands. A one-letter flag stays a
// shorthand. Without interspersed it stops at the first positional
// argument, whose own arguments are not ours.
func longOneDash(fs *pflag.FlagSet, args []string, interspersed bool) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			if !interspersed {
				return append(out, args[i+1:]...)
			}
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var f *pflag.Flag
		if strings.HasPrefix(a, "--") {
			f = fs.Lookup(name)
		} else if len(name) > 1 {
			if f = fs.Lookup(name); f != nil {
				out[len(out)-1] = "-" + a
			}
		} else {
			f = fs.ShorthandLookup(name)
		}
		// The next argument is this flag's value, not a positional one.
		if f != nil && !hasValue && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// parseInterspersed parses flags that may follow positional arguments
// and returns the positional arguments.
func parseInterspersed(env *Env, fs *pflag.FlagSet, args []string) ([]string, int) {
	if code := parseFlags(env, fs, args); code >= 0 {
		return nil, code
	}
	return fs.Args(), -1
}

// alias adds old as a deprecated name of the flag now: both set the same
// value, the old one is hidden from the help, and using it prints a line
// naming the new one. why says what changed.
func alias(fs *pflag.FlagSet, old, now, why string) {
	f := fs.Lookup(now)
	if f == nil {
		panic("cli: alias of unknown flag --" + now)
	}
	a := fs.VarPF(f.Value, old, "", f.Usage)
	a.NoOptDefVal = f.NoOptDefVal
	a.Deprecated = why
	a.Hidden = true
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
