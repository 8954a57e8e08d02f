package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/wasmtest"
)

// nested returns _start with d blocks (or loops) nested in each other.
func nested(op byte, d int) []byte {
	b := wasmtest.Repeat([]byte{op, 0x40}, d)
	return append(b, wasmtest.Repeat([]byte{0x0b}, d)...)
}

// brTable returns _start with one br_table of n targets.
func brTable(n int) []byte {
	b := []byte{0x02, 0x40, 0x20, 0x00, 0x0e}
	b = binary.AppendUvarint(b, uint64(n))
	b = append(b, wasmtest.Repeat([]byte{0}, n+1)...)
	return append(b, 0x0b)
}

// overLimits are small modules that would make wazero's compiler work for
// seconds to minutes (limits.go), each with what its refusal names.
func overLimits() []struct {
	name string
	code []byte
	want string
} {
	fill := wasmtest.I32(wasmtest.I32(wasmtest.I32(nil, 0), 0), 1)
	fill = append(fill, wasmtest.MemoryFill...)
	manyFuncs := make([][]byte, MaxFunctions)
	// 33 functions at the limit of MaxBranchWeight: 4,000 nested blocks
	// and 2,000 more.
	heavy := wasmtest.Module{MemPages: 1}
	for range 33 {
		heavy.Funcs = append(heavy.Funcs, append(nested(0x02, 4000), nested(0x02, 2000)...))
	}
	return []struct {
		name string
		code []byte
		want string
	}{
		{"nested blocks", wasmtest.Module{MemPages: 1, Start: nested(0x02, 20000)}.Bytes(), "nest more than 4096 deep"},
		{"nested loops", wasmtest.Module{MemPages: 1, Start: nested(0x03, 3000)}.Bytes(), "branch weight of 9000"},
		{"br_table", wasmtest.Module{MemPages: 1, Locals: 1, Start: brTable(70000)}.Bytes(), "br_table with 70000 targets"},
		{"br_tables", wasmtest.Module{MemPages: 1, Locals: 1, Start: wasmtest.Repeat(brTable(30000), 2)}.Bytes(), "branch weight of 15004"},
		{"fills", wasmtest.Module{MemPages: 1, Start: wasmtest.Repeat(fill, 2000)}.Bytes(), "branch weight of 10000"},
		{"function size", wasmtest.Module{MemPages: 1, Locals: 1, Start: wasmtest.Repeat([]byte{0x20, 0, 0x1a}, 200000)}.Bytes(), "600004 bytes; at most 524288"},
		{"locals", wasmtest.Module{MemPages: 1, Locals: 100000}.Bytes(), "100000 locals"},
		{"functions", wasmtest.Module{MemPages: 1, Funcs: manyFuncs}.Bytes(), "200001 functions"},
		{"module weight", heavy.Bytes(), "too long to compile"},
		{"module phis", wasmtest.PhiNests(34), "4250000 phis"},
		{"globals", wasmtest.Module{MemPages: 1, Globals: 70000}.Bytes(), "70000 globals"},
		{"tables", wasmtest.Module{MemPages: 1, Tables: make([]uint32, 17)}.Bytes(), "17 tables"},
	}
}

// TestValidateLimits: Validate (braid op add, the server) refuses, in
// moments, modules that wazero would take seconds to minutes to compile,
// naming the limit; so does Compile, before wazero sees them.
func TestValidateLimits(t *testing.T) {
	e := newEngine(t, Config{})
	for _, tc := range overLimits() {
		t.Run(tc.name, func(t *testing.T) {
			within(t, 5*time.Second, func(ctx context.Context) {
				err := Validate(ctx, tc.code)
				if !errors.Is(err, ErrBadModule) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Validate: %v, want ErrBadModule naming %q", err, tc.want)
				}
				_, err = e.Compile(ctx, tc.code)
				if !errors.Is(err, ErrBadModule) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Compile: %v, want ErrBadModule naming %q", err, tc.want)
				}
			})
		})
	}
	// Just within the limits is fine.
	ok := wasmtest.Module{MemPages: 1, Start: nested(0x02, 1000), Funcs: [][]byte{brTable(20000)}, Locals: 1}.Bytes()
	if err := Validate(t.Context(), ok); err != nil {
		t.Fatalf("a module within the limits: %v", err)
	}
	if err := Validate(t.Context(), wasmtest.PhiNests(33)); err != nil {
		t.Fatalf("33 phi nests, 4,125,000 phis: %v", err)
	}
}

// bigGo is a Go program of 8 MB (GOOS=wasip1; 5,300 functions, 676,000
// phis in all, at most 8,245 in one): the largest real module the
// limits were measured against.
const bigGo = `package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"text/template"
)

func main() {
	var v any
	json.NewDecoder(os.Stdin).Decode(&v)
	fmt.Println(v, regexp.MustCompile("a+").String(), http.StatusOK)
	template.Must(template.New("x").Parse("{{.}}")).Execute(os.Stdout, v)
}
`

// TestBigGoProgramWithinLimits: a large real program passes every
// compile limit (Validate runs the same checks as Compile; the example
// operations' tests compile theirs).
func TestBigGoProgramWithinLimits(t *testing.T) {
	if err := Validate(t.Context(), wasmtest.Go(t, bigGo)); err != nil {
		t.Fatalf("an 8 MB Go program: %v", err)
	}
}

// slowModule compiles in some seconds within the limits: n functions of
// 4,000 nested blocks each.
func slowModule(n int) []byte {
	m := wasmtest.Module{MemPages: 1}
	for range n {
		m.Funcs = append(m.Funcs, nested(0x02, 4000))
	}
	return m.Bytes()
}

// TestCompileTimeout: a compilation past Config.CompileTimeout stops, at
// the next function, and the module is refused with ErrCompileTimeout; a
// caller whose ctx ends gets its answer at once, and Close does not wait
// for a whole compilation.
func TestCompileTimeout(t *testing.T) {
	code := slowModule(30)
	e := newEngine(t, Config{CompileTimeout: 300 * time.Millisecond})
	within(t, 10*time.Second, func(ctx context.Context) {
		_, err := e.Compile(ctx, code)
		if !errors.Is(err, ErrCompileTimeout) {
			t.Fatalf("got %v, want ErrCompileTimeout", err)
		}
	})

	e2, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if _, err := e2.Compile(ctx, code); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the caller's deadline", err)
		}
		if err := e2.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
