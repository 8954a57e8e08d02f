package ops

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

// TestReduceTree: every unit's result is reduced exactly once, no reduce
// unit takes more than ReduceFanIn results, in order, and the last unit
// is the root; up to ReduceFanIn units, one reduce unit takes them all.
func TestReduceTree(t *testing.T) {
	for _, n := range []int{1, 2, ReduceFanIn, ReduceFanIn + 1, 300, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			specs := reduceTree(make([]UnitSpec, n), nil)
			used := make([]int, len(specs))
			reduces := 0
			for i, s := range specs[n:] {
				reduces++
				if !s.Reduce || len(s.Deps) == 0 || len(s.Deps) > ReduceFanIn {
					t.Fatalf("unit %d: reduce %v with %d deps", n+i, s.Reduce, len(s.Deps))
				}
				for k, d := range s.Deps {
					if d >= n+i || (k > 0 && d != s.Deps[k-1]+1) {
						t.Fatalf("unit %d: deps %v not earlier and in order", n+i, s.Deps)
					}
					used[d]++
				}
			}
			for i := range len(specs) - 1 {
				if used[i] != 1 {
					t.Fatalf("unit %d is reduced %d times", i, used[i])
				}
			}
			if used[len(specs)-1] != 0 {
				t.Fatal("the root is reduced again")
			}
			if n <= ReduceFanIn && reduces != 1 {
				t.Errorf("%d units: %d reduce units, want 1", n, reduces)
			}
		})
	}
}

// TestSplitEach: members are split one after the other, each unit
// naming its member; a reduce tree comes after them all; what a dataset
// job cannot take is refused.
func TestSplitEach(t *testing.T) {
	a, b := []byte("one\ntwo\nthree\n"), []byte("four\n")
	data := [][]byte{a, b, nil}
	members := func(i int) (io.ReaderAt, int64, error) { return bytes.NewReader(data[i]), int64(len(data[i])), nil }
	specs, err := SplitEach(Noop(), Split{Kind: SplitLines, Size: 4}, Merge{Kind: MergeConcat}, nil, 3, members, nil, Hint{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range specs {
		got = append(got, fmt.Sprintf("%d:%d+%d", s.Member, s.Off, s.Len))
	}
	if fmt.Sprint(got) != "[0:0+4 0:4+4 0:8+6 1:0+5 2:0+0]" {
		t.Errorf("units %v", got)
	}
	specs, err = SplitEach(Noop(), Split{}, Merge{Kind: MergeReduce, Op: "count"}, Noop(), 3, members, nil, Hint{})
	if err != nil || len(specs) != 4 || specs[3].Member != -1 || len(specs[3].Deps) != 3 {
		t.Errorf("reduce: %+v, %v", specs, err)
	}
	for _, c := range []struct {
		op      Op
		hint    Hint
		members int
	}{
		{Blur(), Hint{}, 3},
		{Checksum(), Hint{}, 3}, // its units are its own split's: chunks and a reduce unit
		{Noop(), Hint{Repeat: 2}, 3},
		{Noop(), Hint{}, 0},
	} {
		_, err := SplitEach(c.op, Split{}, Merge{}, nil, c.members, members, nil, c.hint)
		if !errors.Is(err, ErrBadParam) && !errors.Is(err, ErrBadInput) {
			t.Errorf("%s %+v %d members: %v, want refused", c.op.Name(), c.hint, c.members, err)
		}
	}
}
