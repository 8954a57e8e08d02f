package bench

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// spread is a series' points with their min-max range over the
// repetitions, for error bars.
type spread struct {
	plotter.XYs
	lo, hi []float64
}

func (s spread) YError(i int) (float64, float64) { return s.lo[i], s.hi[i] }

// Draw writes the figure as a plot to file (SVG, PNG or PDF by the
// extension): one line per series with its min-max range as error bars,
// ideal lines dashed, and the paper's values as black rings where they
// compare with braid's (else they stay in the report's table).
func (f *Figure) Draw(file string) error {
	p := plot.New()
	p.Title.Text = f.Title
	p.X.Label.Text = f.XLabel
	p.Y.Label.Text = f.YLabel
	p.Legend.Top = true
	p.Legend.Left = !f.Higher
	p.Add(plotter.NewGrid())
	if f.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	// Each series' line runs left to right, whatever order its points
	// were measured in.
	pts := slices.Clone(f.Points)
	slices.SortStableFunc(pts, func(a, b *Point) int { return cmp.Compare(a.X, b.X) })
	var paper plotter.XYs
	for i, name := range f.series() {
		var s spread
		for _, pt := range pts {
			if pt.Series != name || pt.Reps == 0 || math.IsNaN(pt.Value) || math.IsInf(pt.Value, 0) {
				continue
			}
			s.XYs = append(s.XYs, plotter.XY{X: pt.X, Y: pt.Value})
			s.lo = append(s.lo, pt.Value-pt.Min)
			s.hi = append(s.hi, pt.Max-pt.Value)
			if pt.Paper != nil && f.Comparable {
				paper = append(paper, plotter.XY{X: pt.X, Y: *pt.Paper})
			}
		}
		if len(s.XYs) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(s)
		if err != nil {
			return fmt.Errorf("series %s: %w", name, err)
		}
		c := plotutil.Color(i)
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		points.Shape = plotutil.Shape(i)
		if kindOf(f, name) == kindIdeal {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(line, points)
		if s.lo != nil {
			eb, err := plotter.NewYErrorBars(s)
			if err != nil {
				return err
			}
			eb.Color = c
			p.Add(eb)
		}
		p.Legend.Add(name, line, points)
	}
	if len(paper) > 0 {
		sc, err := plotter.NewScatter(paper)
		if err != nil {
			return err
		}
		sc.Shape = draw.RingGlyph{}
		sc.Radius = vg.Points(5)
		sc.Color = color.Black
		p.Add(sc)
		p.Legend.Add("paper", sc)
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, file)
}

func kindOf(f *Figure, series string) string {
	for _, p := range f.Points {
		if p.Series == series {
			return p.Kind
		}
	}
	return ""
}
