package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Section is the results of one measurement group of an experiment: a
// title, notes that say how it was measured, tables and what follows from
// them. The Markdown report and braid bench --json are both rendered from
// it.
type Section struct {
	Experiment string   `json:"experiment"` // the Experiment's name
	Title      string   `json:"title"`
	Notes      []string `json:"notes"` // paragraphs before the tables
	Tables     []*Table `json:"tables"`
	Findings   []string `json:"findings"` // paragraphs after the tables
}

// Table is rows of typed values under named columns.
type Table struct {
	Columns []Column
	Rows    [][]any // one value per column: see Column.Type
}

// Column types: what a column's values are in Go and in JSON.
const (
	Number   = "number"   // float64 (Markdown: Column.Format, "%.1f" by default)
	Integer  = "integer"  // int or int64
	Text     = "string"   // string
	Boolean  = "bool"     // bool
	Numbers  = "numbers"  // []float64, a JSON array
	Duration = "duration" // time.Duration, seconds in JSON
)

// Column describes one column of a Table.
type Column struct {
	Key    string `json:"key"`            // the rows' JSON key: braid_mbps
	Head   string `json:"head"`           // the Markdown heading: braid Mbit/s
	Type   string `json:"type"`           // Number, Integer, Text, Boolean, Numbers or Duration
	Unit   string `json:"unit,omitempty"` // Mbit/s, s, bytes, MB, ...
	Format string `json:"-"`              // Markdown format of a Number or of Numbers' elements
}

// numCol is a Number column shown with format.
func numCol(key, head, unit, format string) Column {
	return Column{Key: key, Head: head, Type: Number, Unit: unit, Format: format}
}

// text is a Text column.
func text(key, head string) Column { return Column{Key: key, Head: head, Type: Text} }

// integer is an Integer column.
func integer(key, head, unit string) Column {
	return Column{Key: key, Head: head, Type: Integer, Unit: unit}
}

// dur is a Duration column: Go durations, seconds in JSON.
func dur(key, head string) Column { return Column{Key: key, Head: head, Type: Duration, Unit: "s"} }

// section starts a section of the running experiment's results.
func (s *Suite) section(title string, notes ...string) *Section {
	sec := &Section{Experiment: s.running, Title: title, Notes: notes, Tables: []*Table{}, Findings: []string{}}
	s.Results = append(s.Results, sec)
	return sec
}

// table adds a table with the columns cols.
func (sec *Section) table(cols ...Column) *Table {
	t := &Table{Columns: cols, Rows: [][]any{}}
	sec.Tables = append(sec.Tables, t)
	return t
}

// finding adds a paragraph after the tables.
func (sec *Section) finding(format string, args ...any) {
	sec.Findings = append(sec.Findings, fmt.Sprintf(format, args...))
}

// add appends a row. A nil value is an empty cell (null in JSON). A value
// that does not fit its column is a bug in the experiment: add panics so
// that the suite's tests catch it.
func (t *Table) add(vals ...any) {
	if len(vals) != len(t.Columns) {
		panic(fmt.Sprintf("bench: row of %d values for %d columns", len(vals), len(t.Columns)))
	}
	for i, v := range vals {
		if v != nil && !fits(t.Columns[i].Type, v) {
			panic(fmt.Sprintf("bench: column %q (%s) given %T", t.Columns[i].Key, t.Columns[i].Type, v))
		}
	}
	t.Rows = append(t.Rows, vals)
}

func fits(typ string, v any) bool {
	switch v.(type) {
	case float64:
		return typ == Number
	case int, int64:
		return typ == Integer
	case string:
		return typ == Text
	case bool:
		return typ == Boolean
	case []float64:
		return typ == Numbers
	case time.Duration:
		return typ == Duration
	}
	return false
}

// cell is v as Markdown shows it.
func (c Column) cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case float64:
		f := c.Format
		if f == "" {
			f = "%.1f"
		}
		return fmt.Sprintf(f, x)
	case []float64:
		f := c.Format
		if f == "" {
			f = "%.1f"
		}
		return formatAll(x, f, " / ")
	case time.Duration:
		return x.String()
	}
	return fmt.Sprint(v)
}

// jsonValue is v as JSON holds it.
func jsonValue(v any) any {
	if d, ok := v.(time.Duration); ok {
		return d.Seconds()
	}
	return v
}

// MarshalJSON writes the columns and each row as an object keyed by the
// columns' keys.
func (t *Table) MarshalJSON() ([]byte, error) {
	rows := make([]map[string]any, len(t.Rows))
	for i, r := range t.Rows {
		rows[i] = make(map[string]any, len(r))
		for j, v := range r {
			rows[i][t.Columns[j].Key] = jsonValue(v)
		}
	}
	cols := t.Columns
	if cols == nil {
		cols = []Column{}
	}
	return json.Marshal(struct {
		Columns []Column         `json:"columns"`
		Rows    []map[string]any `json:"rows"`
	}{cols, rows})
}

// Markdown writes the section as a "###" heading, its notes, pipe tables
// and findings.
func (sec *Section) Markdown(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "\n### %s\n\n", sec.Title)
	for _, n := range sec.Notes {
		fmt.Fprintf(ew, "%s\n\n", n)
	}
	for i, t := range sec.Tables {
		if i > 0 {
			fmt.Fprintf(ew, "\n")
		}
		heads := make([]string, len(t.Columns))
		for j, c := range t.Columns {
			heads[j] = c.Head
		}
		fmt.Fprintf(ew, "| %s |\n|%s\n", strings.Join(heads, " | "), strings.Repeat("---|", len(heads)))
		for _, r := range t.Rows {
			cells := make([]string, len(r))
			for j, v := range r {
				cells[j] = t.Columns[j].cell(v)
			}
			fmt.Fprintf(ew, "| %s |\n", strings.Join(cells, " | "))
		}
	}
	for _, f := range sec.Findings {
		fmt.Fprintf(ew, "\n%s\n", f)
	}
	return ew.err
}
