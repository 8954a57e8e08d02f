package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/wasmtest"
)

// TestOpRunStopsWhileCompiling: braid op run ends at once when
// interrupted (SIGINT and SIGTERM cancel its ctx, cmd/braid) even while
// wazero compiles a module that takes seconds: 30 functions of 4,000
// nested blocks, within the compile limits.
func TestOpRunStopsWhileCompiling(t *testing.T) {
	m := wasmtest.Module{MemPages: 1}
	for range 30 {
		m.Funcs = append(m.Funcs, append(wasmtest.Repeat([]byte{0x02, 0x40}, 4000), wasmtest.Repeat([]byte{0x0b}, 4000)...))
	}
	path := filepath.Join(t.TempDir(), "slow.wasm")
	if err := os.WriteFile(path, m.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	var out, errb syncBuffer
	start := time.Now()
	code := Run(ctx, []string{"op", "run", path, "--in", path}, &out, &errb)
	// A generous bound, to catch a wait for the whole compilation (some
	// 15 s here), not a measurement.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("op run took %v after its ctx ended at 300ms", d)
	}
	if code == 0 {
		t.Fatalf("op run exited 0 when interrupted; stderr: %s", errb.String())
	}
}
