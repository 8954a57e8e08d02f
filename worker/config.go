package worker

import (
	"errors"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/wasm"
)

// defaultMaxUnitMem is Config.MaxUnitMem when 0: a quarter of ram (bytes,
// 0 if unknown: the host's RAM, or the worker's cgroup memory limit where
// that is smaller, unitRAM) divided among threads, less the most a run's call stack
// can take besides (wasm.StackReserve), so that every thread's unit at
// its limit, stack included, leaves three quarters of the host to
// everything else; 1 GiB per thread if ram is unknown; never under
// wasm.DefaultMemory (256 MiB), so that jobs with the default unit memory
// run on a small host too.
func defaultMaxUnitMem(ram int64, threads int) int64 {
	if ram <= 0 {
		return 1 << 30
	}
	return max(ram/4/int64(max(threads, 1))-wasm.StackReserve, wasm.DefaultMemory)
}

// defaultCompiledCache is Config.CompiledCache when 0: a quarter of ram
// (as defaultMaxUnitMem takes it), so that the compiled modules, the
// units' memory (another quarter) and two compilations under way (some
// 0.86 GB each at the limits) leave the rest of the host alone; at least
// 256 MiB, room for one module at the limits and many ordinary ones;
// wasm.DefaultMaxCompiledBytes if ram is unknown.
func defaultCompiledCache(ram int64) int64 {
	if ram <= 0 {
		return wasm.DefaultMaxCompiledBytes
	}
	return max(ram/4, 256<<20)
}

// Config configures a Worker. Servers and Key are required; every other
// field's zero value works.
type Config struct {
	// Servers are the base URLs of the servers to register with, e.g.
	// "https://10.0.0.1:7400". Required.
	Servers []string
	// Key is the cluster key: it authenticates the servers' sessions, and
	// on the control API it checks the servers' certificates (unless
	// Fingerprint is set) and is the credential (unless Token is set).
	// Required.
	Key []byte
	// Token is the control API credential, a worker token (braid token
	// create --role worker), or a join token that also pins the servers'
	// certificate. Empty means the cluster key's admin credential.
	Token string
	// Fingerprint pins the servers' TLS certificate by its SHA-256
	// fingerprint. Nil means the join token's, else the servers' proof
	// of the cluster key.
	Fingerprint []byte
	// InsecureHTTP talks plain HTTP to servers started with
	// --insecure-http. False means HTTPS.
	InsecureHTTP bool
	// Listen are the data-plane addresses (host:port), one per network.
	// Empty means "127.0.0.1:0", loopback on a free port.
	Listen []string
	// Advertise are the addresses registered with the servers, one per
	// network. Empty means the addresses actually listened on, which then
	// must name a host (not 0.0.0.0 or ::).
	Advertise []string
	// Threads is how many units the worker runs at once, the threads it
	// lends. Zero means the number of CPUs.
	Threads int
	// Ops are the operations the worker runs. Nil means ops.Builtin().
	Ops *ops.Registry
	// Modules says which user operations (WebAssembly modules) the worker
	// runs: nil means every one; an empty slice none; otherwise the
	// operations so named.
	Modules []string
	// ModuleDir keeps the modules the worker downloaded and their
	// compiled code, across restarts. Empty means a temporary directory,
	// removed when Run returns.
	ModuleDir string
	// ModuleCache bounds the bytes of modules kept in ModuleDir; the
	// least recently used go first. Zero means 1 GiB.
	ModuleCache int64
	// MaxModule bounds the size of a module the worker downloads. Zero
	// means 64 MiB.
	MaxModule int64
	// MaxUnitMem bounds the memory a unit of a user operation may ask for
	// (a job's unit_mem, which counts its linear memory and tables): a
	// unit asking more fails, naming both. Zero means a quarter of the
	// host's RAM, or of the worker's cgroup memory limit where that is
	// smaller (cgroup v2 memory.max, v1 memory.limit_in_bytes, of the
	// cgroup /proc/self/cgroup names and its ancestors), divided by
	// Threads, less wasm.StackReserve (1 GiB per thread if neither is
	// known), at least wasm.DefaultMemory and at most wasm.MaxMemory.
	MaxUnitMem int64
	// CompiledCache bounds the machine code of the compiled modules kept
	// in memory, as wasm.Config.MaxCompiledBytes estimates it (a module
	// at the limits keeps some 140 MB, outside the Go heap); the least
	// recently used go first, and are compiled again (from ModuleDir's
	// compiled code) when next used. Zero means a quarter of the memory
	// MaxUnitMem's default divides (the host's RAM, or the worker's cgroup
	// limit where smaller), at least 256 MiB; 1 GiB if neither is known.
	CompiledCache int64
	// Name labels the worker in listings. Empty means the host name.
	Name string
	// Dir is where free disk space is measured. Empty means the system's
	// temporary directory.
	Dir string
	// Transport configures the listener. Its Key and a nil Logger are set
	// from this Config. Nil means the transport's defaults.
	Transport *transport.Config
	// FiguresInterval is how often the worker re-measures its figures and
	// announces them if they changed. Zero means 30s.
	FiguresInterval time.Duration
	// RetryInterval is the first delay before registering again after a
	// failure; it doubles up to 5s. Zero means 200ms.
	RetryInterval time.Duration
	// HTTPClient sends the control API requests. Nil means a default
	// client.
	HTTPClient *http.Client
	// Logger receives lifecycle events. Nil means slog.Default().
	Logger *slog.Logger
}

func (c *Config) populate() error {
	if len(c.Servers) == 0 {
		return errors.New("worker: no server to register with (braid worker --server URL)")
	}
	if len(c.Key) == 0 {
		return errors.New("worker: Config.Key is empty: set the cluster key (BRAID_KEY or --key-file)")
	}
	if c.Threads < 0 {
		return errors.New("worker: Threads must not be negative (0 means one per CPU)")
	}
	if len(c.Listen) == 0 {
		c.Listen = []string{"127.0.0.1:0"}
	}
	if c.Threads == 0 {
		c.Threads = runtime.NumCPU()
	}
	if c.Ops == nil {
		c.Ops = ops.Builtin()
	}
	if c.Name == "" {
		c.Name, _ = os.Hostname()
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.ModuleCache <= 0 {
		c.ModuleCache = 1 << 30
	}
	if c.MaxModule <= 0 {
		c.MaxModule = 64 << 20
	}
	if c.MaxUnitMem < 0 {
		return errors.New("worker: MaxUnitMem must not be negative (0 means a quarter of the RAM per thread)")
	}
	if c.MaxUnitMem == 0 {
		c.MaxUnitMem = defaultMaxUnitMem(unitRAM(memTotal()), c.Threads)
	}
	c.MaxUnitMem = min(c.MaxUnitMem, wasm.MaxMemory)
	if c.CompiledCache < 0 {
		return errors.New("worker: CompiledCache must not be negative (0 means a quarter of the RAM)")
	}
	if c.CompiledCache == 0 {
		c.CompiledCache = defaultCompiledCache(unitRAM(memTotal()))
	}
	if c.FiguresInterval <= 0 {
		c.FiguresInterval = 30 * time.Second
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = 200 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
