package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
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
