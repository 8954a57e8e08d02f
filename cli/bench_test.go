package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/bench"
)

// bench --json turns the Markdown report into sections and table rows
// keyed by column, numbers as numbers.
func TestBenchReportJSON(t *testing.T) {
	md := `
## braid bench --only equal (2026-11-23 17:00 UTC)

### Bulk over k equal paths at 100 Mbit/s

Ideal is the sum of one TCP connection alone on each path.

| k | ideal (Σ single TCP) Mbit/s | braid Mbit/s | braid per path Mbit/s |
|---|---|---|---|
| 1 | 94.1 | 93.0 | [93.0] |
| 2 | 188.2 | 185.5 | [92.8 92.7] |

### Heterogeneous paths

| links | test | braid Mbit/s |
|---|---|---|
| 100M+25M | bulk | 117.3 |
`
	r := parseReport(md)
	if len(r.Sections) != 2 || r.Sections[0].Title != "Bulk over k equal paths at 100 Mbit/s" || len(r.Sections[0].Text) != 1 {
		t.Fatalf("sections %+v", r.Sections)
	}
	tab := r.Sections[0].Tables[0]
	if len(tab.Columns) != 4 || len(tab.Rows) != 2 || tab.Rows[1]["braid Mbit/s"] != 185.5 || tab.Rows[1]["k"] != 2.0 ||
		tab.Rows[0]["braid per path Mbit/s"] != "[93.0]" {
		t.Errorf("table %+v", tab)
	}
	if rows := r.Sections[1].Tables[0].Rows; len(rows) != 1 || rows[0]["links"] != "100M+25M" || rows[0]["braid Mbit/s"] != 117.3 {
		t.Errorf("second table %+v", rows)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}

// Bad --paper arguments and report directories give a clear error and a
// usage exit code, before any testbed is needed.
func TestBenchPaperBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bench", "--paper", "9"}, 2, `unknown paper "9"`},
		{[]string{"bench", "--paper", "003,7"}, 2, `unknown paper "7"`},
		{[]string{"bench", "--quick"}, 2, "go with --paper"},
		{[]string{"bench", "--paper", "003", "--only", "equal"}, 2, "do not go with --paper"},
		{[]string{"bench", "stray"}, 2, "unexpected argument"},
		{[]string{"bench", "report"}, 2, "give the directories"},
		{[]string{"bench", "report", filepath.Join(dir, "none")}, 1, "no such file"},
	} {
		code, _, errs := runQuick(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("braid %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, errs, tc.code, tc.want)
		}
	}
}

// braid bench report gathers runs and links their plots relative to the
// report file.
func TestBenchReportGathers(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for _, name := range []string{"a", "b"} {
		f := &bench.Figure{ID: "003-fig5", Title: "Fig. 5", XLabel: "size (bytes)", YLabel: "Mbit/s", Unit: "Mbit/s", Plot: "003-fig5.svg",
			Points: []*bench.Point{{Series: "braid", Kind: "braid", X: 8192, XLabel: "8 KB", Value: 87, Min: 87, Max: 87, Reps: 1, Samples: []float64{87}}}}
		pr := &bench.PaperResult{Paper: "003", Title: "run " + name, Figures: []*bench.Figure{f}}
		res := &bench.Results{Command: "braid bench --paper 003 --out " + name, Machine: bench.ThisMachine(), Started: time.Now(), Papers: []*bench.PaperResult{pr}}
		dir := filepath.Join(root, "runs", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := res.Write(dir); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	out := filepath.Join(root, "docs", "papers.md")
	os.MkdirAll(filepath.Dir(out), 0o755)
	code, _, errs := runQuick(t, append([]string{"bench", "report", "-o", out}, dirs...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "003-fig5.svg")); err != nil {
			t.Error(err)
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--out a`", "--out b`", "### Paper 003: run a", "### Paper 003: run b", "](../runs/a/003-fig5.svg)", "](../runs/b/003-fig5.svg)"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q:\n%s", want, b)
		}
	}
}
