package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/braid-hpc/braid/internal/outfile"
	"github.com/braid-hpc/braid/ops"
)

func init() {
	register(&command{name: "sample", summary: "write the sample image that braid local blurs, to try jobs by hand", run: runSample})
}

func runSample(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "sample", "-o FILE [flags]", `
Writes braid's deterministic sample picture (gradients, discs, stripes and
a checkerboard; the image braid local blurs) as a PNG of --size pixels
square, or, for a FILE ending in .gif, the 19 KB GIF of the paper's blur
experiments (224x168; --size does not apply). Use it to try the job
commands without an image of your own:

  braid sample --size 4096 -o in.png
  braid submit --op blur --input $(braid put in.png) --tile 256x256 --wait`)
	size := fs.Int("size", 2048, "width and height of the PNG: `n` pixels")
	out := fs.StringP("output", "o", "", "write the image to this `file` (required; - for standard output)")
	force := fs.Bool("force", false, "replace an existing output file")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	switch {
	case fs.NArg() > 0:
		env.Errorf("sample: unexpected argument %q", fs.Arg(0))
		return 2
	case *out == "":
		env.Errorf("sample: give the output file with -o FILE (or -o - for standard output)")
		return 2
	case *size < 1 || *size > 16384:
		env.Errorf("sample: --size %d: want 1 to 16384", *size)
		return 2
	}
	if *out != "-" {
		// Fail before drawing, which takes seconds for large sizes.
		if dir := filepath.Dir(*out); !isDir(dir) {
			env.Errorf("sample: cannot write %s: %s is not a directory", *out, dir)
			return 1
		}
		if err := outfile.CheckFree(*out); err != nil && !*force {
			env.Errorf("sample: %v", forceHint("sample", err))
			return 1
		}
	}
	var img []byte
	if strings.HasSuffix(strings.ToLower(*out), ".gif") {
		img = ops.SampleGIF()
	} else {
		img = ops.SamplePNG(*size, *size)
	}
	if *out == "-" {
		if _, err := env.Stdout.Write(img); err != nil {
			env.Errorf("sample: %v", err)
			return 1
		}
		return 0
	}
	if err := outfile.WriteAtomic(*out, img, *force); err != nil {
		env.Errorf("sample: %v", forceHint("sample", err))
		return 1
	}
	return 0
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
