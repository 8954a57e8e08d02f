package bench

import (
	"fmt"
	"slices"
	"strings"
)

// A run of selected figures (PaperRun.Figures) re-measures some of a
// paper's figures; carry keeps the rest of the earlier run's results
// beside them, each marked with the run it comes from, so report.md
// stays whole and says which figure was measured when.

// earlierRun is the suffix of a series kept from an earlier run in a
// figure this run re-measured.
const earlierRun = " (earlier run)"

// carry keeps in pr what the earlier run old measured of the same paper
// and pr did not re-run: whole figures (with From set), and in a figure
// pr re-measured, the peers' series it did not measure (named with the
// suffix earlierRun; braid's own series are never kept, so a
// re-measured figure shows braid from this run only). The earlier run's
// findings about the figures kept whole and its notes on the setup come
// along.
func (pr *PaperResult) carry(old *Results) {
	var q *PaperResult
	for _, o := range old.Papers {
		if o.Paper == pr.Paper {
			q = o
		}
	}
	if q == nil {
		return
	}
	from := fmt.Sprintf("the run of %s (`%s`", old.Started.Format("2006-01-02 15:04 MST"), old.Command)
	if old.Machine.Load != "" {
		from += ", load average " + old.Machine.Load + " at its start"
	}
	from += ")"
	var figs []*Figure
	kept := map[string]bool{} // labels ("Fig. 4") of the figures kept whole
	for _, g := range q.Figures {
		f := findFigure(pr.Figures, g.ID)
		if f == nil {
			if g.From == "" {
				g.From = from
			}
			figs = append(figs, g)
			kept[figLabel(g.Title)] = true
			continue
		}
		carrySeries(f, g, from)
		figs = append(figs, f)
	}
	for _, f := range pr.Figures {
		if findFigure(figs, f.ID) == nil {
			figs = append(figs, f)
		}
	}
	pr.Figures = figs
	for _, s := range q.Findings {
		if kept[figLabel(s)] {
			pr.Findings = append(pr.Findings, s)
		}
	}
	// An earlier note on the setup comes along unless this run has one
	// on the same subject (the same beginning, perhaps reworded since).
	for _, e := range q.Emulated {
		if !slices.ContainsFunc(pr.Emulated, func(n string) bool { return sameStart(n, e) }) {
			pr.Emulated = append(pr.Emulated, e)
		}
	}
}

// sameStart reports whether two notes begin with the same 40 bytes (or
// are equal, when shorter).
func sameStart(a, b string) bool {
	n := min(len(a), len(b), 40)
	return a[:n] == b[:n] && (n == 40 || len(a) == len(b))
}

// carrySeries adds to f the peers' series of g (the same figure, from the
// earlier run from) that f lacks, renamed with earlierRun, and their
// comparisons. A series g itself kept from a run before keeps its name and
// where it comes from.
func carrySeries(f, g *Figure, from string) {
	have := f.series()
	var carried, froms []string
	for _, p := range g.Points {
		peer := p.Kind == kindPeer || p.Kind == kindIdeal && !strings.HasPrefix(p.Series, "braid")
		if !peer || slices.Contains(have, p.Series) {
			continue
		}
		c := *p
		c.Series = strings.TrimSuffix(p.Series, earlierRun) + earlierRun
		c.Name = fmt.Sprintf("%s/%s/%s", f.ID, c.Series, c.XLabel)
		c.Samples = slices.Clone(p.Samples)
		if c.From == "" {
			c.From = from
		}
		f.Points = append(f.Points, &c)
		if !slices.Contains(carried, p.Series) {
			carried = append(carried, p.Series)
		}
		if !slices.Contains(froms, c.From) {
			froms = append(froms, c.From)
		}
	}
	if len(carried) == 0 {
		return
	}
	for _, c := range g.Compare {
		if slices.Contains(have, c[0]) && slices.Contains(carried, c[1]) {
			f.Compare = append(f.Compare, [2]string{c[0], strings.TrimSuffix(c[1], earlierRun) + earlierRun})
		}
	}
	f.Note = strings.TrimSpace(f.Note + fmt.Sprintf(" The series marked \"%s\" were not re-run: they come from %s.", strings.TrimSpace(earlierRun), strings.Join(froms, " and ")))
}

func findFigure(figs []*Figure, id string) *Figure {
	for _, f := range figs {
		if f.ID == id {
			return f
		}
	}
	return nil
}

// figLabel returns the figure a title or finding starts with: "Fig. 13"
// of "Fig. 13: static ..." and of "Fig. 13, static equal division at
// ...", "Fig. 11" of "Fig. 11 at 1000 tasks: ...".
func figLabel(s string) string {
	end := len(s)
	for _, sep := range []string{": ", ", ", " at "} {
		if i := strings.Index(s, sep); i >= 0 && i < end {
			end = i
		}
	}
	return s[:end]
}

// unique returns ss without its repeated strings, in order of first
// appearance.
func unique(ss []string) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
