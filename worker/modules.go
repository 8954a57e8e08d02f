package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/wasm"
)

// modules runs the units of user operations: it fetches each module by
// its hash from the servers the first time one of its units arrives,
// checks the hash, keeps the module on disk (bounded, least recently used
// out first) and compiles it once.
type modules struct {
	engine  *wasm.Engine
	dir     string // modules, as HASH.wasm
	temp    bool   // dir is ours to remove
	max     int64  // bytes kept in dir
	maxSize int64  // bytes of one module
	maxMem  int64  // bytes of memory a unit may ask for (Config.MaxUnitMem)
	servers []*client.Client
	allow   map[string]bool // nil: every operation
	log     *slog.Logger

	mu      sync.Mutex
	loading map[string]*load
	tried   map[string]bool // hashes prefetch loaded, or tried to
	// failed keeps, by hash, why a module could not be compiled (beyond
	// the compile limits, not a command module, or too long to compile):
	// it is never compiled again, by prefetch or by a unit. A file
	// HASH.failed in dir keeps it across restarts.
	failed map[string]error
	// budget is what prefetching may still spend on each tenant.
	budget   compileBudget
	compiles atomic.Int64 // compilations started, for tests
}

// Prefetching: every prefetchInterval the worker lists the servers'
// operations and loads (downloads and compiles) the modules it has not
// loaded yet among each tenant's prefetchMax newest, so that the first
// unit of a module added a moment before its job does not wait for the
// compiler (seconds for a Go program of a few MB).
//
// Compiling is what costs (up to some 30 s of CPU for a module within
// the compile limits), and any client may add modules without running a
// job: so the tenants who added them (api.OpInfo.Tenant) share it. A
// round loads at most prefetchMax modules, each time one of the tenant
// with the most prefetch time left, and a tenant's prefetch time is a
// token bucket: prefetchBurst at first, refilled at 1/prefetchShare of
// the time that passes. A tenant with none left is not prefetched until
// it has some again; its modules compile when their units arrive, as
// part of its jobs, which share the threads fairly. So a client adding
// module after module makes each worker compile for it at most a tenth
// of the time (after the first minute), and cannot push another
// tenant's new module out of the rounds.
const (
	prefetchInterval = 2 * time.Second
	prefetchMax      = 8
	prefetchBurst    = 60 * time.Second
	prefetchShare    = 10
)

// prefetch loads the servers' newest modules ahead of their units, until
// ctx ends.
func (m *modules) prefetch(ctx context.Context) {
	for {
		m.prefetchRound(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(prefetchInterval):
		}
	}
}

// prefetchRound loads up to prefetchMax modules, sharing the time among
// their tenants. It lists the servers' modules again before each: a
// module added while another compiles (seconds) is in the next choice,
// not behind the rest of a list taken before it.
func (m *modules) prefetchRound(ctx context.Context) {
	for range prefetchMax {
		ops := m.listModules(ctx)
		now := time.Now()
		m.mu.Lock()
		op, ok := m.budget.next(ops, m.tried, now)
		if ok {
			m.tried[op.Hash] = true
		}
		m.mu.Unlock()
		if !ok || ctx.Err() != nil {
			return
		}
		m.get(ctx, op.Hash) // an error: its units will say why
		m.mu.Lock()
		spent := m.budget.charge(op.Tenant, time.Since(now), time.Now())
		m.mu.Unlock()
		if spent {
			m.log.Info("prefetch time of a tenant spent; its other modules compile when their units arrive",
				"tenant", op.Tenant, "back_in", (-m.budget.available(op.Tenant, time.Now()) * prefetchShare).Round(time.Second))
		}
	}
}

// listModules returns the modules the servers list that this worker
// runs, each tenant's prefetchMax newest.
func (m *modules) listModules(ctx context.Context) []api.OpInfo {
	var ops []api.OpInfo
	seen := map[string]bool{}
	for _, c := range m.servers {
		lctx, cancel := context.WithTimeout(ctx, prefetchInterval)
		list, err := c.Ops(lctx)
		cancel()
		if err != nil {
			continue
		}
		for _, op := range list {
			if op.Kind != api.OpModule || op.Hash == "" || seen[op.Hash] || (m.allow != nil && !m.allow[op.Name]) {
				continue
			}
			seen[op.Hash] = true
			ops = append(ops, op)
		}
	}
	slices.SortFunc(ops, func(a, b api.OpInfo) int { return b.Added.Compare(a.Added) })
	per := map[string]int{}
	return slices.DeleteFunc(ops, func(op api.OpInfo) bool {
		per[op.Tenant]++
		return per[op.Tenant] > prefetchMax
	})
}

// compileBudget is the prefetch time each tenant has left (see
// prefetchBurst).
type compileBudget struct {
	// left is a tenant's time left at its charge's time at; a tenant
	// not in it has prefetchBurst.
	left map[string]time.Duration
	at   map[string]time.Time
}

// available returns the prefetch time tenant has left at now.
func (b *compileBudget) available(tenant string, now time.Time) time.Duration {
	left, ok := b.left[tenant]
	if !ok {
		return prefetchBurst
	}
	return min(left+now.Sub(b.at[tenant])/prefetchShare, prefetchBurst)
}

// charge takes d from tenant's time, and forgets the tenants whose
// bucket is full again (at most one entry a tenant who prefetched). It
// reports whether that spent the last of tenant's time.
func (b *compileBudget) charge(tenant string, d time.Duration, now time.Time) (spent bool) {
	if b.left == nil {
		b.left, b.at = map[string]time.Duration{}, map[string]time.Time{}
	}
	for t := range b.left {
		if b.available(t, now) >= prefetchBurst {
			delete(b.left, t)
			delete(b.at, t)
		}
	}
	had := b.available(tenant, now)
	b.left[tenant], b.at[tenant] = had-d, now
	return had > 0 && had-d <= 0
}

// next returns the module to prefetch next among ops: the newest not
// tried of the tenant with the most time left, if any has some.
func (b *compileBudget) next(ops []api.OpInfo, tried map[string]bool, now time.Time) (api.OpInfo, bool) {
	var best api.OpInfo
	var bestLeft time.Duration
	found := false
	for _, op := range ops {
		if tried[op.Hash] {
			continue
		}
		left := b.available(op.Tenant, now)
		if left <= 0 {
			continue
		}
		if !found || left > bestLeft || left == bestLeft && op.Added.After(best.Added) {
			best, bestLeft, found = op, left, true
		}
	}
	return best, found
}

// load is a module being fetched and compiled; done is closed when mod or
// err is set.
type load struct {
	done chan struct{}
	mod  *wasm.Module
	err  error
}

func newModules(cfg *Config, servers []*client.Client) (*modules, error) {
	m := &modules{dir: cfg.ModuleDir, max: cfg.ModuleCache, maxSize: cfg.MaxModule, maxMem: cfg.MaxUnitMem, servers: servers,
		loading: map[string]*load{}, tried: map[string]bool{}, failed: map[string]error{}, log: cfg.Logger}
	if m.log == nil {
		m.log = slog.Default()
	}
	if cfg.Modules != nil {
		m.allow = map[string]bool{}
		for _, n := range cfg.Modules {
			m.allow[n] = true
		}
	}
	if m.dir == "" {
		dir, err := os.MkdirTemp("", "braid-modules-")
		if err != nil {
			return nil, fmt.Errorf("worker: module directory: %w", err)
		}
		m.dir, m.temp = dir, true
	}
	if err := os.MkdirAll(filepath.Join(m.dir, "compiled"), 0o700); err != nil {
		return nil, fmt.Errorf("worker: module directory: %w", err)
	}
	engine, err := wasm.NewEngine(wasm.Config{CacheDir: filepath.Join(m.dir, "compiled"), MaxCompiledBytes: cfg.CompiledCache})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	m.engine = engine
	return m, nil
}

// offered returns what the worker registers for modules: ModuleOps for
// every one, or the names it runs.
func (m *modules) offered() []string {
	if m.allow == nil {
		return []string{api.ModuleOps}
	}
	names := make([]string, 0, len(m.allow))
	for n := range m.allow {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (m *modules) close() {
	m.engine.Close()
	if m.temp {
		os.RemoveAll(m.dir)
	}
}

// InputsEnv is the environment variable that lists, one a line, the
// names of the files a module unit finds in wasm.FilesDir, in the order
// its input holds them.
const InputsEnv = "BRAID_INPUTS"

// run runs the unit u of a module with hash.
func (m *modules) run(ctx context.Context, g *gate, hash string, u *api.Unit) ([]byte, time.Duration, error) {
	name := u.Params[api.ParamOpName]
	if name == "" {
		name = "module " + hash[:min(12, len(hash))]
	}
	if m.allow != nil && !m.allow[name] {
		return nil, 0, fmt.Errorf("%s: this worker does not run it (it runs %s)", name, strings.Join(m.offered(), ", "))
	}
	lim := wasm.Limits{
		Memory:  paramInt(u.Params, api.ParamMemory),
		Output:  paramInt(u.Params, api.ParamOutput),
		Timeout: time.Duration(paramInt(u.Params, api.ParamTimeout)) * time.Millisecond,
	}
	if m.maxMem > 0 {
		switch {
		case lim.Memory > m.maxMem:
			return nil, 0, fmt.Errorf("%s: the unit asks for %d bytes of memory; this worker allows at most %d per unit (braid worker --max-unit-mem): submit with a smaller --unit-mem", name, lim.Memory, m.maxMem)
		case lim.Memory == 0:
			lim.Memory = min(wasm.DefaultMemory, m.maxMem)
		}
	}
	env := make(map[string]string, len(u.Params))
	for k, v := range u.Params {
		if !strings.HasPrefix(k, "braid.") {
			env[k] = v
		}
	}
	mod, err := m.get(ctx, hash)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", name, err)
	}
	var stdin []byte
	switch len(u.Inputs) {
	case 0:
	case 1:
		stdin = u.Inputs[0]
	default:
		stdin = bytes.Join(u.Inputs, nil)
	}
	var files []wasm.File
	if spec, ok := u.Params[api.ParamFiles]; ok {
		parts, err := api.ParseFiles(spec, int64(len(stdin)))
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", name, err)
		}
		names := make([]string, len(parts))
		off := int64(0)
		for i, p := range parts {
			files = append(files, wasm.File{Name: p.Name, Data: stdin[off : off+p.Len : off+p.Len]})
			names[i] = p.Name
			off += p.Len
		}
		env[InputsEnv] = strings.Join(names, "\n")
	}
	if err := g.acquire(ctx); err != nil {
		return nil, 0, err
	}
	defer g.release()
	start := time.Now()
	out, err := mod.RunFiles(ctx, name, stdin, files, env, lim)
	return out, time.Since(start), err
}

func paramInt(p map[string]string, k string) int64 {
	v, _ := strconv.ParseInt(p[k], 10, 64)
	return max(v, 0)
}

// get returns the compiled module with hash, loading it once; a module
// that failed to compile fails at once, with the first error.
func (m *modules) get(ctx context.Context, hash string) (*wasm.Module, error) {
	if mod, ok := m.engine.Lookup(hash); ok {
		return mod, nil
	}
	if len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("module %q: not a sha256 in hex", hash)
	}
	if err := m.failure(hash); err != nil {
		return nil, err
	}
	m.mu.Lock()
	l := m.loading[hash]
	if l == nil {
		l = &load{done: make(chan struct{})}
		m.loading[hash] = l
		go func() {
			// Not the unit's context: other units wait for the same load.
			lctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			l.mod, l.err = m.load(lctx, hash)
			m.mu.Lock()
			delete(m.loading, hash)
			m.mu.Unlock()
			close(l.done)
		}()
	}
	m.mu.Unlock()
	select {
	case <-l.done:
		return l.mod, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// load reads the module from the disk cache or the servers, checks its
// hash and compiles it.
func (m *modules) load(ctx context.Context, hash string) (*wasm.Module, error) {
	path := filepath.Join(m.dir, hash+".wasm")
	code, err := os.ReadFile(path)
	if err == nil && sum(code) == hash {
		now := time.Now()
		os.Chtimes(path, now, now) // recently used
	} else {
		if code, err = m.fetch(ctx, hash); err != nil {
			return nil, err
		}
		m.keep(path, code)
	}
	m.compiles.Add(1)
	start := time.Now()
	mod, err := m.engine.Compile(ctx, code)
	if err != nil {
		m.log.Warn("module not compiled", "module", hash[:12], "bytes", len(code), "took", time.Since(start).Round(time.Millisecond), "err", err)
		err = fmt.Errorf("module %s: %w", hash[:12], err)
		if errors.Is(err, wasm.ErrBadModule) || errors.Is(err, wasm.ErrCompileTimeout) {
			m.fail(hash, err)
		}
		return nil, err
	}
	m.log.Info("module compiled", "module", hash[:12], "bytes", len(code), "took", time.Since(start).Round(time.Millisecond))
	return mod, nil
}

// failedSuffix names the file that keeps why a module failed to compile.
const failedSuffix = ".failed"

// fail records that the module with hash cannot be compiled, in memory
// and on disk.
func (m *modules) fail(hash string, err error) {
	m.mu.Lock()
	m.failed[hash] = err
	m.mu.Unlock()
	os.WriteFile(filepath.Join(m.dir, hash+failedSuffix), []byte(err.Error()), 0o600) // best effort: then it fails again after a restart
}

// failure returns why the module with hash could not be compiled, by this
// worker now or before a restart, or nil.
func (m *modules) failure(hash string) error {
	m.mu.Lock()
	err := m.failed[hash]
	m.mu.Unlock()
	if err != nil {
		return err
	}
	b, rerr := os.ReadFile(filepath.Join(m.dir, hash+failedSuffix))
	if rerr != nil {
		return nil
	}
	err = fmt.Errorf("%w: %s (this worker does not compile it again)", errFailedBefore, strings.TrimSpace(string(b)))
	m.mu.Lock()
	m.failed[hash] = err
	m.mu.Unlock()
	return err
}

// errFailedBefore is the error of a module that failed to compile before
// this worker started.
var errFailedBefore = errors.New("failed to compile before")

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fetch downloads the module from the first server that has it.
func (m *modules) fetch(ctx context.Context, hash string) ([]byte, error) {
	var errs []error
	for _, c := range m.servers {
		var buf limitedBuffer
		buf.max = m.maxSize
		if _, err := c.Get(ctx, hash, &buf); err != nil {
			if errors.Is(err, errTooLarge) {
				return nil, fmt.Errorf("module %s from %s: larger than this worker's limit of %d bytes", hash[:12], c.URL(), m.maxSize)
			}
			errs = append(errs, err)
			continue
		}
		if got := sum(buf.Bytes()); got != hash {
			return nil, fmt.Errorf("module %s from %s: its sha256 is %s: refused (corrupted or tampered with on the way)", hash[:12], c.URL(), got)
		}
		return buf.Bytes(), nil
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("module %s: no server to fetch it from", hash[:12])
	}
	return nil, fmt.Errorf("fetch module %s: %w", hash[:12], errors.Join(errs...))
}

// keep writes the module into the cache directory and trims the cache
// to its bound. A failure only costs a download next time.
func (m *modules) keep(path string, code []byte) {
	tmp, err := os.CreateTemp(m.dir, ".part-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(code)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		os.Remove(tmp.Name())
		return
	}
	m.trim(path)
}

// trim removes the least recently used modules beyond the cache's bound,
// never keep.
func (m *modules) trim(keep string) {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return
	}
	type file struct {
		path string
		size int64
		used time.Time
	}
	var files []file
	var total int64
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".wasm") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		files = append(files, file{filepath.Join(m.dir, e.Name()), info.Size(), info.ModTime()})
		total += info.Size()
	}
	slices.SortFunc(files, func(a, b file) int { return a.used.Compare(b.used) })
	for _, f := range files {
		if total <= m.max {
			break
		}
		if f.path == keep {
			continue
		}
		if os.Remove(f.path) == nil {
			total -= f.size
		}
	}
}

var errTooLarge = errors.New("too large")

// limitedBuffer is a bytes.Buffer that refuses to grow past max.
type limitedBuffer struct {
	bytes.Buffer
	max int64
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if int64(b.Len()+len(p)) > b.max {
		return 0, errTooLarge
	}
	return b.Buffer.Write(p)
}
