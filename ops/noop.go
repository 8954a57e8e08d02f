package ops

import (
	"bytes"
	"context"
	"fmt"
	"io"
)

// Noop returns the noop operation: each unit returns its data unchanged
// and the output equals the input. It measures transport throughput.
func Noop() Op { return noop{} }

type noop struct{}

func (noop) Name() string { return "noop" }
func (noop) Info() Info {
	return Info{Doc: "returns the input unchanged (Hint.Units cuts it into byte ranges); for throughput tests"}
}

func (noop) Split(_ io.ReaderAt, size int64, params map[string]string, hint Hint) ([]UnitSpec, error) {
	if err := hint.check("noop", false); err != nil {
		return nil, err
	}
	if err := checkParams("noop", nil, params); err != nil {
		return nil, err
	}
	if err := checkUnits("noop", max(hint.Units, 1), hint); err != nil {
		return nil, err
	}
	return repeat(ranges(size, int64(hint.Units), 1, params), hint.copies()), nil
}

func (noop) Run(_ context.Context, _ map[string]string, inputs [][]byte) ([]byte, error) {
	if len(inputs) != 1 {
		return nil, fmt.Errorf("noop: want 1 input, got %d: %w", len(inputs), ErrBadInput)
	}
	return inputs[0], nil
}

func (noop) Assemble(_ map[string]string, hint Hint, results [][]byte) ([]byte, error) {
	results, err := firstCopy("noop", results, hint)
	if err != nil {
		return nil, err
	}
	return bytes.Join(results, nil), nil
}

// ranges cuts [0, size) into at most n consecutive input ranges whose
// lengths are multiples of align (but the last); n < 1 means one range.
// An empty input gives one empty range.
func ranges(size, n, align int64, params map[string]string) []UnitSpec {
	n = max(n, 1)
	blocks := (size + align - 1) / align
	per := max((blocks+n-1)/n, 1) * align
	var specs []UnitSpec
	for off := int64(0); off < size || len(specs) == 0; off += per {
		specs = append(specs, UnitSpec{Params: params, FromInput: true, Off: off, Len: min(per, size-off)})
	}
	return specs
}
