#!/usr/bin/env bash
# Builds the example operations into WebAssembly modules:
#
#   examples/ops/build.sh [OUTDIR]      # default examples/ops/out
#
# The Go ones need Go 1.21 or later (GOOS=wasip1); the C ones need clang
# with the wasm32-wasi target, wasi-libc and the wasm32 compiler runtime;
# the Rust one rustc with the wasm32-wasi standard library (Debian: rustc
# libstd-rust-dev-wasm32; rustup: rustup target add wasm32-wasip1).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if ! command -v go >/dev/null; then
	echo "build.sh: go not found; install Go 1.21 or later (https://go.dev/dl/)" >&2
	exit 1
fi
for name in wordcount sumcounts; do
	(cd "$here" && GOOS=wasip1 GOARCH=wasm go build -trimpath -o "$out/$name.wasm" "./$name")
	echo "$out/$name.wasm"
done

# One probe finds whatever part of the C toolchain is missing: clang, the
# wasm32-wasi target, wasi-libc's headers and libc, the linker (wasm-ld),
# the compiler runtime.
missing="the C examples need clang for wasm32-wasi; on Debian or Ubuntu: apt-get install -y clang lld wasi-libc libclang-rt-dev-wasm32"
if ! command -v clang >/dev/null; then
	echo "build.sh: clang not found; $missing" >&2
	exit 1
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <math.h>\n#include <stdio.h>\nint main(void) { printf("%%g\\n", exp(1.0)); return 0; }\n' >"$probe/probe.c"
if ! clang --target=wasm32-wasi -O2 -o "$probe/probe.wasm" "$probe/probe.c" -lm 2>"$probe/err"; then
	cat "$probe/err" >&2
	echo "build.sh: clang cannot build for wasm32-wasi (see above); $missing" >&2
	exit 1
fi

# -O3 -msimd128: WebAssembly SIMD (which wazero runs): vectorized loops,
# and blur.c's explicit SIMD path (wasm_simd128.h), without which it runs
# its plain C loops. No relaxed SIMD: package wasm refuses those opcodes.
# -ffp-contract=off: no fused
# multiply-adds, so blur's kernel is computed exactly as braid's built-in
# blur computes it.
cflags=(--target=wasm32-wasi -O3 -msimd128 -Wall -Wextra -ffp-contract=off -Wl,--strip-debug)
for name in cat boxblur blur; do
	clang "${cflags[@]}" -o "$out/$name.wasm" "$here/$name/$name.c" -lm
	echo "$out/$name.wasm"
done

# Rust: one file, no cargo and no crates. The first rustc (RUSTC, the one
# on PATH, Debian's, which a rustup installation on PATH may hide) that
# builds for WASI preview 1, by its new name (Rust 1.78 on) or its old
# one (until 1.84).
printf 'fn main() {}\n' >"$probe/probe.rs"
rustc=
for c in ${RUSTC:-} $(command -v rustc || true) /usr/bin/rustc; do
	[ -x "$c" ] || continue
	for t in wasm32-wasip1 wasm32-wasi; do
		if "$c" --target "$t" -o "$probe/probe-rs.wasm" "$probe/probe.rs" 2>/dev/null; then
			rustc=$c target=$t
			break 2
		fi
	done
done
if [ -z "$rustc" ]; then
	echo "build.sh: no rustc that builds for WASI; the Rust example needs apt-get install -y rustc libstd-rust-dev-wasm32 (or rustup target add wasm32-wasip1)" >&2
	exit 1
fi
for name in bytehist; do
	"$rustc" --target "$target" --edition 2021 -C opt-level=3 -C strip=debuginfo -o "$out/$name.wasm" "$here/$name/main.rs"
	echo "$out/$name.wasm"
done
