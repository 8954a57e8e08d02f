package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Error is the body of every 4xx and 5xx answer. Message says what went
// wrong and, where the caller can fix it, how.
type Error struct {
	Message string `json:"error"`
}

// Error implements error so a client can return the decoded body as is.
func (e *Error) Error() string { return e.Message }

// Health is the answer to GET /v1/health.
type Health struct {
	// Status is "ok" while the server accepts work.
	Status string `json:"status"`
	// Workers is the number of live workers.
	Workers int `json:"workers"`
}

// OpInfo describes one operation for GET /v1/ops and for help texts.
type OpInfo struct {
	Name string `json:"name"`
	// Kind is OpBuiltin for an operation compiled into braid, OpModule
	// for one a user uploaded as a WebAssembly module.
	Kind string `json:"kind"`
	// Doc is a one-line description.
	Doc string `json:"doc"`
	// Tiles is true if the operation accepts a tile size.
	Tiles  bool        `json:"tiles"`
	Params []ParamInfo `json:"params,omitempty"`
	// Hash, Size, Version and Added describe a module: its sha256 (the
	// ID of the blob that holds it), its bytes, the upload's number
	// under this name (from 1) and when it was uploaded.
	Hash    string    `json:"hash,omitempty"`
	Size    int64     `json:"size,omitempty"`
	Version int       `json:"version,omitempty"`
	Added   time.Time `json:"added,omitzero"`
	// Split and Merge are a module's defaults for jobs that do not say
	// (empty: whole and concat).
	Split string `json:"split,omitempty"`
	Merge string `json:"merge,omitempty"`
	// Tenant is who added a module's version, as an opaque key (the
	// same for a group's tokens; empty for the cluster key's): shown to
	// workers, which share their prefetching fairly among tenants, and
	// to admins; empty for clients.
	Tenant string `json:"tenant,omitempty"`
}

// Operation kinds in OpInfo.Kind.
const (
	OpBuiltin = "builtin"
	OpModule  = "wasm"
)

// ModuleOps among a worker's Register.Ops means it runs every user
// operation (WebAssembly module).
const ModuleOps = "wasm"

// ModulePrefix starts the operation of a unit that runs a WebAssembly
// module: the rest is the module's sha256. Such a unit's parameters also
// carry the reserved keys below, which are not the module's environment.
const ModulePrefix = "wasm:"

// Reserved unit parameters of a module's unit: the operation's name (for
// messages), and the unit's memory, output (bytes) and time (milliseconds)
// limits. Job parameters never contain a '.', so these cannot clash.
const (
	ParamOpName  = "braid.op"
	ParamMemory  = "braid.mem"
	ParamOutput  = "braid.output"
	ParamTimeout = "braid.timeout_ms"
	// ParamFiles cuts a module unit's input into the named files the
	// module finds in /in (EncodeFiles): the parts of a fan-in's inputs,
	// or the dataset member, that the unit's bytes hold.
	ParamFiles = "braid.files"
)

// FilePart is a named part of a unit's input: the next Len bytes.
type FilePart struct {
	Name string
	Len  int64
}

// EncodeFiles encodes parts for ParamFiles: a line "LEN NAME" each.
func EncodeFiles(parts []FilePart) string {
	var b strings.Builder
	for _, p := range parts {
		fmt.Fprintf(&b, "%d %s\n", p.Len, p.Name)
	}
	return b.String()
}

// ParseFiles decodes ParamFiles and checks that the parts' lengths add up
// to size, the unit's input.
func ParseFiles(s string, size int64) ([]FilePart, error) {
	var parts []FilePart
	var sum int64
	for line := range strings.Lines(s) {
		n, name, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		l, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil || l < 0 || name == "" {
			return nil, fmt.Errorf("%s: line %q: want LEN NAME", ParamFiles, line)
		}
		sum += l
		parts = append(parts, FilePart{Name: name, Len: l})
	}
	if sum != size {
		return nil, fmt.Errorf("%s: the parts hold %d bytes, the input %d", ParamFiles, sum, size)
	}
	return parts, nil
}

// ParamInfo describes one parameter of an operation.
type ParamInfo struct {
	Name    string `json:"name"`
	Default string `json:"default,omitempty"`
	Doc     string `json:"doc"`
}

// OpList is the answer to GET /v1/ops.
type OpList struct {
	Ops []OpInfo `json:"ops"`
}
