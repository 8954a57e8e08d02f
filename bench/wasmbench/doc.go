// Package wasmbench measures user operations (WebAssembly modules, package
// wasm) against braid's built-in operations, side by side in one run:
//
//   - BenchmarkBlurTile: the C port of the gaussian blur
//     (examples/ops/blur) run as a module against the built-in ops.Blur on
//     the same 256x256 tiles of a 2048x2048 image;
//   - BenchmarkRunCat: one Module.Run of the minimal module (cat) with no
//     input and with the 19 KB sample GIF: the per-unit cost of a fresh
//     instance;
//   - BenchmarkUnits: units per second of cat and of the built-in noop
//     through a server and one worker in this process on loopback;
//   - BenchmarkFirstUnit: the first unit of a never-seen 2.6 MB module (a
//     Go program built for wasip1) on a fresh worker, and the module's
//     compilation cold and with the on-disk compilation cache warm.
//
// The benchmarks build their modules themselves (clang for the C ones, the
// go tool for the Go one) into a temporary directory, and skip, saying
// what to install, when clang cannot build for wasm32-wasi. The figures
// are in docs/benchmarks.md, "User operations (WebAssembly)".
package wasmbench
