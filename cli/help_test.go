package cli

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// placeholders are the value names the help may show after a flag
// (pflag takes the back-quoted word of a usage, else the value's Go
// type): each the shape of what to type, or the noun of a flag whose
// values the usage lists. Before, 16 commands showed "--timeout long",
// and others "--max-heartbeats second", "--parallel stream", "int",
// "string", "FILE" beside "file".
var placeholders = map[string]bool{
	// Shapes.
	"n": true, "duration": true, "seconds": true, "ms": true, "size": true, "bytes": true, "rate": true, "rates": true,
	"addr": true, "addresses": true, "host:port": true, "port": true, "cidr": true, "url": true, "urls": true,
	"file": true, "file.wasm": true, "directory": true, "id": true, "token": true, "fingerprint": true,
	"name": true, "names": true, "name=value": true, "name=default": true, "wxh": true, "text": true,
	"store": true, "format": true, "value": true,
	// Nouns of listed values.
	"kind": true, "level": true, "mode": true, "policy": true, "role": true, "state": true, "unit": true,
	"algorithm": true, "merge": true, "split": true, "operation": true, "operations": true, "paper": true, "figures": true,
}

// Every flag of every command shows a placeholder from the set above, in
// lower case.
func TestHelpPlaceholders(t *testing.T) {
	for _, name := range commandNames() {
		words := strings.Fields(name)
		var fs *pflag.FlagSet
		env := &Env{Stdout: io.Discard, Stderr: io.Discard, collect: func(f *pflag.FlagSet) { fs = f }}
		commands[words[0]].run(t.Context(), env, append(words[1:], "--help"))
		if fs == nil {
			continue // a group without flags of its own (op, token): its subcommands have them
		}
		fs.VisitAll(func(f *pflag.Flag) {
			p, _ := pflag.UnquoteUsage(f)
			if f.Hidden || p == "" {
				return
			}
			if !placeholders[p] || p != strings.ToLower(p) {
				t.Errorf("braid %s --%s %s: the placeholder %q is not one of the value shapes (or nouns) of help_test.go", name, f.Name, p, p)
			}
		})
	}
}

// braid local counts a worker's threads in words: "1 thread", "2
// threads" (before: "1 thread(s)").
func TestLocalThreadsPlural(t *testing.T) {
	var b strings.Builder
	(&localReport{Workers: []localWorker{{ID: "w1", Threads: 1}, {ID: "w2", Threads: 2}}}).print(&b)
	out := b.String()
	if !strings.Contains(out, ", 1 thread\n") || !strings.Contains(out, ", 2 threads\n") || strings.Contains(out, "(s)") {
		t.Errorf("braid local's workers:\n%s", out)
	}
}
