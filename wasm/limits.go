package wasm

import "fmt"

// The limits of a module's shape. wazero's optimizing compiler takes time
// that grows with the square of a function's basic blocks (its dominator
// and loop passes) and of its size, and a small module can make it work
// for minutes: 10,000 nested blocks, a br_table of 100,000 targets or
// 16,000 memory.fill in one function each take 4-60 s (docs/ops.md, "The
// sandbox", has the measurements). Validate (so `braid op add` and the server) and
// Compile (so every worker) refuse a module beyond these limits with
// ErrBadModule, before wazero sees it; they are far above what compilers
// emit (clang, Go, Rust, TinyGo).
const (
	// MaxCodeBytes bounds the code section, all function bodies.
	MaxCodeBytes = 64 << 20
	// MaxFunctions bounds the functions a module defines.
	MaxFunctions = 200_000
	// MaxFunctionBytes bounds one function body.
	MaxFunctionBytes = 512 << 10
	// MaxLocals bounds the locals of one function.
	MaxLocals = 50_000
	// MaxNesting bounds how deep blocks, loops and ifs nest.
	MaxNesting = 4096
	// MaxBrTable bounds the targets of one br_table.
	MaxBrTable = 65536
	// MaxGlobals bounds the globals a module defines (wazero keeps a
	// structure per global in every instance).
	MaxGlobals = 65536
	// MaxTables bounds the tables a module defines.
	MaxTables = 16
	// MaxBranchWeight bounds a function's branch weight: its blocks,
	// ifs, elses and conditional branches count 1, loops 3, bulk memory
	// and table instructions 5 (wazero lowers them to loops) and br_table
	// targets 1/4: about what they cost the compiler, whose time grows
	// with the square of this weight (about 1 s at the limit).
	MaxBranchWeight = 6000
	// MaxModuleWeight bounds the sum over functions of the square of
	// their branch weight, so that the whole module compiles in some
	// tens of seconds at worst.
	MaxModuleWeight = 32 * MaxBranchWeight * MaxBranchWeight
	// MaxModulePhis bounds the phis of all functions together, as frame
	// counts them (a local set inside a block, loop or if counts once
	// for each that had not seen it set since it opened). wazero's
	// compile time and memory grow faster than a function's phis, which
	// MaxFrame bounds per function (some 125,000), and a module of many
	// such functions compiled for minutes. It takes about 10 µs of CPU a
	// phi: 8 such functions 11 s and 380 MB, 33 (just under this limit)
	// 40 s and 580 MB. Real code has fewer phis a function and some 90,000
	// in all per MB of Go: an 8 MB Go program has 676,000 (at most 8,245
	// in a function) and compiles in 7 s and 160 MB, a 15 MB one 1.35
	// million in 10 s and 265 MB; the C and Rust examples a few thousand.
	// So the limit admits Go programs to some 45 MB, and a module of phi
	// nests at the limit costs a worker about what such a program does
	// (docs/benchmarks.md has the measurements).
	MaxModulePhis = 4 << 20
)

// The weights of MaxBranchWeight, in quarters.
const (
	weightBlock   = 4
	weightLoop    = 12
	weightBulk    = 20
	weightBrEntry = 1
)

// fnShape is what instructions measured of one function body.
type fnShape struct {
	depth, maxDepth int
	weight          uint64 // in quarters
}

// add counts an instruction of weight w quarters.
func (s *fnShape) add(w uint64) { s.weight += w }

// open counts a block, loop or if.
func (s *fnShape) open(w uint64) error {
	s.weight += w
	s.depth++
	s.maxDepth = max(s.maxDepth, s.depth)
	if s.depth > MaxNesting {
		return fmt.Errorf("blocks, loops and ifs nest more than %d deep", MaxNesting)
	}
	return nil
}

// check checks the function's branch weight against MaxBranchWeight and
// adds its square to total.
func (s *fnShape) check(total *uint64) error {
	w := s.weight / 4
	if w > MaxBranchWeight {
		return fmt.Errorf("has a branch weight of %d (blocks, branches and bulk instructions, which cost the compiler the square of their number); at most %d are allowed: split it into smaller functions", w, MaxBranchWeight)
	}
	*total += w * w
	return nil
}
