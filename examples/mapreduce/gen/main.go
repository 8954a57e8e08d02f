// Command gen writes the example dataset of package mapreduce: 1,000
// text files (or -n) into a directory.
//
//	go run ./examples/mapreduce/gen words/
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/braid-hpc/braid/examples/mapreduce"
)

func main() {
	n := flag.Int("n", mapreduce.Files, "how many files to write")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: go run ./examples/mapreduce/gen [-n N] DIR")
		os.Exit(2)
	}
	if err := mapreduce.Generate(flag.Arg(0), *n); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
