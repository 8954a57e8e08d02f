package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/sched"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/wasm"
)

// userOps are the operations users uploaded as WebAssembly modules: the
// newest version of each name, as the store has them.
type userOps struct {
	mu     sync.RWMutex
	byName map[string]store.UserOp
}

func (u *userOps) load(list []store.UserOp) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.byName = make(map[string]store.UserOp, len(list))
	for _, op := range list {
		u.byName[op.Name] = op
	}
}

func (u *userOps) get(name string) (store.UserOp, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	op, ok := u.byName[name]
	return op, ok
}

func (u *userOps) set(op store.UserOp) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.byName[op.Name] = op
}

func (u *userOps) remove(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.byName, name)
}

func (u *userOps) list() []store.UserOp {
	u.mu.RLock()
	defer u.mu.RUnlock()
	out := make([]store.UserOp, 0, len(u.byName))
	for _, op := range u.byName {
		out = append(out, op)
	}
	slices.SortFunc(out, func(a, b store.UserOp) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// moduleOp is a user operation as the server sees it: it splits and
// assembles like any operation, but its units run only on workers, which
// run the module with the given hash.
type moduleOp struct {
	name, hash string
	info       ops.Info
}

func newModuleOp(name, hash string, rec *store.UserOp) *moduleOp {
	m := &moduleOp{name: name, hash: hash, info: ops.Info{Doc: "WebAssembly module " + shortHash(hash), AnyParams: true}}
	if rec != nil {
		if rec.Doc != "" {
			m.info.Doc = rec.Doc
		}
		for _, p := range rec.Params {
			m.info.Params = append(m.info.Params, ops.Param{Name: p.Name, Default: p.Default, Doc: p.Doc})
		}
		m.info.AnyParams = len(rec.Params) == 0
	}
	return m
}

func (m *moduleOp) Name() string   { return m.name }
func (m *moduleOp) Info() ops.Info { return m.info }

// Split without a split of the job's own: one unit of the whole input.
func (m *moduleOp) Split(in io.ReaderAt, size int64, params map[string]string, hint ops.Hint) ([]ops.UnitSpec, error) {
	p, err := ops.Planned(m, ops.Split{Kind: ops.SplitWhole}, ops.Merge{Kind: ops.MergeConcat}, nil)
	if err != nil {
		return nil, err
	}
	return p.Split(in, size, params, hint)
}

func (m *moduleOp) Run(context.Context, map[string]string, [][]byte) ([]byte, error) {
	return nil, fmt.Errorf("%s: a module's units run on workers, not on the server: %w", m.name, ops.ErrBadInput)
}

// Assemble without a merge of the job's own: the units' outputs joined,
// of the first copy of a repeated job, the others compared with it.
func (m *moduleOp) Assemble(params map[string]string, hint ops.Hint, results [][]byte) ([]byte, error) {
	p, err := ops.Planned(m, ops.Split{Kind: ops.SplitWhole}, ops.Merge{Kind: ops.MergeConcat}, nil)
	if err != nil {
		return nil, err
	}
	return p.Assemble(params, hint, results)
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// opName is what a user operation may be called.
var opName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

// resolved is an operation a job names, found among the built-in and the
// user operations.
type resolved struct {
	op ops.Op
	// module is the sha256 of a user operation's module; empty for a
	// built-in one.
	module string
	rec    *store.UserOp
}

// wire returns what a unit message names: the built-in operation's name,
// or the module prefix and hash.
func (r resolved) wire() string {
	if r.module != "" {
		return api.ModulePrefix + r.module
	}
	return r.op.Name()
}

// resolve finds the operation called name: built-in first, then the
// newest version of a user operation.
func (s *Server) resolve(name string) (resolved, error) {
	if op, err := s.cfg.Ops.Lookup(name); err == nil {
		return resolved{op: op}, nil
	}
	if rec, ok := s.userOps.get(name); ok {
		return resolved{op: newModuleOp(name, rec.Hash, &rec), module: rec.Hash, rec: &rec}, nil
	}
	known := s.cfg.Ops.Names()
	for _, op := range s.userOps.list() {
		known = append(known, op.Name)
	}
	return resolved{}, withKind(ops.ErrUnknownOp, fmt.Errorf("unknown operation %q; known: %s (add your own with 'braid op add NAME FILE.wasm')",
		name, strings.Join(known, ", ")))
}

// resolveRecorded finds the operation of a job as it was submitted: a
// module by the hash the job recorded, whatever became of its name.
func (s *Server) resolveRecorded(name, module string) (resolved, error) {
	if module == "" {
		op, err := s.cfg.Ops.Lookup(name)
		if err != nil {
			return resolved{}, err
		}
		return resolved{op: op}, nil
	}
	var rec *store.UserOp
	if cur, ok := s.userOps.get(name); ok && cur.Hash == module {
		rec = &cur
	}
	return resolved{op: newModuleOp(name, module, rec), module: module, rec: rec}, nil
}

// opInfo describes a user operation for the API.
func opInfo(rec store.UserOp) api.OpInfo {
	oi := api.OpInfo{Name: rec.Name, Kind: api.OpModule, Doc: rec.Doc, Hash: rec.Hash, Size: rec.Size,
		Version: rec.Version, Added: rec.Added, Split: rec.Split, Merge: rec.Merge}
	if oi.Doc == "" {
		oi.Doc = "WebAssembly module " + shortHash(rec.Hash)
	}
	for _, p := range rec.Params {
		oi.Params = append(oi.Params, api.ParamInfo{Name: p.Name, Default: p.Default, Doc: p.Doc})
	}
	return oi
}

// putOp uploads a module as a new version of operation {name}: the body
// is the module; the query may carry doc, split, merge and param
// (NAME=DEFAULT, repeatable).
func (s *Server) putOp(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if !opName.MatchString(name) {
		return kindf(errBadRequest, "operation name %q: want a letter, then up to 63 letters, digits, '-' or '_'", name)
	}
	if name == sched.ModuleOps {
		return kindf(errBadRequest, "operation name %q is reserved: workers offer it to mean every module", name)
	}
	if _, err := s.cfg.Ops.Lookup(name); err == nil {
		return kindf(errConflict, "operation %q is built in; choose another name", name)
	}
	// Checked before the module is read, and again when it is added.
	s.opsMu.Lock()
	err := s.checkOpOwner(caller(r), name, "add a version of")
	s.opsMu.Unlock()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	rec := store.UserOp{Name: name, Doc: strings.TrimSpace(q.Get("doc"))}
	if len(rec.Doc) > 1024 {
		return kindf(errBadRequest, "operation %s: description of %d bytes; at most 1024", name, len(rec.Doc))
	}
	if v := q.Get("split"); v != "" {
		sp, err := ops.ParseSplit(v)
		if err != nil {
			return opsError("operation "+name+": default split", err)
		}
		rec.Split = sp.String()
	}
	if v := q.Get("merge"); v != "" {
		mg, err := ops.ParseMerge(v)
		if err != nil {
			return opsError("operation "+name+": default merge", err)
		}
		rec.Merge = mg.String()
	}
	for _, p := range q["param"] {
		k, def, _ := strings.Cut(p, "=")
		k = strings.TrimSpace(k)
		if !envNameRE.MatchString(k) {
			return kindf(errBadRequest, "operation %s: parameter %q: a name is a letter or '_', then letters, digits or '_' (it becomes an environment variable)", name, k)
		}
		if slices.ContainsFunc(rec.Params, func(o store.UserParam) bool { return o.Name == k }) {
			return kindf(errBadRequest, "operation %s: parameter %s declared twice", name, k)
		}
		rec.Params = append(rec.Params, store.UserParam{Name: k, Default: def})
	}
	code, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxModule))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return fmt.Errorf("operation %s: module larger than the server's limit of %d bytes: %w", name, s.cfg.MaxModule, err)
		}
		return kindf(errBadRequest, "operation %s: read the module: %v", name, err)
	}
	if err := wasm.Validate(r.Context(), code); err != nil {
		return kindf(errBadRequest, "operation %s: %v", name, err)
	}
	if err := s.room("operation "+name+": module", int64(len(code))); err != nil {
		return err
	}
	id, size, err := s.blobs.Put(r.Context(), bytes.NewReader(code))
	if err != nil {
		return storageError("operation "+name+": store the module", err)
	}
	rec.Hash, rec.Size, rec.Owner = id, size, caller(r).owner()
	s.opsMu.Lock()
	defer s.opsMu.Unlock()
	if err := s.checkOpOwner(caller(r), name, "add a version of"); err != nil {
		return err
	}
	if rec, err = s.db.AddOp(r.Context(), rec); err != nil {
		return err
	}
	s.userOps.set(rec)
	s.log.Info("operation added", "op", name, "version", rec.Version, "module", id, "bytes", size)
	info := opInfo(rec)
	return writeJSON(w, http.StatusCreated, &info)
}

// checkOpOwner refuses p to do what to operation name unless p is an
// admin, the operation does not exist, or p's owner added its newest
// version. Names are global, so one client cannot replace another's
// operation. The caller holds opsMu.
func (s *Server) checkOpOwner(p principal, name, what string) error {
	op, ok := s.userOps.get(name)
	if !ok || p.role == api.RoleAdmin || op.Owner != "" && op.Owner == p.owner() {
		return nil
	}
	return kindf(errForbidden, "operation %q belongs to another client; only it or an admin may %s it (choose another name)", name, what)
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

func (s *Server) getOp(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if op, err := s.cfg.Ops.Lookup(name); err == nil {
		info := builtinInfo(op)
		return writeJSON(w, http.StatusOK, &info)
	}
	rec, ok := s.userOps.get(name)
	if !ok {
		return kindf(errNotFound, "no operation %q; see GET %s", name, api.PathOps)
	}
	info := opInfo(rec)
	return writeJSON(w, http.StatusOK, &info)
}

func (s *Server) deleteOp(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if _, err := s.cfg.Ops.Lookup(name); err == nil {
		return kindf(errConflict, "operation %q is built in; it cannot be removed", name)
	}
	s.opsMu.Lock()
	defer s.opsMu.Unlock()
	if err := s.checkOpOwner(caller(r), name, "remove"); err != nil {
		return err
	}
	if err := s.db.RemoveOp(r.Context(), name); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return kindf(errNotFound, "no operation %q; see GET %s", name, api.PathOps)
		}
		return err
	}
	s.userOps.remove(name)
	s.log.Info("operation removed", "op", name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func builtinInfo(op ops.Op) api.OpInfo {
	info := op.Info()
	oi := api.OpInfo{Name: op.Name(), Kind: api.OpBuiltin, Doc: info.Doc, Tiles: info.Tiles}
	for _, p := range info.Params {
		oi.Params = append(oi.Params, api.ParamInfo{Name: p.Name, Default: p.Default, Doc: p.Doc})
	}
	return oi
}
