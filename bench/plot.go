package bench

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

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
// extension): one line per series in a colour and marker of its own, with
// its min-max range as error bars, ideal lines dashed, and the paper's
// values, where they compare with braid's (else they stay in the
// report's table), as large hollow markers of the series' colour and
// shape, at their x (set apart by a few points between series, never by
// data units). The legend stands right of the data, never over it, or
// below the plot in columns when its names are long, so that the data
// keep the width; its rows are as tall as the paper markers. The axes
// read in human units on a grid: sizes in bytes in binary units (1 KiB,
// 2 MiB), their ticks at powers of two on a log axis, so that a 2 MiB
// point sits on its tick; rates above 1000 Mbit/s in Gbit/s. There is
// room at the edges so that no marker is clipped, a title wider than the
// plot is wrapped, not cut, and the white background covers the legend
// too.
func (f *Figure) Draw(file string) error {
	p := plot.New()
	p.X.Label.Text = f.XLabel
	p.Y.Label.Text = f.YLabel
	p.Add(plotter.NewGrid())
	bytesX := strings.Contains(f.XLabel, "(bytes)")
	if f.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = humanTicks{log: true, bytes: bytesX}
	} else {
		p.X.Tick.Marker = humanTicks{bytes: bytesX}
	}
	yTicks := humanTicks{}
	p.Y.Tick.Marker = yTicks
	// Each series' line runs left to right, whatever order its points
	// were measured in.
	pts := slices.Clone(f.Points)
	slices.SortStableFunc(pts, func(a, b *Point) int { return cmp.Compare(a.X, b.X) })
	xr, yr := newRange(), newRange()
	// The paper's markers of different series at one x are set a little
	// apart, by a few points on the page (never by data units, which on a
	// log axis would move them to another size), so that equal or close
	// values of two series show as two markers, not one; no marker moves
	// by more than its radius, so each still covers its x.
	var withPaper []string
	for _, pt := range pts {
		if pt.Paper != nil && f.Comparable && !slices.Contains(withPaper, pt.Series) {
			withPaper = append(withPaper, pt.Series)
		}
	}
	var legend legendRows
	for i, name := range f.series() {
		var s spread
		var paper plotter.XYs
		for _, pt := range pts {
			if pt.Series != name || pt.Reps == 0 || math.IsNaN(pt.Value) || math.IsInf(pt.Value, 0) {
				continue
			}
			s.XYs = append(s.XYs, plotter.XY{X: pt.X, Y: pt.Value})
			s.lo = append(s.lo, pt.Value-pt.Min)
			s.hi = append(s.hi, pt.Max-pt.Value)
			xr.add(pt.X)
			yr.add(pt.Min)
			yr.add(pt.Max)
			if pt.Paper != nil && f.Comparable {
				paper = append(paper, plotter.XY{X: pt.X, Y: *pt.Paper})
				yr.add(*pt.Paper)
			}
		}
		if len(s.XYs) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(s)
		if err != nil {
			return fmt.Errorf("series %s: %w", name, err)
		}
		c := seriesColor(i)
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
		legend.add(name, line, points)
		if len(paper) > 0 {
			m := &paperMarks{XYs: paper, dx: paperShift(slices.Index(withPaper, name), len(withPaper))}
			m.Shape = hollow(i)
			m.Radius = paperRadius
			m.Color = c
			p.Add(m)
			legend.add(name+" (paper)", m)
		}
	}
	// Room at the edges: a marker on the first or last x, or at the
	// extremes of y, is drawn whole.
	if xr.ok() {
		if f.LogX && xr.lo > 0 {
			p.X.Min, p.X.Max = xr.lo/1.4, xr.hi*1.4
		} else {
			pad := 0.05 * max(xr.hi-xr.lo, math.Abs(xr.hi), 1e-9)
			p.X.Min, p.X.Max = xr.lo-pad, xr.hi+pad
		}
	}
	// Values spanning decades (all above zero) go on a log axis, so that
	// the small series are not squashed flat against the axis by the
	// large ones.
	logY := yr.ok() && yr.lo > 0 && yr.hi/yr.lo >= logSpan
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = humanTicks{log: true}
		p.Y.Min, p.Y.Max = yr.lo/1.3, yr.hi*1.3
		p.Y.Label.Text += " (log scale)"
	}
	if !logY && yr.ok() && yr.hi >= 1000 && strings.Contains(f.YLabel, "(Mbit/s)") {
		// 1000 Mbit/s and more read as Gbit/s.
		yTicks.div = 1000
		p.Y.Tick.Marker = yTicks
		p.Y.Label.Text = strings.Replace(f.YLabel, "(Mbit/s)", "(Gbit/s)", 1)
	}
	if !logY && yr.ok() {
		pad := 0.08 * max(yr.hi-yr.lo, math.Abs(yr.hi), 1e-9)
		p.Y.Min, p.Y.Max = yr.lo-pad, yr.hi+pad
		if yr.lo >= 0 && yr.lo-pad < 0 {
			p.Y.Min = 0 // no negative axis under figures that cannot be
			if yr.lo == 0 {
				p.Y.Min = -pad / 2 // a point at 0 is drawn whole
			}
		}
	}
	// The legend stands right of the data while it is narrow; a wide one
	// (long series names) goes below the plot, in columns, and the image
	// grows by its height instead of the data shrinking.
	const width, plotH = 10 * vg.Inch, 5 * vg.Inch
	entryW, rowH := legend.size()
	below := entryW > maxSideLegend
	height, legendH := plotH, vg.Length(0)
	cols := 1
	if below {
		cols = max(1, min(len(legend.entries), int((width-2*legendGap)/(entryW+legendGap))))
		rows := (len(legend.entries) + cols - 1) / cols
		legendH = vg.Length(rows)*rowH + legendGap
		height += legendH
	}
	c, err := draw.NewFormattedCanvas(width, height, strings.TrimPrefix(filepath.Ext(file), "."))
	if err != nil {
		return err
	}
	dc := draw.New(c)
	// The background under the legend as under the plot (an SVG has none
	// of its own).
	dc.FillPolygon(color.White, []vg.Point{{X: 0, Y: 0}, {X: width, Y: 0}, {X: width, Y: height}, {X: 0, Y: height}})
	if below {
		p.Title.Text = wrapText(f.Title, width-vg.Points(16), p.Title.TextStyle.Width)
		p.Draw(draw.Crop(dc, 0, -vg.Points(12), legendH, -titleRoom))
		legend.draw(draw.Crop(dc, legendGap, 0, 0, -(height-legendH+legendGap/2)), cols, entryW+legendGap)
	} else {
		legendW := entryW + vg.Points(10)
		plotW := width - legendW - vg.Points(8)
		p.Title.Text = wrapText(f.Title, plotW-vg.Points(16), p.Title.TextStyle.Width)
		p.Draw(draw.Crop(dc, 0, -legendW-vg.Points(8), 0, -titleRoom))
		legend.draw(draw.Crop(dc, width-legendW, 0, 0, -vg.Points(30)), 1, 0)
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// DrawAll writes the figure as SVG (f.Plot) and as PNG beside it, into dir.
func (f *Figure) DrawAll(dir string) error {
	if err := f.Draw(filepath.Join(dir, f.Plot)); err != nil {
		return err
	}
	return f.Draw(filepath.Join(dir, strings.TrimSuffix(f.Plot, filepath.Ext(f.Plot))+".png"))
}

// Paper markers and the legend's layout.
const (
	// paperRadius is the radius of a paper marker; legend rows are at
	// least its diameter apart, so that markers of neighbouring rows do
	// not overlap.
	paperRadius = vg.Length(6) // points
	// paperStep is the largest sideways shift between the paper markers
	// of two series at one x.
	paperStep = vg.Length(3)
	// maxSideLegend is the widest legend (its longest entry) that stands
	// right of the data; a wider one goes below the plot.
	maxSideLegend = 2 * vg.Inch
	// legendRow is the least height of a legend row: a paper marker
	// and some room, so that markers of neighbouring rows stay apart.
	legendRow = 2*paperRadius + vg.Length(5)
	// legendGap is the room between legend columns and around a legend
	// below the plot.
	legendGap = vg.Length(14)
	// titleRoom is the room above the title, which otherwise touches the
	// image's top edge.
	titleRoom = vg.Length(5)
)

// paperShift is the sideways shift, on the page, of the paper markers of
// series k of n that have paper values: centred around 0, at most
// paperStep apart, and never more than paperRadius from their x.
func paperShift(k, n int) vg.Length {
	if n < 2 || k < 0 {
		return 0
	}
	half := vg.Length(n-1) / 2
	step := min(paperStep, paperRadius/half)
	return (vg.Length(k) - half) * step
}

// paperMarks draws the paper's values of one series as hollow markers,
// each at its point shifted dx sideways on the page.
type paperMarks struct {
	plotter.XYs
	draw.GlyphStyle
	dx vg.Length
}

// Plot implements plot.Plotter.
func (m *paperMarks) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	for _, xy := range m.XYs {
		c.DrawGlyph(m.GlyphStyle, vg.Point{X: trX(xy.X) + m.dx, Y: trY(xy.Y)})
	}
}

// DataRange implements plot.DataRanger: the points' own x and y.
func (m *paperMarks) DataRange() (xmin, xmax, ymin, ymax float64) {
	return plotter.XYRange(m.XYs)
}

// GlyphBoxes implements plot.GlyphBoxer, so that the axes leave room for
// the markers whole.
func (m *paperMarks) GlyphBoxes(plt *plot.Plot) []plot.GlyphBox {
	boxes := make([]plot.GlyphBox, len(m.XYs))
	for i, xy := range m.XYs {
		r := m.GlyphStyle.Rectangle()
		r.Min.X += m.dx
		r.Max.X += m.dx
		boxes[i] = plot.GlyphBox{X: plt.X.Norm(xy.X), Y: plt.Y.Norm(xy.Y), Rectangle: r}
	}
	return boxes
}

// Thumbnail implements plot.Thumbnailer: the marker in the legend.
func (m *paperMarks) Thumbnail(c *draw.Canvas) {
	c.DrawGlyph(m.GlyphStyle, c.Center())
}

// legendRows is a figure's legend: its entries, laid out in one column
// right of the plot or in several below it, with rows as tall as the
// largest marker.
type legendRows struct {
	entries []legendEntry
}

type legendEntry struct {
	name   string
	thumbs []plot.Thumbnailer
}

func (l *legendRows) add(name string, thumbs ...plot.Thumbnailer) {
	l.entries = append(l.entries, legendEntry{name, thumbs})
}

// gonum builds a legend of the entries from first to last: a column.
func (l *legendRows) column(from, to int) plot.Legend {
	g := plot.NewLegend()
	g.Top, g.Left = true, true
	for _, e := range l.entries[from:to] {
		g.Add(e.name, e.thumbs...)
	}
	// Rows a paper marker's diameter and a little more apart.
	g.Padding = max(0, legendRow-l.textHeight(g))
	return g
}

func (l *legendRows) textHeight(g plot.Legend) vg.Length {
	var h vg.Length
	for _, e := range l.entries {
		h = max(h, g.TextStyle.Rectangle(e.name).Max.Y)
	}
	return h
}

// size is the width of the widest entry (marker and text) and the height
// of a row, gap included.
func (l *legendRows) size() (entryW, rowH vg.Length) {
	g := l.column(0, len(l.entries))
	for _, e := range l.entries {
		entryW = max(entryW, g.ThumbnailWidth+g.TextStyle.Rectangle(" "+e.name).Max.X)
	}
	return entryW, l.textHeight(g) + g.Padding
}

// draw draws the legend into c, top left, in cols columns colW apart,
// filling each column before the next.
func (l *legendRows) draw(c draw.Canvas, cols int, colW vg.Length) {
	rows := (len(l.entries) + cols - 1) / cols
	for k := range cols {
		from, to := k*rows, min((k+1)*rows, len(l.entries))
		if from >= to {
			break
		}
		g := l.column(from, to)
		cc := c
		cc.Min.X += vg.Length(k) * colW
		g.Draw(cc)
	}
}

// palette is Tableau's ten colours (matplotlib's default): more distinct
// colours than plotutil's seven, so no two series of a figure share one.
var palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255}, {148, 103, 189, 255},
	{140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}, {188, 189, 34, 255}, {23, 190, 207, 255},
}

// seriesColor is series i's colour.
func seriesColor(i int) color.Color { return palette[i%len(palette)] }

// hollow is the outline of series i's marker shape (plotutil.Shape), for
// the paper's points of that series.
func hollow(i int) draw.GlyphDrawer {
	switch plotutil.Shape(i).(type) {
	case draw.BoxGlyph:
		return draw.SquareGlyph{}
	case draw.PyramidGlyph:
		return draw.TriangleGlyph{}
	case draw.CircleGlyph:
		return draw.RingGlyph{}
	}
	return plotutil.Shape(i) // the outlined shapes already are
}

// valueRange is the extent of the values a plot shows.
type valueRange struct{ lo, hi float64 }

func newRange() *valueRange { return &valueRange{lo: math.Inf(1), hi: math.Inf(-1)} }

func (r *valueRange) add(v float64) {
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		r.lo, r.hi = min(r.lo, v), max(r.hi, v)
	}
}

func (r *valueRange) ok() bool { return r.lo <= r.hi }

// wrapText breaks s at spaces into lines no wider than w (by width, a
// text style's measure); a word wider than w stays whole on its line.
func wrapText(s string, w vg.Length, width func(string) vg.Length) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case width(line+" "+word) <= w:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return strings.Join(append(lines, line), "\n")
}

// humanTicks labels an axis in human units: sizes in bytes in binary
// units (1 KiB, 2 MiB), 10k and 1M for other large numbers, and plain
// decimals below 1000; div, if not 0, divides the labels (1000 for
// Mbit/s read as Gbit/s). A log axis gets a labelled tick at each power
// of ten and 2 and 5 times it when the range spans few decades; a log
// byte axis one at powers of two, every one over a few octaves, else
// every second or fourth. A linear byte axis gets gonum's positions in
// its binary unit; other linear axes gonum's.
type humanTicks struct {
	log, bytes bool
	div        float64
}

func (h humanTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	switch {
	case h.log && h.bytes && lo > 0:
		octaves := math.Log2(hi / lo)
		step := 1
		switch {
		case octaves > 20:
			step = 4
		case octaves > 10:
			step = 2
		}
		for e := int(math.Floor(math.Log2(lo))); e <= int(math.Ceil(math.Log2(hi))); e++ {
			v := math.Exp2(float64(e))
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if e%step == 0 {
				t.Label = h.label(v)
			}
			ticks = append(ticks, t)
		}
		return ticks
	case h.log && lo > 0:
		decades := math.Log10(hi / lo)
		steps := []float64{1, 2, 5}
		if decades > 4 {
			steps = []float64{1}
		}
		for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
			for _, m := range steps {
				v := m * math.Pow(10, e)
				if v >= lo && v <= hi {
					ticks = append(ticks, plot.Tick{Value: v, Label: h.label(v)})
				}
			}
			for m := 2.0; m < 10; m++ {
				if v := m * math.Pow(10, e); v >= lo && v <= hi && !slices.Contains(steps, m) {
					ticks = append(ticks, plot.Tick{Value: v}) // minor
				}
			}
		}
		return ticks
	case h.bytes:
		// Round numbers of the unit the axis reads in: 1.9, 2, 2.1 MiB.
		unit, _ := binaryUnit(max(math.Abs(lo), math.Abs(hi)))
		for _, t := range steps125(lo/unit, hi/unit) {
			t.Value *= unit
			if t.Label != "" {
				t.Label = h.label(t.Value)
			}
			ticks = append(ticks, t)
		}
		return ticks
	}
	for _, t := range steps125(lo, hi) {
		if t.Label != "" {
			t.Label = h.label(t.Value)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// binaryUnit is the largest binary unit not above v, and its name.
func binaryUnit(v float64) (float64, string) {
	for _, u := range []struct {
		n    float64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if v >= u.n {
			return u.n, u.name
		}
	}
	return 1, "B"
}

// label writes v in human units.
func (h humanTicks) label(v float64) string {
	if h.bytes {
		n, name := binaryUnit(math.Abs(v))
		return strconv.FormatFloat(v/n, 'g', 4, 64) + " " + name
	}
	if h.div != 0 {
		v /= h.div
	}
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func kindOf(f *Figure, series string) string {
	for _, p := range f.Points {
		if p.Series == series {
			return p.Kind
		}
	}
	return ""
}

// logSpan is the ratio of a figure's largest to smallest value above which
// its y axis is logarithmic.
const logSpan = 30

// steps125 are linear ticks at a step of 1, 2 or 5 times a power of ten,
// four to ten of them between lo and hi, all labelled.
func steps125(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 4, 64)}}
	}
	raw := (hi - lo) / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	for n := math.Ceil(lo / step); n*step <= hi && len(ticks) < 20; n++ {
		v := n * step
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 4, 64)})
	}
	return ticks
}
