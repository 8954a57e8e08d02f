package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/outfile"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/worker"
)

func init() {
	register(&command{
		name:    "local",
		summary: "run an embedded cluster on this machine and blur a sample image",
		run:     runLocal,
	})
}

const localDescription = `
Starts an embedded cluster in this process, on loopback: a server and two
workers, with the data in a temporary directory (or --data). It draws a
sample image (--size pixels square), uploads it, runs a blur job in
256x256 tiles over the workers' streams, writes the output PNG (-o),
checks it against the same blur computed as one unit here, and prints what
happened: workers, streams, units, units per worker, time and throughput.
The exit code is 0 only if the output is right.

Per worker it prints the units whose result it delivered first, the
other tries it computed (copies whose result came second: the dynamic
policy sends idle threads backup copies of the last units), and the
share of its lent time it spent computing: the compute time of all its
tries over its threads times the time it had units in flight. A worker
that computed nothing shows 0%.

The cluster key comes from BRAID_KEY or --key-file; without either a
random key is made for the run.

  go run ./cmd/braid local
  braid local --size 4096 --tile 512x512 -o big.png

With --op FILE.wasm it runs your own operation instead (docs/ops.md): the
module is uploaded to the embedded server, --input FILE is split with
--split, every unit runs on the workers, the outputs are merged with
--merge and written to -o. A reduce merge may name another module file.
An --input DIR is a dataset of its files: the operation maps over every
file and the merge joins them all (a reduce: in a tree).

  braid local --op wordcount.wasm --input book.txt --split lines:64K \
      --merge reduce:sumcounts.wasm -o counts.txt
  braid local --op boxblur.wasm --input photo.png --split tiles:256x256+2 --param RADIUS=2 -o out.png`

// localReport is what braid local prints with --json.
type localReport struct {
	Server    string             `json:"server"`
	Data      string             `json:"data"`
	Workers   []localWorker      `json:"workers"`
	Streams   int                `json:"streams"`
	Job       uint64             `json:"job"`
	State     api.JobState       `json:"state"`
	Op        string             `json:"op"`
	Image     string             `json:"image"`
	Tile      string             `json:"tile"`
	Policy    string             `json:"policy"`
	Units     int                `json:"units"`
	Elapsed   float64            `json:"elapsed_s"`
	Compute   float64            `json:"compute_s"`
	UnitsPerS float64            `json:"units_per_s"`
	MPixPerS  float64            `json:"mpixel_per_s"`
	Output    string             `json:"output"`
	File      string             `json:"file"`
	Verified  bool               `json:"verified"`
	Error     string             `json:"error,omitempty"`
	PerWorker map[string]float64 `json:"-"`
}

type localWorker struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Threads int    `json:"threads"`
	// Units counts the units whose result this worker delivered first
	// (api.WorkerInfo.Done).
	Units uint64 `json:"units"`
	// Tries counts the tries it computed (api.WorkerInfo.Tries): its
	// units, and its copies whose results came second (dynamic policy's
	// backup copies), which count toward Computing but not Units.
	Tries uint64 `json:"tries"`
	// Computing is the share of its lent thread time the worker spent
	// computing its tries while it had units in flight
	// (api.WorkerInfo.ComputeFraction); 0 for a worker that computed no
	// try.
	Computing float64 `json:"computing"`
}

func runLocal(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "local", "[flags]", localDescription)
	size := fs.Int("size", 2048, "width and height of the sample image: `n` pixels")
	var tile api.Tile
	tile.W, tile.H = 256, 256
	fs.Var(tileFlag{&tile}, "tile", "tile size `wxh` of the blur job")
	radius := fs.Int("radius", 5, "blur radius: `n` pixels")
	out := fs.StringP("output", "o", "braid-local-out.png", "write the output image to this `file`; an existing one is replaced only if it is the default's or with --force")
	force := fs.Bool("force", false, "replace an existing output file given with -o")
	data := fs.String("data", "", "keep the cluster's data in this `directory` (default: a temporary one, removed after)")
	nWorkers := fs.Int("workers", 2, "run `n` workers")
	threads := fs.Int("threads", 0, "each worker lends `n` threads (default: half the CPUs, at least 1)")
	policy := fs.String("policy", api.PolicyDynamic, "scheduling `policy`: equal, proportional or dynamic")
	withChoices(fs, "policy", api.PolicyEqual, api.PolicyProportional, api.PolicyDynamic)
	asJSON := fs.Bool("json", false, "print one JSON object instead of text")
	module := fs.String("op", "", "run this WebAssembly module `file.wasm` instead of the blur (with --input)")
	input := fs.String("input", "", "the input `file` of --op; a directory is a dataset of its files")
	split := fs.String("split", "", "with --op: the `split` that cuts the input into units (whole, bytes:SIZE, lines:SIZE, tiles:WxH[+HALO])")
	merge := fs.String("merge", "", "with --op: the `merge` that joins the units' outputs (concat, tiles, reduce:OP or reduce:FILE.wasm)")
	params := paramFlag{}
	fs.Var(params, "param", "with --op: a parameter `name=value` of the module (repeatable)")
	keyPath := fs.String("key-file", "", "read the cluster key from this `file` (default: BRAID_KEY, else a random key)")
	logger := logFlags(fs)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		env.Errorf("local: unexpected argument %q", fs.Arg(0))
		return 2
	}
	switch {
	case *size < 1 || *size > 16384:
		env.Errorf("local: --size %d: want 1 to 16384", *size)
		return 2
	case *nWorkers < 1 || *nWorkers > 16:
		env.Errorf("local: --workers %d: want 1 to 16", *nWorkers)
		return 2
	case *threads < 0:
		env.Errorf("local: --threads must not be negative")
		return 2
	}
	if *threads == 0 {
		*threads = max(runtime.NumCPU()/2, 1)
	}
	if (*module == "") != (*input == "") {
		env.Errorf("local: give --op FILE.wasm and --input FILE together")
		return 2
	}
	if *module == "" && (*split != "" || *merge != "" || len(params) > 0) {
		env.Errorf("local: --split, --merge and --param go with --op FILE.wasm")
		return 2
	}
	if *module != "" && *out == "braid-local-out.png" {
		*out = "braid-local-out"
	}
	// The default output is this command's own: each run replaces the
	// last one's. A file named with -o is the user's.
	replace := *force || !fs.Changed("output")
	if !replace {
		if err := outfile.CheckFree(*out); err != nil {
			env.Errorf("local: %v", forceHint("local", err))
			return 1
		}
	}
	key, generated, err := localKey(*keyPath)
	if err != nil {
		env.Errorf("local: %v", err)
		return 2
	}
	l := &localRun{env: env, log: logger(env), key: key, nWorkers: *nWorkers, threads: *threads}
	if generated {
		l.note("no BRAID_KEY or --key-file: using a random cluster key for this run")
	}
	rep, err := l.run(ctx, *data, localJob{size: *size, tile: tile, radius: *radius, policy: *policy, out: *out, replace: replace,
		module: *module, input: *input, split: *split, merge: *merge, params: params})
	if rep != nil && *asJSON {
		if err != nil {
			rep.Error = err.Error()
		}
		jsonLine(env.Stdout, rep)
	} else if rep != nil {
		rep.print(env.Stdout)
	}
	if err != nil {
		env.Errorf("local: %v", err)
		return 1
	}
	return 0
}

// localKey returns the cluster key from the file or BRAID_KEY, else a
// random one (generated true).
func localKey(path string) ([]byte, bool, error) {
	if path == "" && strings.TrimSpace(os.Getenv("BRAID_KEY")) == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, false, err
		}
		return []byte(hex.EncodeToString(b)), true, nil
	}
	k, err := loadKey(path)
	return k, false, err
}

type localJob struct {
	size   int
	tile   api.Tile
	radius int
	policy string
	out    string
	// replace lets the output replace an existing file.
	replace bool
	// module, input, split, merge and params: a user operation's job
	// instead of the blur.
	module, input, split, merge string
	params                      map[string]string
}

// localRun is one run of braid local.
type localRun struct {
	env      *Env
	log      *slog.Logger
	key      []byte
	nWorkers int
	threads  int
}

func (l *localRun) note(format string, args ...any) {
	fmt.Fprintf(l.env.Stderr, "braid local: "+format+"\n", args...)
}

// quiet returns the logger for the embedded roles: warnings and errors
// only, unless -V.
func (l *localRun) quiet() *slog.Logger {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		return l.log
	}
	return slog.New(slog.NewTextHandler(l.env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func (l *localRun) run(ctx context.Context, dataDir string, job localJob) (*localReport, error) {
	if dataDir == "" {
		dir, err := os.MkdirTemp("", "braid-local-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		dataDir = dir
	}
	logger := l.quiet()
	srv, err := server.New(server.Config{Listen: "127.0.0.1:0", Data: filepath.Join(dataDir, "server"), Key: l.key, Logger: logger})
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	wg.Go(func() {
		if err := srv.Run(runCtx); err != nil {
			l.note("server: %v", err)
		}
	})
	rep := &localReport{Server: srv.URL(), Data: dataDir, Op: "blur", Tile: job.tile.String(), Policy: job.policy,
		Image: fmt.Sprintf("%dx%d PNG", job.size, job.size), File: job.out}
	workers := make([]*worker.Worker, l.nWorkers)
	errs := make(chan error, l.nWorkers)
	for i := range workers {
		w, err := worker.New(worker.Config{Servers: []string{srv.URL()}, Key: l.key, Threads: l.threads,
			Listen: []string{"127.0.0.1:0"}, Name: fmt.Sprintf("local-%d", i+1), Logger: logger})
		if err != nil {
			return rep, err
		}
		workers[i] = w
		wg.Go(func() {
			if err := w.Run(runCtx); err != nil {
				errs <- err
			}
		})
	}
	c := client.New(srv.URL(), client.WithKey(l.key))
	if err := l.waitWorkers(ctx, c, errs); err != nil {
		return rep, err
	}

	if job.module != "" {
		return l.runModule(ctx, c, rep, job)
	}
	img := ops.SamplePNG(job.size, job.size)
	in, err := c.Put(ctx, bytes.NewReader(img))
	if err != nil {
		return rep, err
	}
	params := map[string]string{"radius": fmt.Sprint(job.radius)}
	start := time.Now()
	st, err := c.Submit(ctx, api.JobRequest{Op: "blur", Input: in, Params: params, Tile: job.tile, Policy: job.policy})
	if err != nil {
		return rep, err
	}
	rep.Job = st.Job
	bar := newUnitsBar(l.env.Stderr)
	st, err = c.Wait(ctx, st.Job, bar.update)
	bar.finish()
	elapsed := time.Since(start)
	if err != nil {
		return rep, err
	}
	rep.MPixPerS = float64(job.size) * float64(job.size) / 1e6 / elapsed.Seconds()
	got, err := l.output(ctx, c, rep, st, elapsed, job.out, job.replace)
	if err != nil {
		return rep, err
	}
	want, err := ops.Execute(ctx, ops.Blur(), bytes.NewReader(img), int64(len(img)), params, ops.Hint{}, 1)
	if err != nil {
		return rep, fmt.Errorf("compute the single-unit reference: %w", err)
	}
	if !bytes.Equal(got, want) {
		return rep, fmt.Errorf("the output (%d bytes) differs from the single-unit blur of the same image (%d bytes)", len(got), len(want))
	}
	rep.Verified = true
	return rep, nil
}

// waitWorkers waits until every worker registered, or one failed.
func (l *localRun) waitWorkers(ctx context.Context, c *client.Client, errs <-chan error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		h, err := c.Health(ctx)
		if err == nil && h.Workers == l.nWorkers {
			return nil
		}
		select {
		case err := <-errs:
			return fmt.Errorf("a worker failed: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("the workers did not register within 15s")
		}
	}
}

func (r *localReport) print(w io.Writer) {
	fmt.Fprintf(w, "braid local: embedded cluster on loopback, data in %s\n", r.Data)
	fmt.Fprintf(w, "  server      %s\n", r.Server)
	for _, wk := range r.Workers {
		fmt.Fprintf(w, "  worker %-4s data plane %s, %s\n", wk.ID, wk.Address, plural(wk.Threads, "thread", "threads"))
	}
	if r.Job == 0 {
		return
	}
	if r.Op != "blur" {
		split := r.Tile
		if split == "" {
			split = "the operation's split"
		}
		fmt.Fprintf(w, "job %d: module %s on %s, %s, %s policy: %s\n", r.Job, r.Op, r.Image, split, r.Policy, r.State)
	} else {
		fmt.Fprintf(w, "job %d: blur of a %s in %s tiles, %s policy: %s\n", r.Job, r.Image, r.Tile, r.Policy, r.State)
	}
	fmt.Fprintf(w, "  units       %d over %d streams (one per lent thread)\n", r.Units, r.Streams)
	var per []string
	other := false
	for _, wk := range r.Workers {
		s := fmt.Sprintf("%s %s", wk.ID, plural(int(wk.Units), "unit", "units"))
		if wk.Tries > wk.Units {
			s += fmt.Sprintf(" + %s", plural(int(wk.Tries-wk.Units), "other try", "other tries"))
			other = true
		}
		per = append(per, fmt.Sprintf("%s (computing %.0f%% of its lent time)", s, 100*wk.Computing))
	}
	fmt.Fprintf(w, "  per worker  %s\n", strings.Join(per, ", "))
	if other {
		// A worker can compute without being credited a unit: say so
		// where it happened, lest "0 units (computing 40%)" look wrong.
		fmt.Fprintln(w, "              (units: results delivered first; other tries: computed, but another copy's\n"+
			"              result came first (dynamic policy's backup copies) or it failed; computing: the\n"+
			"              compute time of all its tries over its threads' time with units in flight)")
	}
	fmt.Fprintf(w, "  elapsed     %.3fs from submission to output (compute %.3fs in the workers)\n", r.Elapsed, r.Compute)
	if r.Op != "blur" {
		fmt.Fprintf(w, "  throughput  %.1f units/s\n", r.UnitsPerS)
		if r.State == api.JobDone {
			fmt.Fprintf(w, "output: %s (blob %s)\n", r.File, r.Output[:12])
		}
		return
	}
	fmt.Fprintf(w, "  throughput  %.1f units/s, %.2f Mpixel/s\n", r.UnitsPerS, r.MPixPerS)
	if r.Verified {
		fmt.Fprintf(w, "output: %s (blob %s), identical to the single-unit blur\n", r.File, r.Output[:12])
	}
}

// runModule runs a user operation's job on the embedded cluster.
func (l *localRun) runModule(ctx context.Context, c *client.Client, rep *localReport, job localJob) (*localReport, error) {
	add := func(path string) (string, error) {
		code, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		name := strings.Map(func(r rune) rune {
			if r == '-' || r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
				return r
			}
			return '_'
		}, strings.TrimSuffix(filepath.Base(path), ".wasm"))
		if name == "" || !('a' <= name[0] && name[0] <= 'z' || 'A' <= name[0] && name[0] <= 'Z') {
			name = "op" + name
		}
		if _, err := ops.Builtin().Lookup(name); err == nil {
			name = "user-" + name
		}
		if _, err := c.AddOp(ctx, name, bytes.NewReader(code), client.OpOptions{}); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return name, nil
	}
	name, err := add(job.module)
	if err != nil {
		return rep, err
	}
	merge := job.merge
	if r, ok := strings.CutPrefix(merge, "reduce:"); ok && strings.HasSuffix(r, ".wasm") {
		rname, err := add(r)
		if err != nil {
			return rep, err
		}
		merge = "reduce:" + rname
	}
	var in string
	if fi, err := os.Stat(job.input); err == nil && fi.IsDir() {
		// A directory is a dataset: the job maps over its files.
		files, err := datasetFiles([]string{job.input})
		if err != nil {
			return rep, err
		}
		info, err := putDataset(ctx, c, files)
		if err != nil {
			return rep, err
		}
		in = info.ID
	} else {
		f, err := os.Open(job.input)
		if err != nil {
			return rep, err
		}
		in, err = c.Put(ctx, f)
		f.Close()
		if err != nil {
			return rep, err
		}
	}
	rep.Op, rep.Image, rep.Tile = name, job.input, job.split
	start := time.Now()
	st, err := c.Submit(ctx, api.JobRequest{Op: name, Input: in, Params: job.params, Split: job.split, Merge: merge, Policy: job.policy})
	if err != nil {
		return rep, err
	}
	rep.Job = st.Job
	bar := newUnitsBar(l.env.Stderr)
	st, err = c.Wait(ctx, st.Job, bar.update)
	bar.finish()
	elapsed := time.Since(start)
	if err != nil {
		return rep, err
	}
	_, err = l.output(ctx, c, rep, st, elapsed, job.out, job.replace)
	return rep, err
}

// output fills rep from the finished job st and the workers, and writes
// the job's output to file (replacing one there only if replace is set),
// which it returns.
func (l *localRun) output(ctx context.Context, c *client.Client, rep *localReport, st api.JobStatus, elapsed time.Duration, file string, replace bool) ([]byte, error) {
	rep.State, rep.Units, rep.Output = st.State, st.Units.Total, st.Output
	rep.Elapsed = elapsed.Seconds()
	rep.Compute = time.Duration(st.Timings.ComputeNanos).Seconds()
	rep.UnitsPerS = float64(st.Units.Total) / elapsed.Seconds()
	ws, err := c.Workers(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		rep.Workers = append(rep.Workers, localWorker{ID: w.ID, Address: strings.Join(w.Addresses, ","), Threads: w.Threads, Units: w.Done,
			Tries: w.Tries, Computing: w.ComputeFraction()})
		rep.Streams += w.Threads
	}
	if st.State != api.JobDone {
		return nil, fmt.Errorf("job %d %s: %s", st.Job, st.State, st.Error)
	}
	var got bytes.Buffer
	if _, err := c.Get(ctx, st.Output, &got); err != nil {
		return nil, err
	}
	if err := outfile.WriteAtomic(file, got.Bytes(), replace); err != nil {
		return nil, forceHint("local", err)
	}
	return got.Bytes(), nil
}
