package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/bench"
	"github.com/braid-hpc/braid/testbed"
)

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
		{[]string{"bench", "--figures", "6"}, 2, "go with --paper"},
		{[]string{"bench", "--paper", "003", "--figures", "5"}, 2, "--figures selects figures of paper 001 only"},
		{[]string{"bench", "--paper", "001", "--figures", "6,3"}, 2, `paper 001 has no figure "3": want some of 4, 5, 6,`},
		{[]string{"bench", "--paper", "003", "--only", "equal"}, 2, "do not go with --paper"},
		{[]string{"bench", "stray"}, 2, "unexpected argument"},
		{[]string{"bench", "--only", "nosuch"}, 2, `--only "nosuch" names no experiment; experiments: equal,`},
		{[]string{"bench", "--time", "0"}, 2, "--time 0: want seconds above 0"},
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

// braid bench --json gives the experiment's typed results, and they are
// the values of the Markdown report of the same run (rendered from them)
// and of the progress lines on stderr (written apart from them).
func TestBenchJSON(t *testing.T) {
	testbed.Skip(t)
	code, out, errs := runCmd(t, 2*time.Minute, "bench", "--only", "gigabit", "--time", "0.5", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r struct {
		Args     []string
		Sections []struct {
			Experiment, Title string
			Notes, Findings   []string
			Tables            []struct {
				Columns []struct{ Key, Head, Type, Unit string }
				Rows    []map[string]any
			}
		}
		Markdown string
		Error    string
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if r.Error != "" || len(r.Sections) != 1 || r.Sections[0].Experiment != "gigabit" || len(r.Sections[0].Tables) != 1 || len(r.Sections[0].Findings) != 1 {
		t.Fatalf("results %+v", r)
	}
	tab := r.Sections[0].Tables[0]
	if len(tab.Columns) != 4 || tab.Columns[1].Key != "mbps" || tab.Columns[1].Unit != "Mbit/s" || tab.Columns[1].Type != "number" || len(tab.Rows) != 3 {
		t.Fatalf("table %+v", tab)
	}
	if !strings.Contains(r.Markdown, "### "+r.Sections[0].Title) || !strings.Contains(r.Markdown, r.Sections[0].Findings[0]) {
		t.Errorf("the Markdown lacks the title or the finding:\n%s", r.Markdown)
	}
	// Each row's cells in the Markdown table are its JSON values as
	// printed (%.1f, %.3f, %.2f).
	mdRows := map[string][]string{}
	for _, line := range strings.Split(r.Markdown, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) == 4 {
			mdRows[cells[0]] = cells
		}
	}
	mbps := map[string]float64{}
	for _, row := range tab.Rows {
		name, _ := row["run"].(string)
		cells, ok := mdRows[name]
		if !ok {
			t.Errorf("run %q is not a row of the Markdown:\n%s", name, r.Markdown)
			continue
		}
		for i, c := range []struct {
			key  string
			half float64 // half the last printed digit
		}{{"mbps", 0.05}, {"ratio", 0.0005}, {"cpu_s_per_gb", 0.005}} {
			v, ok := row[c.key].(float64)
			md, err := strconv.ParseFloat(cells[i+1], 64)
			if !ok || err != nil || math.Abs(v-md) > c.half+1e-9 {
				t.Errorf("%s %s: JSON %v, Markdown %q", name, c.key, row[c.key], cells[i+1])
			}
		}
		mbps[name], _ = row["mbps"].(float64)
		if mbps[name] <= 0 {
			t.Errorf("%s: %v Mbit/s", name, row["mbps"])
		}
	}
	// The progress line: "gigabit tcp=X braid=Y plaintext=Z".
	var tcp, braid, plain float64
	i := strings.Index(errs, "gigabit tcp=")
	if i < 0 {
		t.Fatalf("no progress line on stderr: %s", errs)
	}
	if _, err := fmt.Sscanf(errs[i:], "gigabit tcp=%g braid=%g plaintext=%g", &tcp, &braid, &plain); err != nil {
		t.Fatalf("progress line %q: %v", errs[i:], err)
	}
	for name, want := range map[string]float64{
		"2 plain TCP connections, striped by hand": tcp, "braid, 2 paths (encrypted)": braid, "braid, 2 paths, --insecure-plaintext": plain} {
		if math.Abs(mbps[name]-want) > 0.05+1e-9 {
			t.Errorf("%s: JSON %.3f Mbit/s, progress line %.1f", name, mbps[name], want)
		}
	}
}
