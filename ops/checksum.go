package ops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
)

// Checksum returns the checksum operation, a two-level DAG. Chunk units
// hash their bytes block by block (SHA-256 of each block of "block"
// bytes); one reduce unit depends on every chunk and hashes the
// concatenated block digests. The output is that SHA-256 in hex and a
// newline: it depends on the block size, never on the number of units.
func Checksum() Op { return checksum{} }

// DefaultChunk is the chunk unit size checksum uses when the job does not
// ask for a number of units.
const DefaultChunk = 4 << 20

type checksum struct{}

// splitsItself: its units carry their step (chunk or reduce).
func (checksum) splitsItself() {}

func (checksum) Name() string { return "checksum" }
func (checksum) Info() Info {
	return Info{
		Doc:    "SHA-256 hash list of arbitrary bytes: chunks hashed in parallel, one reduce unit combines them",
		Params: []Param{{Name: "block", Default: "65536", Doc: "bytes per hashed block, 1 to 67108864; the output depends on it"}},
	}
}

func (checksum) block(params map[string]string) (int, error) {
	return intParam("checksum", params, "block", 64<<10, 1, 64<<20)
}

func (c checksum) Split(_ io.ReaderAt, size int64, params map[string]string, hint Hint) ([]UnitSpec, error) {
	if err := hint.check("checksum", false); err != nil {
		return nil, err
	}
	if err := checkParams("checksum", c.Info().Params, params); err != nil {
		return nil, err
	}
	block, err := c.block(params)
	if err != nil {
		return nil, err
	}
	n := int64(hint.Units)
	if n == 0 {
		// About DefaultChunk per unit, with chunks growing past 1024 units.
		n = min((size+DefaultChunk-1)/DefaultChunk, 1024)
	}
	if err := checkUnits("checksum", int(min(n, MaxUnits+1))+1, hint); err != nil {
		return nil, err
	}
	chunkParams := withParam(params, "step", "chunk")
	var specs []UnitSpec
	if size > 0 {
		specs = ranges(size, n, int64(block), chunkParams)
	}
	reduce := UnitSpec{Params: withParam(params, "step", "reduce"), Deps: make([]int, len(specs))}
	for i := range reduce.Deps {
		reduce.Deps[i] = i
	}
	return repeat(append(specs, reduce), hint.copies()), nil
}

func (c checksum) Run(ctx context.Context, params map[string]string, inputs [][]byte) ([]byte, error) {
	if len(inputs) == 0 {
		return nil, fmt.Errorf("checksum: no inputs: %w", ErrBadInput)
	}
	switch params["step"] {
	case "chunk":
		block, err := c.block(params)
		if err != nil {
			return nil, err
		}
		data := inputs[0]
		out := make([]byte, 0, (len(data)+block-1)/block*sha256.Size)
		for off := 0; off < len(data); off += block {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			sum := sha256.Sum256(data[off:min(off+block, len(data))])
			out = append(out, sum[:]...)
		}
		return out, nil
	case "reduce":
		h := sha256.New()
		for i, in := range inputs[1:] {
			if len(in)%sha256.Size != 0 {
				return nil, fmt.Errorf("checksum: reduce: input %d is %d bytes, not a list of SHA-256 digests: %w", i+1, len(in), ErrBadInput)
			}
			h.Write(in)
		}
		return []byte(hex.EncodeToString(h.Sum(nil)) + "\n"), nil
	default:
		return nil, fmt.Errorf("checksum: unit parameter step=%s: want chunk or reduce (units come from Split): %w",
			strconv.Quote(params["step"]), ErrBadParam)
	}
}

// Assemble returns the reduce unit's result, the last of each copy.
func (checksum) Assemble(_ map[string]string, hint Hint, results [][]byte) ([]byte, error) {
	results, err := firstCopy("checksum", results, hint)
	if err != nil {
		return nil, err
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("checksum: assemble: no results: %w", ErrBadInput)
	}
	return results[len(results)-1], nil
}

// ChecksumOf computes locally what the checksum operation outputs for
// data with the given block size.
func ChecksumOf(data []byte, block int) string {
	h := sha256.New()
	for off := 0; off < len(data); off += block {
		sum := sha256.Sum256(data[off:min(off+block, len(data))])
		h.Write(sum[:])
	}
	return hex.EncodeToString(h.Sum(nil)) + "\n"
}
