package examples

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/braid-hpc/braid/ops"
)

// histogram is what bytehist and sumcounts together must output for in:
// a line per byte value that occurs (only text bytes if textOnly), in
// order of value.
func histogram(in []byte, textOnly bool) string {
	var counts [256]int
	for _, b := range in {
		counts[b]++
	}
	var sb strings.Builder
	for v, n := range counts {
		text := v >= 0x20 && v < 0x7f || v == '\t' || v == '\n' || v == '\r'
		if n > 0 && (text || !textOnly) {
			fmt.Fprintf(&sb, "%02x\t%d\n", v, n)
		}
	}
	return sb.String()
}

// TestByteHist runs the Rust example as a job would: bytehist over the
// units of a bytes split, their outputs concatenated, the Go sumcounts
// over that. The result must be the histogram of the whole input, for
// any unit size.
func TestByteHist(t *testing.T) {
	hist, sum := module(t, "bytehist"), module(t, "sumcounts")
	rng := rand.New(rand.NewPCG(1, 2))
	in := make([]byte, 300<<10)
	for i := range in {
		if i%3 == 0 {
			in[i] = byte(rng.IntN(256))
		} else {
			in[i] = "the quick brown fox\n"[rng.IntN(20)]
		}
	}
	for _, tc := range []struct {
		split, class string
		units        int // at least this many
	}{
		{"bytes:4K", "", 70},
		{"bytes:100000", "text", 3},
		{"whole", "all", 1},
	} {
		t.Run(fmt.Sprintf("split=%s/CLASS=%s", tc.split, tc.class), func(t *testing.T) {
			env := map[string]string{}
			if tc.class != "" {
				env["CLASS"] = tc.class
			}
			results := runUnits(t, hist, "bytehist", in, tc.split, env)
			if len(results) < tc.units {
				t.Fatalf("%d units, want at least %d", len(results), tc.units)
			}
			got := mustRun(t, sum, "sumcounts", ops.Concat(results), nil)
			if want := histogram(in, tc.class == "text"); string(got) != want {
				t.Errorf("histogram over %d units differs from the direct count\n%s", len(results), firstLineDiff(string(got), want))
			}
		})
	}
	if out := mustRun(t, hist, "bytehist", nil, nil); len(out) != 0 {
		t.Errorf("bytehist of no input = %q, want nothing", out)
	}
}

func TestByteHistBadParam(t *testing.T) {
	_, err := run(t, module(t, "bytehist"), "bytehist", []byte("a"), map[string]string{"CLASS": "binary"})
	wantExit(t, err, 2, `CLASS="binary"`, "want all or text")
}
