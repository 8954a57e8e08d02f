package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/internal/wasmtest"
	"github.com/braid-hpc/braid/wasm"
)

// emptyCommand is the smallest WASI command: a memory and a _start that
// returns.
var emptyCommand = []byte{
	0, 'a', 's', 'm', 1, 0, 0, 0,
	1, 4, 1, 0x60, 0, 0, // type section: func()
	3, 2, 1, 0, // function section: one of type 0
	5, 3, 1, 0, 1, // memory section: one memory of 1 page
	7, 19, 2, // export section: 2 exports
	6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0,
	6, '_', 's', 't', 'a', 'r', 't', 0, 0,
	10, 4, 1, 2, 0, 0x0b, // code section: an empty body
}

// TestPrefetch checks that a worker loads a module the server lists
// before any of its units arrives.
func TestPrefetch(t *testing.T) {
	sum := sha256.Sum256(emptyCommand)
	hash := hex.EncodeToString(sum[:])
	var downloads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case api.PathOps:
			json.NewEncoder(rw).Encode(api.OpList{Ops: []api.OpInfo{
				{Name: "noop", Kind: api.OpBuiltin},
				{Name: "empty", Kind: api.OpModule, Hash: hash, Size: int64(len(emptyCommand)), Added: time.Now()},
			}})
		case api.PathBlobs + "/" + hash:
			downloads.Add(1)
			rw.Write(emptyCommand)
		default:
			http.NotFound(rw, r)
		}
	}))
	defer srv.Close()
	cfg := Config{ModuleDir: t.TempDir(), ModuleCache: 1 << 20, MaxModule: 1 << 20}
	m, err := newModules(&cfg, []*client.Client{client.New(srv.URL, client.WithInsecureHTTP())})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.prefetch(ctx)
	}()
	testwait.For(t, "the module to be loaded", 10*time.Second, func() bool {
		_, ok := m.engine.Lookup(hash)
		return ok
	})
	cancel()
	<-done
	if n := downloads.Load(); n != 1 {
		t.Errorf("downloaded %d times, want 1", n)
	}
}

// TestFailedModuleCompiledOnce: a module beyond the compile limits (or
// that took too long to compile) is compiled once: later units, prefetch,
// and the same worker after a restart fail at once with the first error.
func TestFailedModuleCompiledOnce(t *testing.T) {
	// 5,000 nested blocks: beyond wasm.MaxNesting.
	bad := wasmtest.Module{MemPages: 1,
		Start: append(wasmtest.Repeat([]byte{0x02, 0x40}, 5000), wasmtest.Repeat([]byte{0x0b}, 5000)...)}.Bytes()
	sum := sha256.Sum256(bad)
	hash := hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case api.PathOps:
			json.NewEncoder(rw).Encode(api.OpList{Ops: []api.OpInfo{
				{Name: "deep", Kind: api.OpModule, Hash: hash, Size: int64(len(bad)), Added: time.Now()},
			}})
		case api.PathBlobs + "/" + hash:
			rw.Write(bad)
		default:
			http.NotFound(rw, r)
		}
	}))
	defer srv.Close()
	cfg := Config{ModuleDir: t.TempDir(), ModuleCache: 1 << 20, MaxModule: 1 << 20}
	servers := []*client.Client{client.New(srv.URL, client.WithInsecureHTTP())}
	m, err := newModules(&cfg, servers)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	for i := range 3 {
		if _, err := m.get(t.Context(), hash); !errors.Is(err, wasm.ErrBadModule) || !strings.Contains(err.Error(), "nest more than") {
			t.Fatalf("get %d: %v, want the compile limit's error", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	m.prefetch(ctx) // one round, then ctx ends
	cancel()
	if n := m.compiles.Load(); n != 1 {
		t.Fatalf("compiled %d times, want 1", n)
	}

	// After a restart, with the same module directory.
	m2, err := newModules(&cfg, servers)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.close()
	if _, err := m2.get(t.Context(), hash); err == nil || !strings.Contains(err.Error(), "nest more than") || !strings.Contains(err.Error(), "does not compile it again") {
		t.Fatalf("get after a restart: %v, want the first error", err)
	}
	if n := m2.compiles.Load(); n != 0 {
		t.Fatalf("compiled %d times after a restart, want 0", n)
	}
}

// TestUnitMemoryCap: a unit asking for more memory than the worker's
// --max-unit-mem fails, naming both numbers.
func TestUnitMemoryCap(t *testing.T) {
	cfg := Config{Servers: []string{"http://127.0.0.1:1"}, Key: []byte("k"), Threads: 2, ModuleDir: t.TempDir(), MaxUnitMem: 64 << 20}
	if err := cfg.populate(); err != nil {
		t.Fatal(err)
	}
	m, err := newModules(&cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	u := &api.Unit{Params: map[string]string{api.ParamOpName: "big", api.ParamMemory: strconv.Itoa(1 << 30)}}
	_, _, err = m.run(t.Context(), nil, strings.Repeat("0", 64), u)
	if err == nil || !strings.Contains(err.Error(), "asks for 1073741824 bytes") || !strings.Contains(err.Error(), "at most 67108864") {
		t.Fatalf("got %v, want an error naming 1073741824 and 67108864", err)
	}
	if got := defaultMaxUnitMem(16<<30, 4); got != 1<<30-wasm.StackReserve {
		t.Errorf("default cap on 16 GiB and 4 threads: %d, want 1 GiB less the call stack's reserve (832 MiB)", got)
	}
	if got := defaultMaxUnitMem(1<<30, 8); got != wasm.DefaultMemory {
		t.Errorf("default cap on 1 GiB and 8 threads: %d, want the default unit memory", got)
	}
}

// TestDefaultCompiledCache: the compiled modules a worker keeps are
// bounded by a quarter of its memory (its cgroup's where smaller), at
// least 256 MiB, as Config.CompiledCache says.
func TestDefaultCompiledCache(t *testing.T) {
	for _, c := range []struct {
		ram, want int64
	}{
		{3 << 30, 768 << 20},
		{16 << 30, 4 << 30},
		{512 << 20, 256 << 20},
		{0, wasm.DefaultMaxCompiledBytes},
	} {
		if got := defaultCompiledCache(c.ram); got != c.want {
			t.Errorf("memory %d: compiled cache %d, want %d", c.ram, got, c.want)
		}
	}
}

// tenantModule is emptyCommand made distinct by a custom section: the
// i-th module of a tenant's.
func tenantModule(tenant byte, i int) []byte {
	return append(slices.Clone(emptyCommand), 0, 3, 2, tenant, byte(i))
}

// opsServer serves an operation list of modules, and the modules.
func opsServer(t *testing.T, ops []api.OpInfo, code map[string][]byte) *client.Client {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == api.PathOps {
			json.NewEncoder(rw).Encode(api.OpList{Ops: ops})
			return
		}
		if b, ok := code[strings.TrimPrefix(r.URL.Path, api.PathBlobs+"/")]; ok {
			rw.Write(b)
			return
		}
		http.NotFound(rw, r)
	}))
	t.Cleanup(srv.Close)
	return client.New(srv.URL, client.WithInsecureHTTP())
}

// TestPrefetchSharesTenants: one client adding module after module does
// not push another's new module out of the worker's prefetching, and a
// tenant whose prefetch time is spent is not prefetched, while others
// are.
func TestPrefetchSharesTenants(t *testing.T) {
	var ops []api.OpInfo
	code := map[string][]byte{}
	add := func(tenant string, b []byte, added time.Time) string {
		sum := sha256.Sum256(b)
		hash := hex.EncodeToString(sum[:])
		code[hash] = b
		ops = append(ops, api.OpInfo{Name: "op" + strconv.Itoa(len(ops)), Kind: api.OpModule, Hash: hash, Size: int64(len(b)), Added: added, Tenant: tenant})
		return hash
	}
	start := time.Now()
	alice := add("alice", tenantModule('a', 0), start)
	var mallory []string
	for i := range 3 * prefetchMax {
		mallory = append(mallory, add("mallory", tenantModule('m', i), start.Add(time.Duration(i+1)*time.Second)))
	}
	cfg := Config{ModuleDir: t.TempDir(), ModuleCache: 1 << 20, MaxModule: 1 << 20}
	m, err := newModules(&cfg, []*client.Client{opsServer(t, ops, code)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	m.prefetchRound(t.Context())
	if _, ok := m.engine.Lookup(alice); !ok {
		t.Errorf("alice's module was not prefetched beside %d newer modules of mallory's", len(mallory))
	}
	if n := m.compiles.Load(); n > prefetchMax {
		t.Errorf("one round compiled %d modules, want at most %d", n, prefetchMax)
	}
	// Only mallory's newest are candidates, newest first.
	if _, ok := m.engine.Lookup(mallory[len(mallory)-1]); !ok {
		t.Errorf("mallory's newest module was not prefetched")
	}
	if _, ok := m.engine.Lookup(mallory[0]); ok {
		t.Errorf("mallory's oldest module was prefetched, beyond her %d newest", prefetchMax)
	}

	// With mallory's time spent, a new module of hers waits and bob's
	// is loaded.
	m2, err := newModules(&Config{ModuleDir: t.TempDir(), ModuleCache: 1 << 20, MaxModule: 1 << 20},
		[]*client.Client{opsServer(t, ops, code)})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.close()
	m2.budget.charge("mallory", prefetchBurst+time.Second, time.Now())
	bob := add("bob", tenantModule('b', 0), start)
	m2.servers = []*client.Client{opsServer(t, ops, code)}
	m2.prefetchRound(t.Context())
	if _, ok := m2.engine.Lookup(bob); !ok {
		t.Errorf("bob's module was not prefetched")
	}
	for _, h := range mallory {
		if _, ok := m2.engine.Lookup(h); ok {
			t.Fatalf("a module of mallory's was prefetched with her prefetch time spent")
		}
	}
}

// TestCompileBudget: a tenant's prefetch time refills at a tenth of the
// time that passes, up to prefetchBurst, and a full bucket is forgotten.
func TestCompileBudget(t *testing.T) {
	var b compileBudget
	t0 := time.Unix(1e9, 0)
	if got := b.available("x", t0); got != prefetchBurst {
		t.Fatalf("a new tenant has %v, want %v", got, prefetchBurst)
	}
	if !b.charge("x", prefetchBurst+10*time.Second, t0) {
		t.Error("charging more than x has does not say it spent its time")
	}
	ops := []api.OpInfo{{Hash: "h1", Tenant: "x", Added: t0}, {Hash: "h2", Tenant: "y", Added: t0.Add(-time.Hour)}}
	if op, ok := b.next(ops, nil, t0); !ok || op.Hash != "h2" {
		t.Errorf("next with x's time spent: %v %v, want y's h2", op.Hash, ok)
	}
	if op, ok := b.next(ops, map[string]bool{"h2": true}, t0.Add(100*time.Second)); ok {
		t.Errorf("next after 100 s (x has 0 left): %v, want none", op.Hash)
	}
	if got := b.available("x", t0.Add(200*time.Second)); got != 10*time.Second {
		t.Errorf("after 200 s x has %v, want 10s", got)
	}
	if op, ok := b.next(ops, map[string]bool{"h2": true}, t0.Add(200*time.Second)); !ok || op.Hash != "h1" {
		t.Errorf("next after 200 s: %v %v, want x's h1", op.Hash, ok)
	}
	if got := b.available("x", t0.Add(time.Hour)); got != prefetchBurst {
		t.Errorf("after an hour x has %v, want %v", got, prefetchBurst)
	}
	if b.charge("y", time.Second, t0.Add(time.Hour)) {
		t.Error("charging 1 s of 60 says y's time is spent")
	}
	if _, ok := b.left["x"]; ok || len(b.left) != 1 {
		t.Errorf("tenants kept: %v, want only y", b.left)
	}
}

// TestPrefetchSeesNewModules: a module another tenant adds while the
// worker compiles is the next it prefetches, not one after the rest of a
// list taken before (an outside check saw alice's module wait 35 s
// behind four of mallory's).
func TestPrefetchSeesNewModules(t *testing.T) {
	var mu sync.Mutex
	var ops []api.OpInfo
	var order []string
	code := map[string][]byte{}
	add := func(tenant string, b []byte) string {
		sum := sha256.Sum256(b)
		hash := hex.EncodeToString(sum[:])
		mu.Lock()
		defer mu.Unlock()
		code[hash] = b
		ops = append(ops, api.OpInfo{Name: "op" + strconv.Itoa(len(ops)), Kind: api.OpModule, Hash: hash, Size: int64(len(b)), Added: time.Now(), Tenant: tenant})
		return hash
	}
	for i := range 4 {
		add("mallory", tenantModule('m', i))
	}
	var alice string
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.URL.Path == api.PathOps {
			json.NewEncoder(rw).Encode(api.OpList{Ops: slices.Clone(ops)})
			mu.Unlock()
			return
		}
		hash := strings.TrimPrefix(r.URL.Path, api.PathBlobs+"/")
		b, ok := code[hash]
		order = append(order, hash)
		first := len(order) == 1
		mu.Unlock()
		if !ok {
			http.NotFound(rw, r)
			return
		}
		if first {
			// alice adds hers while the worker fetches mallory's first.
			alice = add("alice", tenantModule('a', 0))
		}
		rw.Write(b)
	}))
	defer srv.Close()
	m, err := newModules(&Config{ModuleDir: t.TempDir(), ModuleCache: 1 << 20, MaxModule: 1 << 20},
		[]*client.Client{client.New(srv.URL, client.WithInsecureHTTP())})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	m.prefetchRound(t.Context())
	mu.Lock()
	defer mu.Unlock()
	if len(order) < 2 || order[1] != alice {
		t.Fatalf("prefetched %d modules, alice's (added during the first) at %d, want second", len(order), slices.Index(order, alice)+1)
	}
}
