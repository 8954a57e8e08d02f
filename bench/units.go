package bench

import "regexp"

// Sizes in the reports are binary, as the plots' byte axes read them
// (humanTicks: 1 KiB, 2 MiB): every size braid measures is a power-of-two
// multiple (2 << 20 bytes, not 2,000,000). Older runs wrote them "2 MB"
// and "12 KB" in titles, series, table rows and findings, beside an axis
// in MiB; binaryUnits rewrites such text, so that a figure's title, its
// axis and its table say the same.
var (
	decimalSize = regexp.MustCompile(`\b(\d+(?:\.\d+)?) ?([KMG])B\b`)
	decimalUnit = regexp.MustCompile(`\(([KMG])B\)`)
)

// binaryUnits writes the sizes of s in binary units: "2 MB" as "2 MiB",
// "(MB)" as "(MiB)". Other text ("Mbit/s", "CPU per GB") stays.
func binaryUnits(s string) string {
	s = decimalSize.ReplaceAllString(s, "$1 ${2}iB")
	return decimalUnit.ReplaceAllString(s, "(${1}iB)")
}

// binaryUnits rewrites, in binary units, the sizes that res's figures
// show: titles, x axes, series names and the rows' sizes, and the
// findings that name them. Notes and setups, which quote the papers in
// their own words, stay.
func (res *Results) binaryUnits() {
	for _, p := range res.Papers {
		for i, s := range p.Findings {
			p.Findings[i] = binaryUnits(s)
		}
		for _, f := range p.Figures {
			f.Title, f.XLabel = binaryUnits(f.Title), binaryUnits(f.XLabel)
			for i := range f.Compare {
				f.Compare[i] = [2]string{binaryUnits(f.Compare[i][0]), binaryUnits(f.Compare[i][1])}
			}
			for _, pt := range f.Points {
				pt.Series, pt.XLabel = binaryUnits(pt.Series), binaryUnits(pt.XLabel)
			}
		}
	}
}
