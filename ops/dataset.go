package ops

import (
	"fmt"
	"io"
	"slices"
)

// ReduceFanIn is how many results one reduce unit combines at most. A
// reduce merge over more results is a tree: the results, in order, in
// groups of ReduceFanIn, each reduced by a unit; those units' results in
// groups again; up to one root. So the reduce operation must take its
// own output as input (sums, counts, histograms, sorted merges do), and
// every reduce unit's input stays small however many units map.
const ReduceFanIn = 16

// reduceTree appends to specs, all mapping units, the reduce units of a
// tree over them (see ReduceFanIn); the last unit is the root. For at
// most ReduceFanIn units it is one unit depending on them all.
func reduceTree(specs []UnitSpec, params map[string]string) []UnitSpec {
	level := make([]int, len(specs))
	for i := range level {
		level[i] = i
	}
	// Every pass divides the level by ReduceFanIn: at most a dozen.
	for {
		next := make([]int, 0, (len(level)+ReduceFanIn-1)/ReduceFanIn)
		for lo := 0; lo < len(level); lo += ReduceFanIn {
			deps := slices.Clone(level[lo:min(lo+ReduceFanIn, len(level))])
			specs = append(specs, UnitSpec{Params: params, Deps: deps, Reduce: true})
			next = append(next, len(specs)-1)
		}
		if len(next) <= 1 {
			return specs
		}
		level = next
	}
}

// MemberSpec is a unit of SplitEach: Member is the index of the member
// whose bytes a FromInput unit reads (-1 for a reduce unit).
type MemberSpec struct {
	UnitSpec
	Member int
}

// SplitEach splits a job over a dataset: each member as the job's split
// cuts one input (whole when it names none), member after member, then,
// for a reduce merge, one reduce tree over all their units. op is the
// operation as Planned returns it, with sp, mg and reduce what it was
// planned with. Operations that take images (tiles) and repeated jobs
// cannot run over a dataset.
//
// member(i) returns member i's bytes, for i from 0 to members-1 in
// order; its errors are returned as they are.
func SplitEach(op Op, sp Split, mg Merge, reduce Op, members int, member func(i int) (io.ReaderAt, int64, error), params map[string]string, hint Hint) ([]MemberSpec, error) {
	name := op.Name()
	switch {
	case op.Info().Tiles:
		return nil, fmt.Errorf("%s: takes an image; a job over a dataset runs operations on bytes: %w", name, ErrBadParam)
	case splitsItself(op):
		return nil, fmt.Errorf("%s: splits its input itself (its units are not byte ranges), so it cannot map over a dataset's members; "+
			"run it on each member's blob, or on the members joined (--input repeated): %w", name, ErrBadParam)
	case sp.Kind == SplitTiles:
		return nil, fmt.Errorf("%s: split %s: a job over a dataset splits its members by bytes or lines: %w", name, sp, ErrBadParam)
	case mg.Kind == MergeTiles:
		return nil, fmt.Errorf("%s: merge tiles: a job over a dataset merges by concat, none or reduce:OP: %w", name, ErrBadParam)
	case hint.Repeat > 1 || hint.Units != 0 || hint.tiled():
		return nil, fmt.Errorf("%s: a job over a dataset takes a split, not units, tiles or repeat: %w", name, ErrBadParam)
	case (mg.Kind == MergeReduce) != (reduce != nil):
		return nil, fmt.Errorf("%s: a reduce merge needs its operation, and only it: %w", name, ErrBadParam)
	case members <= 0:
		return nil, fmt.Errorf("%s: the dataset has no members: %w", name, ErrBadInput)
	}
	if err := CheckParams(name, op.Info(), params); err != nil {
		return nil, err
	}
	if sp.Kind == "" {
		sp = Split{Kind: SplitWhole}
	}
	var out []MemberSpec
	for i := range members {
		in, size, err := member(i)
		if err != nil {
			return nil, err
		}
		specs, _, err := splitInput(name, in, size, sp, params, "", nil)
		if err != nil {
			return nil, fmt.Errorf("member %d: %w", i+1, err)
		}
		if len(out)+len(specs) > MaxUnits {
			return nil, fmt.Errorf("%s: the dataset's members make more than %d units; use a bigger split size: %w", name, MaxUnits, ErrBadParam)
		}
		for _, s := range specs {
			out = append(out, MemberSpec{UnitSpec: s, Member: i})
		}
	}
	if reduce == nil {
		return out, nil
	}
	specs := make([]UnitSpec, len(out))
	for i := range out {
		specs[i] = out[i].UnitSpec
	}
	specs = reduceTree(specs, params)
	if len(specs) > MaxUnits {
		return nil, fmt.Errorf("%s: %d units with the reduce tree, more than the limit %d; use a bigger split size: %w", name, len(specs), MaxUnits, ErrBadParam)
	}
	for _, s := range specs[len(out):] {
		out = append(out, MemberSpec{UnitSpec: s, Member: -1})
	}
	return out, nil
}

// selfSplitter is an operation whose units are its own Split's, not
// byte ranges any split could make (checksum's chunks and reduce unit):
// SplitEach cannot map it over a dataset's members.
type selfSplitter interface{ splitsItself() }

func splitsItself(op Op) bool {
	_, ok := op.(selfSplitter)
	return ok
}
