package examples

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/braid-hpc/braid/ops"
)

// TestWordCount runs the word count as a job would: wordcount over the
// units of a lines split, the outputs concatenated, sumcounts over that.
// The result must equal a count made here, whatever the unit size: the
// lines split never cuts a word in two.
func TestWordCount(t *testing.T) {
	wc, sum := module(t, "wordcount"), module(t, "sumcounts")
	text := sampleText(150 << 10)
	if longest := slices.Max(lineLengths(text)); longest <= 4<<10 {
		t.Fatalf("the sample's longest line has %d bytes; want one longer than the smallest unit, 4 KiB", longest)
	}
	for _, tc := range []struct {
		split string
		lower string
		units int // at least this many
	}{
		{"lines:4K", "0", 20},
		{"lines:10000", "1", 10},
		{"lines:64K", "0", 2},
		{"lines:1M", "1", 1},
		{"whole", "", 1},
	} {
		t.Run(fmt.Sprintf("split=%s/LOWER=%s", tc.split, tc.lower), func(t *testing.T) {
			env := map[string]string{}
			if tc.lower != "" {
				env["LOWER"] = tc.lower
			}
			results := runUnits(t, wc, "wordcount", text, tc.split, env)
			if len(results) < tc.units {
				t.Fatalf("%d units, want at least %d", len(results), tc.units)
			}
			got := mustRun(t, sum, "sumcounts", ops.Concat(results), env)
			if want := countWords(string(text), tc.lower == "1"); string(got) != want {
				t.Errorf("word count over %d units differs from the direct count\n%s", len(results), firstLineDiff(string(got), want))
			}
		})
	}
}

func TestWordCountBadParam(t *testing.T) {
	_, err := run(t, module(t, "wordcount"), "wordcount", []byte("a b"), map[string]string{"LOWER": "yes"})
	wantExit(t, err, 2, `LOWER="yes"`, "want 0 or 1")
}

// TestSumCountsBadLine: a line that is not WORD<tab>COUNT fails the run
// with exit code 1 and a message naming the line.
func TestSumCountsBadLine(t *testing.T) {
	mod := module(t, "sumcounts")
	for _, tc := range []struct {
		name, in, line string
	}{
		{"no tab", "a\t1\nb\t2\nbogus\nc\t3\n", "line 3"},
		{"count not a number", "a\t1\nb\tmany\n", "line 2"},
		{"negative count", "a\t-1\n", "line 1"},
		{"empty line", "a\t1\n\nb\t1\n", "line 2"},
		{"no word", "a\t1\nb\t1\n\t5\n", "line 3"},
		{"sum overflows", "a\t9223372036854775807\nb\t1\na\t1\n", "line 3"},
		{"last line without newline", "a\t1\nb\t1\nc", "line 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, mod, "sumcounts", []byte(tc.in), nil)
			wantExit(t, err, 1, tc.line)
		})
	}
	// A last line without its newline is fine, as is no input at all.
	if out := mustRun(t, mod, "sumcounts", []byte("b\t2\na\t1\nb\t3"), nil); string(out) != "a\t1\nb\t5\n" {
		t.Errorf("sumcounts = %q, want %q", out, "a\t1\nb\t5\n")
	}
	if out := mustRun(t, mod, "sumcounts", nil, nil); len(out) != 0 {
		t.Errorf("sumcounts of nothing = %q, want nothing", out)
	}
}

// sampleText returns about size bytes of text: lines of words from a small
// vocabulary in mixed case, some non-ASCII, separated by spaces, tabs and
// Unicode white space (no-break space, em space, ideographic space).
func sampleText(size int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"the", "The", "THE", "braid", "Braid", "job", "unit", "tile", "halo", "Straße", "STRASSE",
		"naïve", "Ωmega", "ωmega", "日本", "x", "a-b", "don't", "42", "\xff\xfe"}
	seps := []string{" ", " ", " ", "  ", "\t", "\u00a0", "\u2003", "\u3000", "\v"}
	var b strings.Builder
	for b.Len() < size {
		n := rng.IntN(20)
		if rng.IntN(200) == 0 {
			n = 800 // a line longer than the smallest unit
		}
		for i := range n {
			if i > 0 || rng.IntN(4) == 0 {
				b.WriteString(seps[rng.IntN(len(seps))])
			}
			b.WriteString(words[rng.IntN(len(words))])
		}
		if rng.IntN(8) == 0 {
			b.WriteString(" ")
		}
		b.WriteString("\n")
		if rng.IntN(10) == 0 {
			b.WriteString("\n") // an empty line
		}
	}
	return []byte(b.String())
}

// lineLengths returns the length of each line of text.
func lineLengths(text []byte) []int {
	var n []int
	for line := range bytes.Lines(text) {
		n = append(n, len(line))
	}
	return n
}

// countWords is what wordcount then sumcounts must give for text.
func countWords(text string, lower bool) string {
	counts := map[string]int{}
	for _, w := range strings.FieldsFunc(text, unicode.IsSpace) {
		if lower {
			w = strings.ToLower(w)
		}
		counts[w]++
	}
	var b strings.Builder
	for _, w := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(&b, "%s\t%d\n", w, counts[w])
	}
	return b.String()
}

// firstLineDiff describes the first line where got and want differ.
func firstLineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: got %q, want %q (%d lines, want %d)", i+1, gl, wl, len(g)-1, len(w)-1)
		}
	}
	return "no line differs"
}
