package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/outfile"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/wasm"

	"github.com/spf13/pflag"
)

func init() {
	register(&command{
		name:    "op",
		summary: "add, rm or run a user operation (a WebAssembly module)",
		run:     runOp,
		subs:    []string{"add", "rm", "run"},
	})
}

const opDescription = `
Manages user operations: WebAssembly (WASI preview 1) command modules that
read a unit's input on stdin, write its output on stdout and exit 0; job
parameters arrive as environment variables. docs/ops.md walks through
writing one in Go or C.

  braid op add NAME FILE.wasm [flags]   upload a module as operation NAME
                                         (again: a new version; jobs keep theirs)
  braid op rm NAME                      remove operation NAME
  braid op run FILE.wasm [flags]        run a module here, as a worker would:
                                         stdin (or --in) to stdout (or -o)

Run 'braid op add --help' or 'braid op run --help' for their flags;
'braid ops' lists the operations of a server.`

func runOp(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(env.Stderr, "Usage: braid op add|rm|run ...")
		fmt.Fprintln(env.Stderr, strings.TrimSpace(opDescription))
		return 2
	}
	switch args[0] {
	case "add":
		return runOpAdd(ctx, env, args[1:])
	case "rm", "remove":
		return runOpRm(ctx, env, args[1:])
	case "run":
		return runOpRun(ctx, env, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(env.Stdout, "Usage: braid op add|rm|run ...")
		fmt.Fprintln(env.Stdout, strings.TrimSpace(opDescription))
		return 0
	}
	return unknownSubcommand(env, "op", args[0])
}

func runOpAdd(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "op add", "NAME FILE.wasm [flags]", `
Uploads the WebAssembly module FILE.wasm as operation NAME. The server
checks that it is a WASI preview 1 command module and stores it by its
sha256. Adding a NAME again makes a new version: new jobs run it, jobs
already submitted keep the version they were submitted with. Prints the
operation's version and hash.

  braid op add wordcount wordcount.wasm --split lines:1M --merge reduce:sumcounts
  braid op add boxblur boxblur.wasm --split tiles:256x256+4 --param RADIUS=2`)
	split := fs.String("split", "", "default `split` of its jobs: whole, bytes:SIZE, lines:SIZE or tiles:WxH[+HALO]")
	merge := fs.String("merge", "", "default `merge` of its jobs: concat, tiles or reduce:OP")
	doc := fs.String("describe", "", "a one-line `text` for 'braid ops'")
	params := paramFlag{}
	fs.Var(params, "param", "declare a parameter `name=default` (repeatable); with none declared, jobs may pass any")
	cf := addClientFlags(fs, 5*time.Minute)
	pos, code := parseInterspersed(env, fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) != 2 {
		env.Errorf("op add: want NAME and FILE.wasm, got %d arguments (braid op add --help)", len(pos))
		return 2
	}
	name, path := pos[0], pos[1]
	if *split != "" {
		if _, err := ops.ParseSplit(*split); err != nil {
			env.Errorf("op add: --split: %s", ops.Message(err))
			return 2
		}
	}
	if *merge != "" {
		if _, err := ops.ParseMerge(*merge); err != nil {
			env.Errorf("op add: --merge: %s", ops.Message(err))
			return 2
		}
	}
	code2, err := os.ReadFile(path)
	if err != nil {
		env.Errorf("op add: %v", err)
		return 1
	}
	if err := wasm.Validate(ctx, code2); err != nil {
		env.Errorf("op add: %s: %v", path, err)
		return 1
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("op add: %v", err)
		return 2
	}
	defer cancel()
	info, err := c.AddOp(ctx, name, bytes.NewReader(code2), client.OpOptions{Doc: *doc, Split: *split, Merge: *merge, Params: params})
	if err != nil {
		return clientFail(env, "op add", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, info)
		return 0
	}
	fmt.Fprintf(env.Stdout, "%s version %d: sha256 %s, %s\n", info.Name, info.Version, info.Hash, formatBytes(info.Size))
	return 0
}

func runOpRm(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "op rm", "NAME [flags]", `
Removes operation NAME: it is no longer listed or offered to new jobs.
Jobs already submitted keep running its module.`)
	cf := addClientFlags(fs, 30*time.Second)
	name, code := oneArg(env, fs, args, "operation NAME")
	if code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("op rm: %v", err)
		return 2
	}
	defer cancel()
	if err := c.RemoveOp(ctx, name); err != nil {
		return clientFail(env, "op rm", err)
	}
	if *cf.json {
		jsonLine(env.Stdout, map[string]any{"removed": name})
	} else {
		fmt.Fprintf(env.Stderr, "braid: removed operation %s\n", name)
	}
	return 0
}

func runOpRun(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "op run", "FILE.wasm [flags] < INPUT > OUTPUT", `
Runs the module FILE.wasm on this machine exactly as a worker would: the
same runtime, sandbox and limits, the input on stdin, each --param as an
environment variable. The output goes to stdout; a failure (non-zero
exit, trap, time-out, memory or output beyond the limits) is reported
with the tail of the module's stderr, and the exit code is 1.

With --split (and --merge), the input is split into units as a job would
be, every unit runs (--parallel at once) and the outputs are merged: the
whole job, locally. A reduce merge names a built-in operation or another
module file: --merge reduce:sumcounts.wasm.

  braid op run wordcount.wasm < words.txt
  braid op run wordcount.wasm --split lines:64K --merge reduce:sumcounts.wasm --in big.txt
  braid op run boxblur.wasm --split tiles:256x256+2 --param RADIUS=2 --in photo.png -o out.png`)
	in := fs.String("in", "", "read the input from this `file` (default: stdin)")
	out := fs.StringP("output", "o", "", "write the output to this `file` (default: stdout)")
	force := fs.Bool("force", false, "replace an existing output file")
	params := paramFlag{}
	fs.Var(params, "param", "a parameter `name=value`, the module's environment (repeatable)")
	split := fs.String("split", "", "the `split` that cuts the input into units: whole, bytes:SIZE, lines:SIZE or tiles:WxH[+HALO]")
	merge := fs.String("merge", "", "the `merge` that joins the units' outputs: concat, tiles or reduce:OP")
	parallel := fs.IntP("parallel", "P", runtime.NumCPU(), "run `n` units at once with --split")
	lim := addLimitFlags(fs)
	asJSON := fs.Bool("json", false, "print a JSON report on stderr instead of text")
	pos, code := parseInterspersed(env, fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) != 1 {
		env.Errorf("op run: want one FILE.wasm, got %d arguments (braid op run --help)", len(pos))
		return 2
	}
	limits, err := lim.limits()
	if err != nil {
		env.Errorf("op run: %v", err)
		return 2
	}
	if *out != "" && *out != "-" && !*force {
		if err := outfile.CheckFree(*out); err != nil {
			env.Errorf("op run: %v", forceHint("op run", err))
			return 1
		}
	}
	var sp ops.Split
	var mg ops.Merge
	if *split != "" {
		if sp, err = ops.ParseSplit(*split); err != nil {
			env.Errorf("op run: --split: %s", ops.Message(err))
			return 2
		}
	}
	if *merge != "" {
		if mg, err = ops.ParseMerge(*merge); err != nil {
			env.Errorf("op run: --merge: %s", ops.Message(err))
			return 2
		}
	}
	engine, err := wasm.NewEngine(wasm.Config{})
	if err != nil {
		env.Errorf("op run: %v", err)
		return 1
	}
	defer engine.Close()
	main, err := loadModuleOp(ctx, engine, pos[0], limits)
	if err != nil {
		env.Errorf("op run: %v", err)
		return 1
	}
	var input []byte
	if *in != "" {
		input, err = os.ReadFile(*in)
	} else {
		input, err = io.ReadAll(os.Stdin)
	}
	if err != nil {
		env.Errorf("op run: read the input: %v", err)
		return 1
	}
	start := time.Now()
	var output []byte
	units := 1
	if sp.IsZero() && mg.IsZero() {
		output, err = main.Run(ctx, params, [][]byte{input})
	} else {
		var reduce ops.Op
		if mg.Kind == ops.MergeReduce {
			if reduce, err = localOp(ctx, engine, mg.Op, limits); err != nil {
				env.Errorf("op run: --merge: %v", err)
				return 2
			}
		}
		var p ops.Op
		if p, err = ops.Planned(main, sp, mg, reduce); err == nil {
			var specs []ops.UnitSpec
			if specs, err = p.Split(bytes.NewReader(input), int64(len(input)), params, ops.Hint{}); err == nil {
				units = len(specs)
				var results [][]byte
				if results, err = ops.RunUnits(ctx, p, bytes.NewReader(input), specs, *parallel); err == nil {
					output, err = p.Assemble(params, ops.Hint{}, results)
				}
			}
		}
	}
	elapsed := time.Since(start)
	if err != nil {
		env.Errorf("op run: %s", ops.Message(err))
		return 1
	}
	if *out != "" && *out != "-" {
		err = forceHint("op run", outfile.WriteAtomic(*out, output, *force))
	} else {
		_, err = env.Stdout.Write(output)
	}
	if err != nil {
		env.Errorf("op run: write the output: %v", err)
		return 1
	}
	if *asJSON {
		jsonLine(env.Stderr, map[string]any{"module": main.mod.Hash(), "units": units, "input_bytes": len(input),
			"output_bytes": len(output), "elapsed_s": elapsed.Seconds()})
	} else if *out != "" || units > 1 {
		fmt.Fprintf(env.Stderr, "braid: %s: %d units, %s in, %s out, %v\n", main.name, units, formatBytes(int64(len(input))),
			formatBytes(int64(len(output))), elapsed.Round(time.Millisecond))
	}
	return 0
}

// limitFlags are the per-unit limits of a module.
type limitFlags struct {
	mem, output *sizeValue
	timeout     *time.Duration
}

func addLimitFlags(fs *pflag.FlagSet) *limitFlags {
	return &limitFlags{
		mem: sizeFlag(fs, "unit-mem", "", 64<<10, wasm.MaxMemory, "256M (64K to 4G)",
			"memory limit of a module's unit, a `size` such as 64M (default: the server's, 256M)"),
		output: sizeFlag(fs, "unit-output", "", 1, api.DefaultMaxMessage, fmt.Sprintf("16M (1 to %d bytes)", api.DefaultMaxMessage),
			"output limit of a module's unit, a `size` such as 16M (default: the server's, 256M)"),
		timeout: fs.Duration("unit-timeout", 0, "time limit of a module's unit, a `duration` such as 30s (default: the server's, 60s)"),
	}
}

func (l *limitFlags) limits() (wasm.Limits, error) {
	lim := wasm.Limits{Memory: l.mem.Bytes(), Output: l.output.Bytes()}
	if *l.timeout < 0 || *l.timeout > 24*time.Hour {
		return lim, fmt.Errorf("--unit-timeout %v: want 1ms to 24h", *l.timeout)
	}
	lim.Timeout = *l.timeout
	return lim, nil
}

// moduleOp runs a module in this process, as an operation.
type moduleOp struct {
	name string
	mod  *wasm.Module
	lim  wasm.Limits
}

func loadModuleOp(ctx context.Context, engine *wasm.Engine, path string, lim wasm.Limits) (*moduleOp, error) {
	code, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	mod, err := engine.Compile(ctx, code)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	name := strings.TrimSuffix(path[strings.LastIndexAny(path, `/\`)+1:], ".wasm")
	return &moduleOp{name: name, mod: mod, lim: lim}, nil
}

// localOp returns a built-in operation by name, or a module from a
// .wasm file.
func localOp(ctx context.Context, engine *wasm.Engine, name string, lim wasm.Limits) (ops.Op, error) {
	if op, err := ops.Builtin().Lookup(name); err == nil {
		return op, nil
	}
	if _, err := os.Stat(name); err != nil {
		return nil, fmt.Errorf("%q is neither a built-in operation (%s) nor a module file", name, strings.Join(ops.Builtin().Names(), ", "))
	}
	return loadModuleOp(ctx, engine, name, lim)
}

func (m *moduleOp) Name() string { return m.name }
func (m *moduleOp) Info() ops.Info {
	return ops.Info{Doc: "module " + m.mod.Hash()[:12], AnyParams: true}
}

func (m *moduleOp) Split(in io.ReaderAt, size int64, params map[string]string, hint ops.Hint) ([]ops.UnitSpec, error) {
	return nil, errors.New("unused")
}

func (m *moduleOp) Run(ctx context.Context, params map[string]string, inputs [][]byte) ([]byte, error) {
	return m.mod.Run(ctx, m.name, bytes.Join(inputs, nil), params, m.lim)
}

func (m *moduleOp) Assemble(_ map[string]string, _ ops.Hint, results [][]byte) ([]byte, error) {
	return ops.Concat(results), nil
}
