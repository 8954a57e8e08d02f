package cli

import (
	"encoding/json"
	"testing"
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
