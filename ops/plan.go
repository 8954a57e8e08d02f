package ops

import (
	"context"
	"fmt"
	"io"
	"regexp"
)

// Planned returns op with an explicit split and merge; a zero Split or
// Merge keeps op's own. reduce is the operation of a reduce merge (nil
// otherwise). With a split of their own, operations that take tiles
// accept only whole and tiles (their own tiling, halo included) and merge
// only as tiles; the others run their Run on every unit the split makes,
// and their outputs are concatenated unless the merge says otherwise.
func Planned(op Op, sp Split, mg Merge, reduce Op) (Op, error) {
	name := op.Name()
	if (mg.Kind == MergeReduce) != (reduce != nil) {
		return nil, fmt.Errorf("%s: a reduce merge needs its operation, and only it: %w", name, ErrBadParam)
	}
	if op.Info().Tiles {
		switch sp.Kind {
		case "", SplitWhole, SplitTiles:
		default:
			return nil, fmt.Errorf("%s: takes an image: split it as whole or tiles:WxH, not %s: %w", name, sp, ErrBadParam)
		}
		if mg.Kind != "" && mg.Kind != MergeTiles {
			return nil, fmt.Errorf("%s: its units give image tiles: merge them as tiles, not %s: %w", name, mg, ErrBadParam)
		}
		if sp.Kind == "" && mg.Kind == "" {
			return op, nil
		}
		return &planned{Op: op, split: sp, merge: Merge{Kind: MergeTiles}, native: true}, nil
	}
	if sp.Kind == "" && mg.Kind == "" {
		return op, nil
	}
	if sp.Kind == "" {
		sp = Split{Kind: SplitWhole}
	}
	if mg.Kind == "" {
		mg = Merge{Kind: MergeConcat}
		if sp.Kind == SplitTiles {
			mg = Merge{Kind: MergeTiles}
		}
	}
	return &planned{Op: op, split: sp, merge: mg, reduce: reduce}, nil
}

// planned is an operation with an explicit split and merge.
type planned struct {
	Op
	split  Split
	merge  Merge
	reduce Op
	// native: an image operation split its own way, by tiles or whole.
	native bool
}

// Reducer returns the operation of a reduce merge, or nil.
func (p *planned) Reducer() Op { return p.reduce }

func (p *planned) Split(in io.ReaderAt, size int64, params map[string]string, hint Hint) ([]UnitSpec, error) {
	specs, _, err := p.splitTo(in, size, params, hint, "", nil)
	return specs, err
}

// SplitStored implements Streamer.
func (p *planned) SplitStored(in io.ReaderAt, size int64, params map[string]string, hint Hint, dir string, data io.WriterAt) ([]UnitSpec, int64, error) {
	return p.splitTo(in, size, params, hint, dir, data)
}

// splitTo is Split, and SplitStored if data is not nil.
func (p *planned) splitTo(in io.ReaderAt, size int64, params map[string]string, hint Hint, dir string, data io.WriterAt) ([]UnitSpec, int64, error) {
	name := p.Name()
	if hint.Units != 0 || hint.tiled() {
		return nil, 0, fmt.Errorf("%s: give a split or a number of units or a tile size, not both: %w", name, ErrBadParam)
	}
	if hint.Repeat < 0 || hint.Repeat > MaxUnits {
		return nil, 0, fmt.Errorf("%s: repeat %d: want 0 to %d: %w", name, hint.Repeat, MaxUnits, ErrBadParam)
	}
	if p.native {
		h := hint
		if p.split.Kind == SplitTiles {
			h.TileW, h.TileH = p.split.TileW, p.split.TileH
		}
		if st, ok := p.Op.(Streamer); ok && data != nil {
			return st.SplitStored(in, size, params, h, dir, data)
		}
		specs, err := p.Op.Split(in, size, params, h)
		return specs, 0, err
	}
	if err := CheckParams(name, p.Info(), params); err != nil {
		return nil, 0, err
	}
	specs, written, err := splitInput(name, in, size, p.split, params, dir, data)
	if err != nil {
		return nil, 0, err
	}
	if p.reduce != nil {
		specs = reduceTree(specs, params)
	}
	if err := checkUnits(name, len(specs), hint); err != nil {
		return nil, 0, err
	}
	return repeat(specs, hint.copies()), written, nil
}

func (p *planned) Assemble(params map[string]string, hint Hint, results [][]byte) ([]byte, error) {
	name := p.Name()
	if p.native {
		return p.Op.Assemble(params, hint, results)
	}
	if p.merge.Kind == MergeNone {
		return nil, fmt.Errorf("%s: merge none: the input is not a dataset: %w", name, ErrBadParam)
	}
	results, err := firstCopy(name, results, hint)
	if err != nil {
		return nil, err
	}
	switch p.merge.Kind {
	case MergeTiles:
		return AssembleTiles(name, results)
	case MergeReduce:
		if len(results) == 0 {
			return nil, fmt.Errorf("%s: assemble: no reduce result: %w", name, ErrBadInput)
		}
		return results[len(results)-1], nil
	}
	return Concat(results), nil
}

// AssembleStored implements Streamer: the results are read as the merge
// needs them, and only those of an operation that is no Streamer are
// read into memory at once.
func (p *planned) AssembleStored(params map[string]string, hint Hint, rs Results, dir string, w io.Writer) error {
	name := p.Name()
	if p.native {
		if st, ok := p.Op.(Streamer); ok {
			return st.AssembleStored(params, hint, rs, dir, w)
		}
		results, err := readResults(rs)
		if err != nil {
			return fmt.Errorf("%s: assemble: %w", name, err)
		}
		out, err := p.Op.Assemble(params, hint, results)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	if p.merge.Kind == MergeNone {
		return fmt.Errorf("%s: merge none: the input is not a dataset: %w", name, ErrBadParam)
	}
	rs, err := firstCopyOf(name, rs, hint)
	if err != nil {
		return err
	}
	switch p.merge.Kind {
	case MergeTiles:
		return assembleTilesTo(name, "merge tiles", rs, true, w)
	case MergeReduce:
		if rs.Len() == 0 {
			return fmt.Errorf("%s: assemble: no reduce result: %w", name, ErrBadInput)
		}
		rs = subResults{rs, []int{rs.Len() - 1}}
	}
	if err := concatTo(rs, w); err != nil {
		return fmt.Errorf("%s: assemble: %w", name, err)
	}
	return nil
}

// Run runs a unit of the split; a reduce unit runs the reduce operation
// on its inputs joined.
func (p *planned) Run(ctx context.Context, params map[string]string, inputs [][]byte) ([]byte, error) {
	if len(inputs) > 1 && !p.native {
		inputs = [][]byte{Concat(inputs)}
	}
	return p.Op.Run(ctx, params, inputs)
}

// envName is what a parameter of a user operation may be called: it
// becomes an environment variable.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// CheckParams fails on a parameter the operation does not declare, or,
// if info.AnyParams, on one not named like an environment variable.
func CheckParams(op string, info Info, params map[string]string) error {
	if !info.AnyParams {
		return checkParams(op, info.Params, params)
	}
	for name := range params {
		if !envName.MatchString(name) {
			return fmt.Errorf("%s: parameter %q: a name is a letter or '_', then letters, digits or '_': %w", op, name, ErrBadParam)
		}
	}
	return nil
}
