package ops

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"
)

// Merge says how the results of a job's units become its output, for any
// operation: built-in or a user's WebAssembly module. The zero Merge means
// "the operation's own way" (its Op.Assemble).
type Merge struct {
	// Kind is MergeConcat, MergeTiles or MergeReduce; "" is the zero
	// Merge.
	Kind string
	// Op is the name of the operation whose unit reduces the results,
	// for MergeReduce; "" for the other kinds.
	Op string
}

// The kinds of Merge.
const (
	// MergeConcat joins the results in unit order (see Concat).
	MergeConcat = "concat"
	// MergeTiles places result tiles into one PNG image (see
	// AssembleTiles).
	MergeTiles = "tiles"
	// MergeReduce runs the operation Merge.Op on the results: one more
	// unit whose input is all of them, or, for more than ReduceFanIn
	// results, a tree of such units (see ReduceFanIn). The root's
	// result is the output.
	MergeReduce = "reduce"
	// MergeNone keeps the results of each member of a dataset apart,
	// concatenated per member: the output is a dataset of the same
	// names. Only a job over a dataset takes it.
	MergeNone = "none"
)

// mergeForms lists the forms ParseMerge takes, for error messages.
const mergeForms = "want concat, tiles, none or reduce:OP, as in reduce:sum"

// ParseMerge parses "concat", "tiles" or "reduce:OP", where OP is an
// operation's name: one word without spaces, commas or colons. The kind
// may be in any case; OP is kept as given. The empty string is an error:
// a caller with no merge to give uses the zero Merge. Errors wrap
// ErrBadParam and show the right form.
func ParseMerge(s string) (Merge, error) {
	kind, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
	kind = strings.ToLower(kind)
	bad := func(format string, args ...any) (Merge, error) {
		return Merge{}, fmt.Errorf("ops: merge %q: %s: %w", s, fmt.Sprintf(format, args...), ErrBadParam)
	}
	switch kind {
	case MergeConcat, MergeTiles, MergeNone:
		if hasArg {
			return bad("%s takes no argument; write %s", kind, kind)
		}
		return Merge{Kind: kind}, nil
	case MergeReduce:
		switch {
		case arg == "":
			return bad("reduce needs the name of the operation that reduces the results, as in reduce:sum")
		case strings.ContainsFunc(arg, func(r rune) bool { return r == ',' || r == ':' || unicode.IsSpace(r) }):
			return bad("operation name %q: want one word without spaces, commas or colons, as in reduce:sum", arg)
		}
		return Merge{Kind: MergeReduce, Op: arg}, nil
	case "":
		return bad("empty; %s", mergeForms)
	}
	return bad("unknown kind %q; %s", kind, mergeForms)
}

// String returns m in the canonical form ParseMerge takes, as in "concat"
// or "reduce:sum"; the zero Merge gives "".
func (m Merge) String() string {
	if m.Kind == MergeReduce {
		return m.Kind + ":" + m.Op
	}
	return m.Kind
}

// IsZero reports whether m is the zero Merge, which leaves the merging
// to the operation.
func (m Merge) IsZero() bool { return m == Merge{} }

// Concat joins results in order into one new slice, allocated once at
// its exact size: the output of MergeConcat.
func Concat(results [][]byte) []byte {
	n := 0
	for _, r := range results {
		n += len(r)
	}
	out := make([]byte, 0, n)
	for _, r := range results {
		out = append(out, r...)
	}
	return out
}

// AssembleTiles is the output of MergeTiles for the operation op (named in
// errors): it decodes each result as an encoded tile (see TileMagic),
// crops it to its core, places the cores into one image and encodes it as
// PNG. A unit may return the tile it got, halo included, or just its
// core; either way only the core's pixels are used. Every tile must name
// the same image size and the cores must cover the image exactly once.
// Errors name the result by its index and wrap ErrBadInput. Besides the
// results, it holds a band of rows, a bit per pixel and the PNG.
func AssembleTiles(op string, results [][]byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := assembleTilesTo(op, "merge tiles", MemResults(results), true, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
