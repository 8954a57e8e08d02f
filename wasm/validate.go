package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// wasiModule is the only import module a command may use.
const wasiModule = wasi_snapshot_preview1.ModuleName

// Validate checks that code is a WASI preview 1 command module without
// running it: a valid binary that exports "_start" and a memory and imports
// nothing but functions of "wasi_snapshot_preview1" that exist there with
// the same signature. The error wraps ErrBadModule and names the first
// offending import (module.field) or the missing export.
//
// Validate compiles with wazero's interpreter, which only decodes and checks
// the code; nothing stays open afterwards.
func Validate(ctx context.Context, code []byte) error {
	if len(code) == 0 {
		return fmt.Errorf("%w: empty code", ErrBadModule)
	}
	// Reject before the interpreter decodes a module we would refuse anyway.
	if _, err := parseImports(code); err != nil {
		return err
	}
	// The compile limits (limits.go), which the rewrite checks.
	if _, _, err := instrument(code); err != nil {
		return err
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(context.WithoutCancel(ctx))
	cm, err := rt.CompileModule(ctx, code)
	if err != nil {
		return badModule(err)
	}
	defer cm.Close(context.WithoutCancel(ctx))
	_, err = checkCommand(cm, code)
	return err
}

// badModule wraps a wazero decode or validation error in ErrBadModule.
func badModule(err error) error {
	return fmt.Errorf("%w: %v", ErrBadModule, err)
}

// checkCommand checks what the compiled module imports and exports and
// returns the minimum size of its memory in bytes.
func checkCommand(cm wazero.CompiledModule, code []byte) (memMin uint64, err error) {
	imps, err := parseImports(code)
	if err != nil {
		return 0, err
	}
	for _, imp := range imps {
		if imp.module != wasiModule || imp.kind != kindFunc {
			return 0, fmt.Errorf("%w: imports %s %s.%s; only functions of %s are provided (build without imports from other modules)",
				ErrBadModule, imp.kind, imp.module, imp.name, wasiModule)
		}
	}
	want, err := wasiSigs()
	if err != nil {
		return 0, err
	}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod == tickModule && name == tickName {
			continue // added by instrument; code itself imports only WASI
		}
		sig, ok := want[name]
		if mod != wasiModule || !ok {
			return 0, fmt.Errorf("%w: imports function %s.%s, which %s does not have", ErrBadModule, mod, name, wasiModule)
		}
		if got := signatureOf(f); got != sig {
			return 0, fmt.Errorf("%w: imports function %s.%s with signature %s, want %s", ErrBadModule, mod, name, got, sig)
		}
	}
	start, ok := cm.ExportedFunctions()["_start"]
	if !ok {
		return 0, fmt.Errorf("%w: no _start export (a reactor or library module? build it as a command, e.g. without -mexec-model=reactor)", ErrBadModule)
	}
	if len(start.ParamTypes()) != 0 || len(start.ResultTypes()) != 0 {
		return 0, fmt.Errorf("%w: _start has signature %s, want func()", ErrBadModule, signatureOf(start))
	}
	mems := cm.ExportedMemories()
	if len(mems) == 0 {
		return 0, fmt.Errorf("%w: no exported memory", ErrBadModule)
	}
	for _, m := range mems {
		memMin = uint64(m.Min()) * pageSize
	}
	return memMin, nil
}

// pageSize is the size of a WebAssembly memory page.
const pageSize = 64 << 10

// wasiSigs maps each function of wasi_snapshot_preview1 to its signature.
var wasiSigs = sync.OnceValues(func() (map[string]string, error) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	cm, err := wasi_snapshot_preview1.NewBuilder(rt).Compile(ctx)
	if err != nil {
		return nil, fmt.Errorf("wasm: compile %s host module: %w", wasiModule, err)
	}
	defer cm.Close(ctx)
	sigs := make(map[string]string)
	for name, f := range cm.ExportedFunctions() {
		sigs[name] = signatureOf(f)
	}
	return sigs, nil
})

// signatureOf formats a function type, e.g. "func(i32, i64) i32".
func signatureOf(f api.FunctionDefinition) string {
	var b strings.Builder
	b.WriteString("func(")
	for i, t := range f.ParamTypes() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(api.ValueTypeName(t))
	}
	b.WriteString(")")
	if rs := f.ResultTypes(); len(rs) > 0 {
		names := make([]string, len(rs))
		for i, t := range rs {
			names[i] = api.ValueTypeName(t)
		}
		b.WriteString(" ")
		if len(rs) > 1 {
			b.WriteString("(" + strings.Join(names, ", ") + ")")
		} else {
			b.WriteString(names[0])
		}
	}
	return b.String()
}

// importKind is the kind of an import in the binary format.
type importKind byte

const (
	kindFunc   importKind = 0
	kindTable  importKind = 1
	kindMemory importKind = 2
	kindGlobal importKind = 3
	kindTag    importKind = 4
)

func (k importKind) String() string {
	switch k {
	case kindFunc:
		return "function"
	case kindTable:
		return "table"
	case kindMemory:
		return "memory"
	case kindGlobal:
		return "global"
	case kindTag:
		return "tag"
	}
	return fmt.Sprintf("kind %d", byte(k))
}

// wasmImport is one entry of the import section.
type wasmImport struct {
	module, name string
	kind         importKind
	typeIdx      uint32 // of a function import
}

// wasmHeader starts every core module: "\0asm" and version 1.
var wasmHeader = []byte{0, 'a', 's', 'm', 1, 0, 0, 0}

// errTruncated reports a binary that ends inside a section.
var errTruncated = errors.New("truncated")

// parseImports returns the import section of a core module. It reads only
// the section headers and the import section: wazero validates the rest.
func parseImports(code []byte) ([]wasmImport, error) {
	if !bytes.HasPrefix(code, wasmHeader) {
		if len(code) >= 8 && bytes.HasPrefix(code, wasmHeader[:4]) {
			return nil, fmt.Errorf("%w: binary version %x is not a core module version 1 (a component? build for wasm32-wasi preview 1)", ErrBadModule, code[4:8])
		}
		return nil, fmt.Errorf("%w: not a WebAssembly binary (no \\0asm header)", ErrBadModule)
	}
	r := reader{b: code[len(wasmHeader):]}
	for len(r.b) > 0 {
		id := r.byte()
		size := r.u32()
		payload := r.bytes(int(size))
		if r.err != nil {
			return nil, fmt.Errorf("%w: section %d: %v", ErrBadModule, id, r.err)
		}
		if id != 2 {
			continue
		}
		imps, err := parseImportSection(payload)
		if err != nil {
			return nil, fmt.Errorf("%w: import section: %v", ErrBadModule, err)
		}
		return imps, nil
	}
	return nil, nil
}

func parseImportSection(b []byte) ([]wasmImport, error) {
	r := reader{b: b}
	n := r.u32()
	if r.err == nil && uint64(n) > uint64(len(b)) {
		return nil, fmt.Errorf("%d imports in %d bytes", n, len(b))
	}
	imps := make([]wasmImport, 0, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		imp := wasmImport{module: r.name(), name: r.name(), kind: importKind(r.byte())}
		switch imp.kind {
		case kindFunc:
			imp.typeIdx = r.u32()
		case kindTable:
			r.valType() // reference type
			r.limits()
		case kindMemory:
			r.limits()
		case kindGlobal:
			r.valType()
			r.byte() // mutability
		case kindTag:
			r.byte() // attribute
			r.u32()  // type index
		default:
			return nil, fmt.Errorf("import %s.%s: unknown kind %d", imp.module, imp.name, imp.kind)
		}
		imps = append(imps, imp)
	}
	if r.err != nil {
		return nil, r.err
	}
	return slices.Clip(imps), nil
}

// reader decodes the binary format; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = errTruncated
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = errTruncated
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

// uleb reads an unsigned LEB128 number of at most bits bits.
func (r *reader) uleb(bits uint) uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if shift >= bits {
			r.err = errors.New("integer too long")
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) u32() uint32 { return uint32(r.uleb(32)) }

func (r *reader) name() string {
	n := r.u32()
	return string(r.bytes(int(n)))
}

// valType skips a value type, including the typed references of the
// function-references proposal (0x63 and 0x64 followed by a heap type).
func (r *reader) valType() {
	if c := r.byte(); c == 0x63 || c == 0x64 {
		r.uleb(33) // s33 heap type; its sign does not matter for skipping
	}
}

// limits skips the limits of a table or memory type.
func (r *reader) limits() {
	flags := r.byte()
	bits := uint(32)
	if flags&0x04 != 0 { // memory64 or table64
		bits = 64
	}
	r.uleb(bits)
	if flags&0x01 != 0 {
		r.uleb(bits)
	}
	if flags&0x08 != 0 { // custom page size
		r.u32()
	}
}
