package mapreduce

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/braid-hpc/braid/cli"
)

var update = flag.Bool("update", false, "write expected.txt from a direct count")

// countDir is the word count of the files of dir, as wordcount then
// sumcounts give it: "word\tcount" lines sorted by word.
func countDir(t testing.TB, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range strings.FieldsFunc(string(b), unicode.IsSpace) {
			counts[w]++
		}
	}
	var b strings.Builder
	for _, w := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(&b, "%s\t%d\n", w, counts[w])
	}
	return b.String()
}

// TestExpected: expected.txt is the word count of the generated dataset,
// counted here directly (go test -run TestExpected -update rewrites it).
func TestExpected(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(dir, Files); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != Files {
		t.Fatalf("%d files, want %d", len(entries), Files)
	}
	want := countDir(t, dir)
	if *update {
		if err := os.WriteFile("expected.txt", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("expected.txt")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("expected.txt is not the count of the generated files (go test -run TestExpected -update)")
	}
}

// TestWordCountOverDataset runs the README's command: braid local with a
// server and two workers, wordcount mapped over the 1,000 files and
// sumcounts reducing in a tree; the output must be expected.txt.
func TestWordCountOverDataset(t *testing.T) {
	switch {
	case testing.Short():
		t.Skip("builds two Go modules and runs a cluster; not with -short")
	case raceEnabled:
		// 1,000 units of a Go module take 5 minutes and more under the
		// race detector on 2 cores; .ci/run runs this test without it.
		t.Skip("not under the race detector (go test -run TestWordCountOverDataset ./examples/mapreduce/ runs it; .ci/run does)")
	}
	dir := t.TempDir()
	words := filepath.Join(dir, "words")
	if err := Generate(words, Files); err != nil {
		t.Fatal(err)
	}
	mods := filepath.Join(dir, "mods") + string(filepath.Separator)
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-trimpath", "-o", mods, "../ops/wordcount", "../ops/sumcounts")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the operations: %v\n%s", err, msg)
	}
	for _, n := range []string{"wordcount", "sumcounts"} {
		if err := os.Rename(mods+n, mods+n+".wasm"); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "counts.txt")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	code := cli.Run(ctx, []string{"local", "--workers", "2", "--threads", "2", "--data", filepath.Join(dir, "data"),
		"--op", mods + "wordcount.wasm", "--input", words, "--split", "lines:4K", "--merge", "reduce:" + mods + "sumcounts.wasm", "-o", out},
		&stdout, &stderr)
	if code != 0 {
		t.Fatalf("braid local: exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	t.Logf("braid local:\n%s%s", stdout.String(), stderr.String())
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("expected.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the word count over the dataset differs from expected.txt:\n%s", got[:min(len(got), 400)])
	}
}
