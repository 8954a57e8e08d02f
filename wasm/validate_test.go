package wasm

import (
	"errors"
	"strings"
	"testing"
)

type rejected struct {
	name string
	code []byte
	want string // in the error
}

// badModules lists code Validate and Compile must refuse.
func badModules(t testing.TB) []rejected {
	t.Helper()
	cat := wasmCode(t, "cat")
	return []rejected{
		{"empty", nil, "empty code"},
		{"garbage", []byte("#!/bin/sh\necho hello\n"), "not a WebAssembly binary"},
		{"component", []byte{0, 'a', 's', 'm', 0x0d, 0, 1, 0}, "not a core module"},
		{"truncated", cat[:len(cat)/2], "wasm: not a WASI preview 1 command module"},
		{"header only", wasmHeader, "no _start"},
		{"reactor", wasmCode(t, "reactor"), "no _start"},
		{"env import", wasmCode(t, "envimport"), "env.boom"},
		{"braid import", wasmCode(t, "tickimport"), "braid.tick"},
		{"imported memory", wasmCode(t, "importmem"), "memory env.memory"},
	}
}

func TestValidate(t *testing.T) {
	for _, name := range []string{"cat", "env", "loop", "open", "clock"} {
		if err := Validate(t.Context(), wasmCode(t, name)); err != nil {
			t.Errorf("Validate(%s): %v", name, err)
		}
	}
	for _, tc := range badModules(t) {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(t.Context(), tc.code)
			if !errors.Is(err, ErrBadModule) {
				t.Fatalf("got %v, want ErrBadModule", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestParseImports(t *testing.T) {
	imps, err := parseImports(wasmCode(t, "envimport"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, imp := range imps {
		if imp.module == "env" && imp.name == "boom" && imp.kind == kindFunc {
			found = true
		}
	}
	if !found {
		t.Fatalf("env.boom not among %v", imps)
	}
}

// FuzzParseImports checks that no input makes the import parser panic.
func FuzzParseImports(f *testing.F) {
	f.Add(wasmHeader)
	f.Add(append(wasmHeader[:8:8], 2, 7, 1, 3, 'e', 'n', 'v', 1, 'f', 0, 0))
	f.Add(append(wasmHeader[:8:8], 2, 9, 1, 1, 'e', 1, 'm', 2, 0x05, 1, 2, 3))
	f.Add(append(wasmHeader[:8:8], 2, 0xff, 0xff, 0xff, 0xff, 0x0f))
	f.Fuzz(func(t *testing.T, code []byte) {
		imps, err := parseImports(code)
		if err != nil && !errors.Is(err, ErrBadModule) {
			t.Fatalf("error %v does not wrap ErrBadModule", err)
		}
		if err == nil && len(imps) > len(code) {
			t.Fatalf("%d imports from %d bytes", len(imps), len(code))
		}
	})
}

func TestRunErrorString(t *testing.T) {
	for _, tc := range []struct {
		err  RunError
		want string
	}{
		{RunError{Op: "wordcount", Reason: ReasonExit, ExitCode: 3, Stderr: "bad line 7\n"}, `wordcount: exit code 3; stderr: "bad line 7"`},
		{RunError{Op: "sum", Reason: ReasonTimeout, Detail: "limit 2s"}, `sum: timed out after 2s`},
		{RunError{Op: "bomb", Reason: ReasonMemory, Detail: "limit 64 MiB", Stderr: "oom"}, `bomb: memory limit of 64 MiB reached; stderr: "oom"`},
		{RunError{Op: "big", Reason: ReasonMemory, Detail: "limit 32 MiB, needs 40 MiB at start"}, `big: memory limit of 32 MiB reached (needs 40 MiB at start)`},
		{RunError{Op: "flood", Reason: ReasonOutput, Detail: "limit 1 MiB"}, `flood: wrote more than 1 MiB to stdout (the unit output cap)`},
		{RunError{Op: "bad", Reason: ReasonTrap, Detail: "wasm error: unreachable"}, `bad: trap: wasm error: unreachable`},
		{RunError{Op: "op", Reason: ReasonCanceled, Detail: "context canceled"}, `op: canceled: context canceled`},
		{RunError{Op: "long", Reason: ReasonExit, ExitCode: 1, Stderr: strings.Repeat("é", 400) + "end"},
			`long: exit code 1; stderr: "...` + strings.Repeat("é", 254) + `end"`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		100:          "100 bytes",
		2048:         "2 KiB",
		1 << 20:      "1 MiB",
		3 << 19:      "1.5 MiB",
		256 << 20:    "256 MiB",
		MaxMemory:    "4 GiB",
		1<<20 + 1000: "1.0 MiB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"nothing", nil, ""},
		{"short", []string{"a", "b"}, "ab"},
		{"exactly", []string{strings.Repeat("x", tailSize)}, strings.Repeat("x", tailSize)},
		{"one big write", []string{strings.Repeat("x", 3*tailSize) + "end"}, strings.Repeat("x", tailSize-3) + "end"},
		{"many small", []string{strings.Repeat("y", 1000), strings.Repeat("z", 1000), strings.Repeat("w", 1000)},
			strings.Repeat("y", tailSize-2000) + strings.Repeat("z", 1000) + strings.Repeat("w", 1000)},
		{"cut rune", []string{"é" + strings.Repeat("a", tailSize-1)}, strings.Repeat("a", tailSize-1)},
		{"invalid", []string{"a\xffb"}, "a\uFFFDb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tl tail
			for _, w := range tc.writes {
				if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write: %d, %v", n, err)
				}
			}
			if got := tl.String(); got != tc.want {
				t.Fatalf("got %q (%d bytes), want %q (%d bytes)", got, len(got), tc.want, len(tc.want))
			}
			if cap(tl.buf) > 2*tailSize {
				t.Fatalf("buffer grew to %d bytes", cap(tl.buf))
			}
		})
	}
}

func TestOutput(t *testing.T) {
	canceled := 0
	o := output{limit: 1000, cancel: func() { canceled++ }}
	if n, err := o.Write(make([]byte, 600)); n != 600 || err != nil {
		t.Fatalf("Write 600: %d, %v", n, err)
	}
	if cap(o.buf) > 1000 {
		t.Fatalf("reserved %d bytes past the limit", cap(o.buf))
	}
	if n, err := o.Write(make([]byte, 600)); n != 400 || !errors.Is(err, errOutputCap) || !o.over {
		t.Fatalf("Write past the limit: %d, %v, over %v", n, err, o.over)
	}
	if n, err := o.Write([]byte("x")); n != 0 || err == nil {
		t.Fatalf("Write when over: %d, %v", n, err)
	}
	if len(o.buf) != 1000 || canceled != 1 {
		t.Fatalf("kept %d bytes, canceled %d times", len(o.buf), canceled)
	}
}

func TestLinearMemory(t *testing.T) {
	var m linearMemory
	m.reset(4 * pageSize)
	lm := m.Allocate(pageSize, 1<<32)
	b := lm.Reallocate(pageSize)
	if len(b) != pageSize {
		t.Fatalf("len %d", len(b))
	}
	b[0] = 1
	b = lm.Reallocate(3 * pageSize)
	if len(b) != 3*pageSize || b[0] != 1 {
		t.Fatalf("grow lost the content or size: len %d", len(b))
	}
	if lm.Reallocate(5*pageSize) != nil || !m.refused {
		t.Fatal("grew past the limit")
	}
	b[pageSize] = 2
	m.recycle()
	m.reset(8 * pageSize)
	b = m.Allocate(pageSize, 2*pageSize).Reallocate(2 * pageSize)
	if b[0] != 0 || b[pageSize] != 0 || m.refused {
		t.Fatal("recycled memory is not zero")
	}
	if m.Reallocate(3*pageSize) != nil {
		t.Fatal("grew past the module's own maximum")
	}
}
