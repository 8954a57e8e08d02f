package stripe

import "testing"

func TestSplit(t *testing.T) {
	tests := []struct {
		name        string
		pil, pdr    int
		l, r        float64
		u, pdl, pir int
	}{
		// Paper sec. 5, Fig. 9, in the paper's 1-based numbering:
		// C(t_il)=4, C(t_dl)=8, C(t_ir)=12, C(t_dr)=2.
		{"paper", 5, 18, 4 + 8, 12 + 2, 6, 10, 11},
		// The same state with 0-based indices, as a Segment holds it.
		{"paper 0-based", 4, 17, 4 + 8, 12 + 2, 6, 9, 10},
		{"even", 0, 9, 1, 1, 5, 4, 5},
		{"truncates", 0, 9, 1, 2, 3, 2, 3},
		{"left weight zero keeps one", 0, 9, 0, 5, 1, 0, 1},
		{"right weight zero keeps one", 0, 9, 5, 0, 9, 8, 9},
		{"no weights splits evenly", 0, 9, 0, 0, 5, 4, 5},
		{"two fragments", 7, 8, 100, 1, 1, 7, 8},
		{"rates", 100, 199, 3e6, 1e6, 75, 174, 175},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, pdl, pir := split(tt.pil, tt.pdr, tt.l, tt.r)
			if u != tt.u || pdl != tt.pdl || pir != tt.pir {
				t.Errorf("split(%d, %d, %g, %g) = U %d, P(t_dl) %d, P(t_ir) %d; want %d, %d, %d",
					tt.pil, tt.pdr, tt.l, tt.r, u, pdl, pir, tt.u, tt.pdl, tt.pir)
			}
		})
	}
}
