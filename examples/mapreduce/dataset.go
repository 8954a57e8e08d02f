// Package mapreduce is an example of map-reduce across a dataset: a word
// count over 1,000 generated text files, with the example operations
// wordcount (the map, on every unit of every file) and sumcounts (the
// reduce, in a tree over all their outputs). README.md shows the
// commands; expected.txt is the output they must give, which the test
// checks, end to end, on a server and two workers.
package mapreduce

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// Files is how many files Generate writes by default.
const Files = 1000

// vocabulary are the words of the generated text; a few appear in more
// than one case, which wordcount keeps apart (without LOWER=1).
var vocabulary = strings.Fields(`the The of and a to in is braid job unit worker server dataset member
map reduce tree split merge blob manifest lines bytes stream thread path Straße naïve 日本 ωmega
tile halo module wasm sandbox queue retry lease epoch cluster node shard log record count word`)

// Generate writes n text files, part-0000.txt to part-NNNN.txt, into dir
// (made if missing): lines of words of the vocabulary, from a fixed seed,
// so the same n gives the same bytes everywhere. File sizes vary from a
// few bytes to about 8 KiB; some lines are empty.
func Generate(dir string, n int) error {
	if n < 1 || n > 100_000 {
		return fmt.Errorf("generate: %d files: want 1 to 100000", n)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(26, 3))
	for i := range n {
		var b strings.Builder
		lines := 1 + rng.IntN(120)
		for range lines {
			words := rng.IntN(12)
			for w := range words {
				if w > 0 {
					b.WriteString(" ")
				}
				b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
			}
			b.WriteString("\n")
		}
		name := filepath.Join(dir, fmt.Sprintf("part-%04d.txt", i))
		if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
