// Command sumcounts is a braid operation (a WASI preview 1 module) that
// adds up word counts: the reduce half of a word count.
//
// It reads "word\tcount" lines on stdin, from any number of wordcount
// outputs one after the other, adds the counts of each word and writes
// one "word\tcount\n" line per word, sorted by word (byte order). The
// last line may lack its newline. A line that is not a word, a tab and a
// whole number of at least 0 fails the run with exit code 1, naming the
// line. Use it as the merge of a wordcount job after uploading it:
//
//	braid op add sumcounts sumcounts.wasm
//	braid submit --op wordcount --input ID --split lines:4M --merge reduce:sumcounts --wait
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
)

func main() {
	sums, err := sum(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sumcounts:", err)
		os.Exit(1)
	}
	if err := write(os.Stdout, sums); err != nil {
		fmt.Fprintln(os.Stderr, "sumcounts: write output:", err)
		os.Exit(1)
	}
}

// sum adds up the counts of the "word\tcount" lines of r per word.
func sum(r io.Reader) (map[string]int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	sums := map[string]int64{}
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: collect the rest of it.
			long := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("read input at line %d: %v", n, err)
		}
		if len(line) == 0 && err == io.EOF {
			return sums, nil
		}
		word, c, perr := parseLine(bytes.TrimSuffix(line, []byte("\n")))
		if perr != nil {
			return nil, fmt.Errorf("line %d: %v", n, perr)
		}
		if sums[word] > math.MaxInt64-c {
			return nil, fmt.Errorf("line %d: the count of %q passes %d", n, word, int64(math.MaxInt64))
		}
		sums[word] += c
		if err == io.EOF {
			return sums, nil
		}
	}
}

// parseLine splits "word\tcount" at its last tab.
func parseLine(line []byte) (string, int64, error) {
	i := bytes.LastIndexByte(line, '\t')
	if i <= 0 {
		return "", 0, fmt.Errorf("want WORD<tab>COUNT, got %s", quote(line))
	}
	c, err := strconv.ParseInt(string(line[i+1:]), 10, 64)
	if err != nil || c < 0 {
		return "", 0, fmt.Errorf("count %s is not a whole number from 0 to %d, in %s", quote(line[i+1:]), int64(math.MaxInt64), quote(line))
	}
	return string(line[:i]), c, nil
}

// quote quotes b for a message, shortened to its first 60 bytes.
func quote(b []byte) string {
	if len(b) > 60 {
		return strconv.Quote(string(b[:60])) + "..."
	}
	return strconv.Quote(string(b))
}

// write prints sums as "word\tcount\n" lines sorted by word.
func write(w io.Writer, sums map[string]int64) error {
	words := make([]string, 0, len(sums))
	for word := range sums {
		words = append(words, word)
	}
	slices.Sort(words)
	bw := bufio.NewWriterSize(w, 64<<10)
	for _, word := range words {
		fmt.Fprintf(bw, "%s\t%d\n", word, sums[word])
	}
	return bw.Flush()
}
