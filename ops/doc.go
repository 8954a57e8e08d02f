// Package ops holds the operations braid's workers run on stored data.
//
// An operation is used in three places. The server calls Split to cut a
// job's input into computation units, and later Assemble to turn the units'
// results into the job's output. A worker calls Run on each unit it gets.
// Units are self-describing: a unit carries its parameters and its own
// data, and may depend on earlier units, whose results become its further
// inputs (so a job is a DAG; checksum's reduce unit uses this).
//
//	          Split                    Run (workers)             Assemble
//	input ─────────────▶ unit 0 ──────────▶ result 0 ─┐
//	                     unit 1 ──────────▶ result 1 ─┼──────────▶ output
//	                     unit 2 (deps 0,1) ▶ result 2 ─┘
//
// Image operations (blur, grayscale, sharpen, edges) decode PNG, JPEG or
// GIF (first frame) and write PNG. Tiled, each unit carries its tile plus a
// halo as wide as the filter's reach, so the assembled output is
// pixel-identical to processing the whole image in one unit, whatever the
// tiling. Filters work on premultiplied RGBA bytes in integer arithmetic.
//
// Besides its own Split and Assemble, any operation, built in or a user's
// WebAssembly module, can be split and merged generically: SplitInput cuts
// an input by a Split (whole, bytes:SIZE, lines:SIZE or tiles:WxH+HALO),
// and Concat, AssembleTiles or a reduce unit merge the results by a Merge
// (concat, tiles or reduce:OP); Planned wraps an operation with both.
// Tiles travel in the format TileMagic describes.
//
// A server splits and assembles for many jobs at once, so operations that
// implement Streamer (the image operations and Planned ones) also split
// and assemble without holding a job's data: SplitStored decodes a PNG a
// band of rows at a time into a scratch file and writes the tiles to
// storage; AssembleStored reads the result tiles a band of rows at a time
// and writes the PNG row by row, byte for byte as image/png would. An
// image of MaxPixels then costs megabytes, not gigabytes. JPEG, GIF and
// interlaced PNG inputs are decoded whole, one at a time.
//
// Every operation honours Hint.Repeat: the whole job is processed that many
// times as independent units, and Assemble checks that all copies agree.
// Execute runs a job in-process, which is what `braid local` and the tests
// use.
package ops
