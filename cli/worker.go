package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/transport"
	"github.com/braid-hpc/braid/worker"

	"github.com/spf13/pflag"
)

func init() {
	register(&command{
		name:    "worker",
		summary: "run a worker: register with servers and run their units",
		run:     runWorker,
	})
}

const workerDescription = `
Runs a braid worker. It listens on one data-plane address per network
(--listen), registers with every --server (its addresses, cores, memory,
free disk, CPU MHz, the threads it lends and its operations). Each
server dials a session to it over every address and opens one stream per
lent thread; the worker runs the units that arrive, at most --threads at
once, and sends each result back on its unit's stream. The cluster key
authenticates the servers before any unit is read. Each server asks the
worker for its heartbeat on that session; to a server that does not ask
(an older one, or while the session is down) the worker sends its
heartbeats over HTTPS.

The worker runs until interrupted, then deregisters. It exits with an
error if every server rejects it (for instance a different cluster key).

With the cluster key alone the worker checks the server's certificate by
the server's proof of the key, and its control API requests are an
admin's. With --token (a worker token, from braid token create --role
worker) they are a worker's: it can register and fetch modules, not
submit jobs or read other blobs.

  braid worker --server https://10.0.0.1:7400 --threads 8 \
      --listen 10.1.0.5:7420,10.2.0.5:7420`

func runWorker(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "worker", "--server URL[,URL...] --threads N --listen ADDR[,ADDR...] [flags]", workerDescription)
	servers := fs.String("server", "", "base `urls` of the servers to register with, comma-separated (default: $BRAID_SERVER)")
	threads := fs.Int("threads", runtime.NumCPU(), "lend `n` processing threads: units run at once")
	listen := fs.String("listen", "127.0.0.1:0", "data-plane `addresses` (host:port), one per network, comma-separated")
	advertise := fs.String("advertise", "", "`addresses` to register instead of the --listen ones (e.g. behind NAT)")
	opsList := fs.String("ops", "", "offer only these `operations`, comma-separated: built-in ones, user operations by name, "+
		"and wasm for every user operation (default: all)")
	moduleDir := fs.String("module-dir", defaultModuleDir(), "keep downloaded modules and their compiled code in this `directory`")
	moduleCache := sizeFlag(fs, "module-cache", "1G", 1, 0, "512M or 4G", "bound the modules kept in --module-dir to this `size`")
	maxUnitMem := sizeFlag(fs, "max-unit-mem", "", 64<<10, 0, "512M or 2G, at least 64K", "the most memory (linear memory and tables) a unit of a user operation may ask for, a `size` such as 512M; "+
		"a job asking more fails (default: a quarter of the RAM, or of the worker's cgroup memory limit if smaller, divided by --threads, less 136M for the unit's call stack, at least 256M)")
	compiledCache := sizeFlag(fs, "compiled-cache", "", 1<<20, 0, "256M or 1G, at least 1M", "bound the compiled modules kept in memory (their machine code, as estimated from their size) to this `size`; "+
		"the least recently used are compiled again when next used (default: a quarter of the RAM, or of the worker's cgroup memory limit if smaller, at least 256M)")
	name := fs.String("name", "", "`name` in listings (default: the host name)")
	chanKind := fs.String("transport", "tcp", "channel `kind` of the data plane: tcp, mptcp, sctp or sctp-udp (the server must dial with the same)")
	withChoices(fs, "transport", channelKinds...)
	probe := pathProbeFlag(fs)
	plain := plaintextFlag(fs)
	sctp := addSCTPFlags(fs)
	auth := addControlFlags(fs)
	logger := logFlags(fs)
	configFlag(fs)
	obs := addObsFlags(fs, "worker")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		env.Errorf("worker: unexpected argument %q", fs.Arg(0))
		return 2
	}
	urls := splitList(*servers)
	if len(urls) == 0 {
		urls = splitList(getenv("BRAID_SERVER"))
	}
	if len(urls) == 0 {
		env.Errorf("worker: give the servers to register with: --server URL[,URL...] (or set BRAID_SERVER)")
		return 2
	}
	if *threads < 1 {
		env.Errorf("worker: --threads must be at least 1")
		return 2
	}
	a, err := auth.resolve(true)
	if err != nil {
		env.Errorf("worker: %v", err)
		return 2
	}
	ch, err := sctp.channel(*chanKind)
	if err != nil {
		env.Errorf("worker: %v", err)
		return 2
	}
	reg := ops.Builtin()
	var modules []string // nil: every user operation
	if *opsList != "" {
		var builtin []string
		modules = []string{}
		for _, n := range splitList(*opsList) {
			switch _, err := reg.Lookup(n); {
			case err == nil:
				builtin = append(builtin, n)
			case n == api.ModuleOps:
				modules = nil
			case modules != nil:
				modules = append(modules, n)
			}
		}
		if reg, err = reg.Subset(builtin...); err != nil {
			env.Errorf("worker: --ops: %v", err)
			return 2
		}
	}
	cacheSize, unitMem := moduleCache.Bytes(), maxUnitMem.Bytes()
	// GOMAXPROCS stays Go's default (the CPUs this process may use). An
	// extra P for the data plane while every lent thread computes was
	// tried: on 2 cores it made the paper's blur jobs 10-15% slower and
	// only added kernel time-slicing to the units' measured compute time
	// (docs/benchmarks.md, compute fraction).
	log := logger(env)
	w, err := worker.New(worker.Config{
		Servers: urls, Key: a.key, Token: a.token, Fingerprint: a.fingerprint, InsecureHTTP: a.insecure, Listen: splitList(*listen), Advertise: splitList(*advertise), Threads: *threads,
		Ops: reg, Modules: modules, ModuleDir: *moduleDir, ModuleCache: cacheSize, MaxUnitMem: unitMem, CompiledCache: compiledCache.Bytes(), Name: *name, Logger: log,
		Transport: probe(&transport.Config{Transport: *chanKind, Channel: ch, InsecurePlaintext: *plain}),
	})
	if err != nil {
		env.Errorf("%v", err)
		return 2
	}
	fmt.Fprintf(env.Stdout, "braid worker: data plane on %s, lending %s to %s\n",
		strings.Join(w.Addrs(), ","), plural(*threads, "thread", "threads"), strings.Join(urls, ","))
	stop, err := obs.start(log, w.MetricsHandler())
	if err != nil {
		env.Errorf("worker: %v", err)
		return 1
	}
	defer stop()
	if err := w.Run(ctx); err != nil {
		env.Errorf("worker: %v", err)
		return 1
	}
	return 0
}

// defaultModuleDir is where a worker keeps modules: the user's cache
// directory, or none (a temporary one) if there is no such directory.
func defaultModuleDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "braid", "modules")
}

func getenv(name string) string { return strings.TrimSpace(os.Getenv(name)) }

// pathProbeFlag adds --path-probe, how often each data-plane path is
// probed, and returns what sets it in a transport configuration: a path
// is down after five probes' silence. A cluster of hundreds of workers
// probes less often (1s): every session's paths are probed at both ends.
func pathProbeFlag(fs *pflag.FlagSet) func(*transport.Config) *transport.Config {
	d := fs.Duration("path-probe", 0, "how often each data-plane path is looked after (default 100ms): a path is down after 5 of these "+
		"without a frame from the peer; a path sending data is probed each time, an idle one once it has heard nothing for 1.25 of them. "+
		"1s suits clusters of hundreds of workers, which then notice a dead path in 5s")
	return func(c *transport.Config) *transport.Config {
		if *d > 0 {
			c.HeartbeatInterval, c.PathTimeout = *d, 5**d
		}
		return c
	}
}
