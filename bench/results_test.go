package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// One table of every column type renders as the Markdown report shows
// it and as JSON with typed values keyed by column.
func TestSectionRender(t *testing.T) {
	s := &Suite{running: "demo"}
	sec := s.section("Demo", "How it was measured.")
	tab := sec.table(integer("k", "k", "paths"), text("run", "run"), numCol("mbps", "Mbit/s", "Mbit/s", "%.1f"),
		Column{Key: "ok", Head: "ok", Type: Boolean}, Column{Key: "per_path", Head: "per path", Type: Numbers, Format: "%.2f"},
		dur("dip_s", "dip"), numCol("paper", "paper", "Mbit/s", "%.2fx"))
	tab.add(2, "braid", 187.25, true, []float64{93.5, 93.75}, 1500*time.Millisecond, nil)
	tab.add(int64(1), "tcp", 94.0, false, []float64{}, time.Duration(0), 1.5)
	sec.finding("Braid wins at %d paths.", 2)

	var md strings.Builder
	if err := sec.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	want := `
### Demo

How it was measured.

| k | run | Mbit/s | ok | per path | dip | paper |
|---|---|---|---|---|---|---|
| 2 | braid | 187.2 | true | 93.50 / 93.75 | 1.5s |  |
| 1 | tcp | 94.0 | false |  | 0s | 1.50x |

Braid wins at 2 paths.
`
	if md.String() != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", md.String(), want)
	}

	b, err := json.Marshal(s.Results)
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		Experiment string
		Title      string
		Notes      []string
		Findings   []string
		Tables     []struct {
			Columns []Column
			Rows    []map[string]any
		}
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Experiment != "demo" || got[0].Title != "Demo" || len(got[0].Tables) != 1 || len(got[0].Findings) != 1 {
		t.Fatalf("JSON %s", b)
	}
	g := got[0].Tables[0]
	if len(g.Columns) != 7 || g.Columns[2].Unit != "Mbit/s" || g.Columns[2].Type != Number || g.Columns[5].Unit != "s" {
		t.Errorf("columns %+v", g.Columns)
	}
	r0, r1 := g.Rows[0], g.Rows[1]
	if r0["k"] != 2.0 || r0["run"] != "braid" || r0["mbps"] != 187.25 || r0["ok"] != true || r0["dip_s"] != 1.5 || r0["paper"] != nil {
		t.Errorf("row 0 %v", r0)
	}
	if pp, ok := r0["per_path"].([]any); !ok || len(pp) != 2 || pp[1] != 93.75 {
		t.Errorf("row 0 per_path %v", r0["per_path"])
	}
	if r1["paper"] != 1.5 || r1["ok"] != false {
		t.Errorf("row 1 %v", r1)
	}
}

// A row that does not fit its columns is a bug the suite's tests catch.
func TestTableAddChecks(t *testing.T) {
	for name, row := range map[string][]any{
		"too few":    {1.0},
		"int as num": {1, "x"},
		"num as int": {1.0, 2.0},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("add(%v) did not panic", row)
				}
			}()
			tab := (&Section{}).table(numCol("a", "a", "", ""), integer("b", "b", ""))
			tab.add(row...)
		})
	}
}
