// Package wasmtest builds small WebAssembly command modules for tests:
// from C with clang and Debian's wasi-libc, and from Go with the go
// command that runs the tests (GOOS=wasip1).
package wasmtest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/braid-hpc/braid/internal/testenv"
)

var (
	mu    sync.Mutex
	dir   string
	built = map[string][]byte{}
)

// Require skips t when clang cannot build WebAssembly here, unless
// BRAID_REQUIRE_WASM=1 (CI), which makes it fail instead.
func Require(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("clang"); err != nil {
		missing(t, "clang is not installed (apt-get install -y clang lld wasi-libc libclang-rt-dev-wasm32)")
	}
}

func missing(t testing.TB, why string) {
	t.Helper()
	testenv.Missing(t, "BRAID_REQUIRE_WASM", why)
}

// C compiles the C program src into a wasm32-wasi command module and
// returns its bytes; the same source is built once per process.
func C(t testing.TB, src string) []byte {
	t.Helper()
	Require(t)
	sum := sha256.Sum256([]byte(src))
	return build(t, hex.EncodeToString(sum[:8]), func(dir, key string) string {
		in := filepath.Join(dir, key+".c")
		out := filepath.Join(dir, key+".wasm")
		if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("clang", "--target=wasm32-wasi", "-O2", "-o", out, in)
		if b, err := cmd.CombinedOutput(); err != nil {
			missing(t, "clang cannot build WebAssembly here: "+err.Error()+": "+string(b))
		}
		return out
	})
}

// Go compiles the Go program src (package main, standard library only)
// with GOOS=wasip1 GOARCH=wasm and returns the module's bytes; the same
// source is built once per process. The toolchain is go test's own, so
// it is always there: a failed build fails the test.
func Go(t testing.TB, src string) []byte {
	t.Helper()
	sum := sha256.Sum256([]byte(src))
	return build(t, "go-"+hex.EncodeToString(sum[:8]), func(dir, key string) string {
		pkgDir := filepath.Join(dir, key)
		if err := os.MkdirAll(pkgDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range map[string]string{"main.go": src, "go.mod": "module " + key + "\n\ngo 1.21\n"} {
			if err := os.WriteFile(filepath.Join(pkgDir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out := pkgDir + ".wasm"
		// runtime.GOROOT is deprecated for finding a toolchain at run
		// time, but a test binary runs where it was built: it names go
		// test's own.
		goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goCmd); err != nil {
			goCmd = "go"
		}
		cmd := exec.Command(goCmd, "build", "-o", out, ".")
		cmd.Dir = pkgDir
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=-mod=mod", "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("GOOS=wasip1 GOARCH=wasm go build: %v\n%s", err, b)
		}
		return out
	})
}

// build returns the module built under key, building it once per
// process: compile writes its sources in dir (shared by every build, made
// on first use) and returns the path of the module it built.
func build(t testing.TB, key string, compile func(dir, key string) string) []byte {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[key]; ok {
		return b
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "braid-wasmtest-")
		if err != nil {
			t.Fatal(err)
		}
		dir = d
	}
	b, err := os.ReadFile(compile(dir, key))
	if err != nil {
		t.Fatal(err)
	}
	built[key] = b
	return b
}

// Cat copies stdin to stdout.
const Cat = `#include <stdio.h>
int main(void) {
	static char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) fwrite(buf, 1, n, stdout);
	return 0;
}
`

// Lines writes the number of lines of stdin, in decimal and a newline.
const Lines = `#include <stdio.h>
int main(void) {
	long n = 0; int c;
	while ((c = getchar()) != EOF) if (c == '\n') n++;
	printf("%ld\n", n);
	return 0;
}
`

// Sum adds the whole numbers on stdin, one a line, and writes the sum;
// a bad line fails with exit code 2.
const Sum = `#include <stdio.h>
int main(void) {
	long sum = 0, v; int line = 0;
	char buf[256];
	while (fgets(buf, sizeof buf, stdin)) {
		line++;
		if (sscanf(buf, "%ld", &v) != 1) { fprintf(stderr, "line %d is not a number", line); return 2; }
		sum += v;
	}
	printf("%ld\n", sum);
	return 0;
}
`

// Upper copies stdin to stdout in upper case; with PREFIX set, it
// writes it first.
const Upper = `#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
int main(void) {
	const char *p = getenv("PREFIX");
	if (p) fputs(p, stdout);
	int c;
	while ((c = getchar()) != EOF) putchar(toupper(c));
	return 0;
}
`

// Files writes, for each name in BRAID_INPUTS (one a line, the files
// of a fan-in or a dataset member in /in), "NAME: N bytes" from its
// file in /in, then the bytes of stdin.
const Files = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
	const char *env = getenv("BRAID_INPUTS");
	char names[4096] = "";
	if (env) strncpy(names, env, sizeof names - 1);
	for (char *n = strtok(names, "\n"); n; n = strtok(NULL, "\n")) {
		char path[512]; snprintf(path, sizeof path, "/in/%s", n);
		FILE *f = fopen(path, "r");
		if (!f) { printf("%s: cannot open\n", n); continue; }
		long k = 0; while (getc(f) != EOF) k++;
		fclose(f);
		printf("%s: %ld bytes\n", n, k);
	}
	int c; while ((c = getchar()) != EOF) putchar(c);
	return 0;
}
`

// Fail writes a message to stderr and exits with code 3.
const Fail = `#include <stdio.h>
int main(void) { fprintf(stderr, "cannot parse record 7"); return 3; }
`

// Trap traps.
const Trap = `int main(void) { __builtin_trap(); }
`

// Loop never ends.
const Loop = `int main(void) { volatile int x = 0; for (;;) x++; }
`

// Bomb allocates memory until it is refused, then aborts.
const Bomb = `#include <stdlib.h>
#include <string.h>
char *volatile sink; /* keeps the compiler from eliding the allocations */
int main(void) { for (;;) { char *p = malloc(1 << 20); if (!p) abort(); memset(p, 1, 1 << 20); sink = p; } }
`

// Flood writes to stdout forever.
const Flood = `#include <stdio.h>
int main(void) { static char buf[65536]; for (;;) fwrite(buf, 1, sizeof buf, stdout); }
`
