// Command wordcount is a braid operation (a WASI preview 1 module) that
// counts the words of its input: the map half of a word count.
//
// It reads the unit's input on stdin, splits it into words separated by
// white space (unicode.IsSpace) and writes one "word\tcount\n" line per
// distinct word, sorted by word (byte order). The parameter LOWER=1
// lowercases words first (default LOWER=0). Split the input with
// lines:SIZE so that no word is cut between units, and reduce the units'
// outputs with sumcounts:
//
//	GOOS=wasip1 GOARCH=wasm go build -o wordcount.wasm ./examples/ops/wordcount
//	braid op run wordcount.wasm --param LOWER=1 < book.txt
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

func main() {
	lower, err := lowerParam(os.Getenv("LOWER"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "wordcount:", err)
		os.Exit(2)
	}
	counts, err := count(os.Stdin, lower)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wordcount: read input:", err)
		os.Exit(1)
	}
	if err := write(os.Stdout, counts); err != nil {
		fmt.Fprintln(os.Stderr, "wordcount: write output:", err)
		os.Exit(1)
	}
}

// lowerParam parses the LOWER parameter: empty or 0 is false, 1 true.
func lowerParam(s string) (bool, error) {
	switch strings.TrimSpace(s) {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("parameter LOWER=%q: want 0 or 1", s)
}

// count returns how often each word of r occurs.
func count(r io.Reader, lower bool) (map[string]int64, error) {
	sc := bufio.NewScanner(r)
	// A word may be as long as the whole unit: the job's memory limit,
	// not the scanner, bounds it.
	sc.Buffer(make([]byte, 64<<10), int(^uint(0)>>1))
	sc.Split(bufio.ScanWords) // white space as unicode.IsSpace defines it
	counts := map[string]int64{}
	for sc.Scan() {
		w := sc.Text()
		if lower {
			w = strings.ToLower(w)
		}
		counts[w]++
	}
	return counts, sc.Err()
}

// write prints counts as "word\tcount\n" lines sorted by word.
func write(w io.Writer, counts map[string]int64) error {
	words := make([]string, 0, len(counts))
	for word := range counts {
		words = append(words, word)
	}
	slices.Sort(words)
	bw := bufio.NewWriterSize(w, 64<<10)
	for _, word := range words {
		fmt.Fprintf(bw, "%s\t%d\n", word, counts[word])
	}
	return bw.Flush()
}
