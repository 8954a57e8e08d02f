package ops

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
)

// MaxUnits bounds the units one job may have, repeats included.
const MaxUnits = 1 << 16

// Op is an operation: how to split a job, run a unit, assemble results.
// Implementations must be safe for concurrent use.
type Op interface {
	// Name is what jobs call the operation, e.g. "blur".
	Name() string
	// Info describes the operation and its parameters.
	Info() Info
	// Split cuts the input (size bytes readable from in) into units. It
	// validates params and hint, so a job that splits will not fail for
	// a bad parameter later. Units appear in dependency order.
	Split(in io.ReaderAt, size int64, params map[string]string, hint Hint) ([]UnitSpec, error)
	// Run computes one unit. inputs[0] is the unit's own data (possibly
	// empty); inputs[1:] are the results of its Deps, in order.
	Run(ctx context.Context, params map[string]string, inputs [][]byte) ([]byte, error)
	// Assemble turns the results of the units Split returned, in the same
	// order, into the job's output. params and hint are the job's.
	Assemble(params map[string]string, hint Hint, results [][]byte) ([]byte, error)
}

// Info describes an operation for listings and help texts.
type Info struct {
	// Doc is a one-line description.
	Doc string
	// Tiles is true if the operation accepts Hint.TileW and TileH.
	Tiles bool
	// Params are the parameters a job may set.
	Params []Param
	// AnyParams lets a job set any parameter named like an environment
	// variable, besides Params: a module that declared none.
	AnyParams bool
}

// Param describes one parameter.
type Param struct {
	Name    string
	Default string
	Doc     string
}

// Hint says how finely to split a job. The zero Hint lets the operation
// choose (for images: one unit for the whole image).
type Hint struct {
	// Units asks for about this many units per copy; 0 lets the operation
	// choose. Not together with a tile size.
	Units int
	// TileW and TileH cut an image into tiles of this size; both 0 means
	// no tiling. Only operations whose Info().Tiles is true accept them.
	TileW, TileH int
	// Repeat processes the job this many times; 0 and 1 mean once.
	Repeat int
}

// copies is the number of times the job is processed.
func (h Hint) copies() int { return max(h.Repeat, 1) }

// tiled reports whether h asks for tiles.
func (h Hint) tiled() bool { return h.TileW != 0 || h.TileH != 0 }

// check validates h for the operation op.
func (h Hint) check(op string, tiles bool) error {
	switch {
	case h.Units < 0:
		return fmt.Errorf("%s: units %d: want 0 (let the operation choose) or more: %w", op, h.Units, ErrBadParam)
	case h.Repeat < 0:
		return fmt.Errorf("%s: repeat %d: want 0 or more: %w", op, h.Repeat, ErrBadParam)
	case h.Repeat > MaxUnits:
		return fmt.Errorf("%s: repeat %d: at most %d: %w", op, h.Repeat, MaxUnits, ErrBadParam)
	case !h.tiled():
		return nil
	case h.TileW < 1 || h.TileH < 1:
		return fmt.Errorf("%s: tile %dx%d: width and height must be at least 1 pixel (omit the tile for none): %w", op, h.TileW, h.TileH, ErrBadParam)
	case !tiles:
		return fmt.Errorf("%s: does not take a tile size; ask for a number of units instead: %w", op, ErrBadParam)
	case h.Units > 0:
		return fmt.Errorf("%s: give a tile size or a number of units, not both: %w", op, ErrBadParam)
	}
	return nil
}

// UnitSpec is one unit as Split describes it.
type UnitSpec struct {
	// Params are the unit's complete parameters: Run sees only these.
	// Specs may share one map; treat it as read-only.
	Params map[string]string
	// Data is the unit's own data, made by Split, when FromInput and
	// Stored are false. Nil means none.
	Data []byte
	// FromInput says the unit's own data is the byte range [Off, Off+Len)
	// of the job's input; the caller reads it from storage when it sends
	// the unit. Data is nil then.
	FromInput bool
	// Stored says the unit's own data is the byte range [Off, Off+Len) of
	// what SplitStored wrote to its data. Data is nil then.
	Stored   bool
	Off, Len int64
	// Deps are indexes of earlier units of the same Split whose results
	// are this unit's further inputs, in this order.
	Deps []int
	// Reduce marks the unit of a reduce merge: it runs the merge's
	// operation on the concatenation of its Deps' results, and its
	// result is the job's output.
	Reduce bool
}

// repeat returns n copies of specs one after the other, with Deps shifted
// to point into their own copy.
func repeat(specs []UnitSpec, n int) []UnitSpec {
	if n <= 1 {
		return specs
	}
	out := make([]UnitSpec, 0, n*len(specs))
	for c := range n {
		for _, s := range specs {
			if len(s.Deps) > 0 {
				deps := make([]int, len(s.Deps))
				for i, d := range s.Deps {
					deps[i] = d + c*len(specs)
				}
				s.Deps = deps
			}
			out = append(out, s)
		}
	}
	return out
}

// firstCopy checks that the results of a repeated job agree copy by copy
// and returns the first copy's results.
func firstCopy(op string, results [][]byte, hint Hint) ([][]byte, error) {
	n := hint.copies()
	if len(results)%n != 0 {
		return nil, fmt.Errorf("%s: assemble: %d results do not split into %d copies: %w", op, len(results), n, ErrBadInput)
	}
	per := len(results) / n
	first := results[:per]
	for c := 1; c < n; c++ {
		for i, r := range results[c*per : (c+1)*per] {
			if string(r) != string(first[i]) {
				return nil, fmt.Errorf("%s: assemble: copy %d of unit %d differs from copy 1 (unit %d); a worker computed a wrong result: %w",
					op, c+1, c*per+i, i, ErrBadInput)
			}
		}
	}
	return first, nil
}

// checkUnits fails if a job would have more than MaxUnits units.
func checkUnits(op string, perCopy int, hint Hint) error {
	if total := perCopy * hint.copies(); perCopy > MaxUnits || total > MaxUnits {
		return fmt.Errorf("%s: %d units per copy x %d copies is more than the limit %d; use bigger tiles or fewer units: %w",
			op, perCopy, hint.copies(), MaxUnits, ErrBadParam)
	}
	return nil
}

// Registry maps operation names to operations. It is safe for concurrent
// use.
type Registry struct {
	mu  sync.RWMutex
	ops map[string]Op
}

// NewRegistry returns a registry holding ops. It panics on a duplicate
// name, which is a programming error.
func NewRegistry(ops ...Op) *Registry {
	r := &Registry{ops: map[string]Op{}}
	for _, op := range ops {
		if err := r.Register(op); err != nil {
			panic(err)
		}
	}
	return r
}

// Builtin returns a new registry with every operation of this package:
// blur, checksum, edges, grayscale, noop, sharpen, sleep.
func Builtin() *Registry {
	return NewRegistry(Blur(), Grayscale(), Sharpen(), Edges(), Noop(), Checksum(), Sleep())
}

// Register adds op. It fails if the name is taken.
func (r *Registry) Register(op Op) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := op.Name()
	if name == "" || strings.ContainsAny(name, " ,:\t\n") {
		return fmt.Errorf("ops: register %q: a name is one word without ':' (reserved for braid's own messages)", name)
	}
	if _, dup := r.ops[name]; dup {
		return fmt.Errorf("ops: register %q: name taken", name)
	}
	r.ops[name] = op
	return nil
}

// Lookup returns the operation called name. The error for an unknown name
// lists the known ones and wraps ErrUnknownOp.
func (r *Registry) Lookup(name string) (Op, error) {
	r.mu.RLock()
	op, ok := r.ops[name]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("ops: unknown operation %q; known: %s: %w", name, strings.Join(r.Names(), ", "), ErrUnknownOp)
	}
	return op, nil
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.ops))
	for n := range r.ops {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Subset returns a new registry with only the named operations, e.g. for
// a worker that offers some of them.
func (r *Registry) Subset(names ...string) (*Registry, error) {
	sub := NewRegistry()
	for _, n := range names {
		op, err := r.Lookup(n)
		if err != nil {
			return nil, err
		}
		if err := sub.Register(op); err != nil {
			return nil, err
		}
	}
	return sub, nil
}
