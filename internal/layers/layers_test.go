// Package layers holds the one test of braid's import layering: what each
// package may import of braid, so that dependencies point one way
// (docs in ../../../shared/STYLE.md: api imports nothing of ours; transport
// and stripe never import sched, store, server or worker; client imports
// only api).
package layers

import (
	"go/build"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/braid-hpc/braid"

// may lists, for each package (a path relative to the module; "x/..."
// covers x and everything under it, the longest match wins), the braid
// packages it may import. Packages not listed may import anything
// (commands, the CLI, benchmarks, examples).
var may = map[string][]string{
	"api":               {},
	"client":            {"api"},
	"ops":               {},
	"store":             {},
	"store/storetest":   {"store"},
	"stripe":            {},
	"sched":             {},
	"wasm":              {},
	"testbed/...":       {"internal/testenv"},
	"internal/accept":   {},
	"internal/leaktest": {},
	"internal/s3test":   {},
	"internal/testwait": {},
	"internal/wasmtest": {"internal/testenv"},
	"internal/testenv":  {},
	"internal/metrics":  {"transport", "transport/..."},
	"internal/ctl":      {"transport"},
	"internal/outfile":  {},
	"internal/syncbuf":  {},
	"internal/uml":      {"internal/syncbuf"},

	// The guest-kernel harness and its command, over UML's backend.
	"internal/vmkernel/...": {"internal/uml", "internal/vmkernel"},

	"transport/...": {
		"internal/accept", "stripe", "transport/channel", "transport/internal/wire",
	},
	"worker": {"api", "client", "ops", "transport", "transport/...", "wasm", "internal/accept", "internal/metrics"},
	// The applications on a braid session: library code below the CLI.
	"xfer":   {"transport", "internal/ctl", "internal/outfile"},
	"perf":   {"transport", "transport/channel", "internal/accept", "internal/ctl", "internal/metrics"},
	"server": {"api", "internal/accept", "internal/metrics", "lifecycle", "ops", "sched", "store", "transport", "transport/...", "wasm"},

	// The life of jobs: state and store writes, no network, no bytes.
	"lifecycle": {"sched", "store"},
}

// stdOnly lists the packages that may import, outside braid, only the
// standard library: programs that embed a client link nothing more, and
// striping stays pure bookkeeping.
var stdOnly = []string{"api", "client", "stripe"}

// rule returns the allowed imports of pkg and whether a rule applies.
func rule(pkg string) ([]string, bool) {
	best, found := "", false
	for k := range may {
		base, tree := strings.CutSuffix(k, "/...")
		if pkg == base || tree && strings.HasPrefix(pkg, base+"/") {
			if !found || len(k) > len(best) {
				best, found = k, true
			}
		}
	}
	return may[best], found
}

func allowed(imp string, list []string) bool {
	for _, a := range list {
		if base, tree := strings.CutSuffix(a, "/..."); tree {
			if imp == base || strings.HasPrefix(imp, base+"/") {
				return true
			}
		} else if imp == a {
			return true
		}
	}
	return false
}

// TestLayers checks the non-test imports of every package of the module.
func TestLayers(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	checked := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != root && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(p, 0)
		if err != nil {
			return nil // no Go package here
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		// The CLI is the top: only the commands import it.
		if rel != "cmd" && !strings.HasPrefix(rel, "cmd/") && slices.Contains(pkg.Imports, module+"/cli") {
			t.Errorf("%s imports cli; only cmd/ may (move what it needs below cli)", rel)
		}
		list, ok := rule(rel)
		if !ok {
			return nil
		}
		checked[rel] = true
		for _, imp := range pkg.Imports {
			if slices.Contains(stdOnly, rel) && strings.Contains(strings.Split(imp, "/")[0], ".") && !strings.HasPrefix(imp, module+"/") {
				t.Errorf("%s imports %s, outside the standard library", rel, imp)
			}
			ours, isOurs := strings.CutPrefix(imp, module+"/")
			if !isOurs || ours == rel {
				continue
			}
			if !allowed(ours, list) {
				t.Errorf("%s imports %s; it may import of braid only %v", rel, ours, list)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The walk must have found the layered packages, or it checked nothing.
	for _, want := range []string{"api", "client", "ops", "sched", "store", "stripe", "transport", "transport/channel/ksctp", "server", "worker", "wasm", "xfer", "perf", "internal/ctl"} {
		if !checked[want] {
			t.Errorf("package %s was not checked (walk from %s)", want, path.Clean(root))
		}
	}
}

// TestRuleCatches makes sure the check can fail: a made-up transport
// import of the server is refused, a client import of api is not.
func TestRuleCatches(t *testing.T) {
	list, _ := rule("transport/channel/ksctp")
	if allowed("server", list) || allowed("worker", list) {
		t.Error("transport/channel/ksctp may import the server or the worker")
	}
	list, _ = rule("client")
	if !allowed("api", list) || allowed("transport", list) {
		t.Error("client's rule is wrong")
	}
	for _, pkg := range []string{"xfer", "perf", "internal/ctl"} {
		if list, ok := rule(pkg); !ok || allowed("cli", list) {
			t.Errorf("%s may import cli", pkg)
		}
	}
	if _, ok := rule("cli"); ok {
		t.Error("cli has a rule; it may import anything")
	}
}
