package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/draw"
	_ "image/png" // decode outputs
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/testbed"
)

// newKey returns a random cluster key.
func newKey() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ClusterRun is the job system end to end on a testbed: a server host and
// two dual-homed worker hosts, every role a separate braid process, and a
// blur job on a generated PNG cut into tiles, driven by the braid client
// commands from the server host.
type ClusterRun struct {
	// Bin is the braid binary. Required.
	Bin string
	// Dir holds the server's data, the images and the logs. Required.
	Dir string
	// Size is the image's width and height in pixels; 0 means 4096.
	Size int
	// Tile is the tiles' width and height; 0 means 256.
	Tile int
	// Radius is the blur radius; 0 means 5.
	Radius int
	// Rate is the rate of both networks in bit/s; 0 means unshaped.
	Rate int64
	// Threads is what each worker lends; 0 means 1.
	Threads int
}

// Hosts of a ClusterRun.
const (
	ClusterServer = "srv"
	ClusterW1     = "w1"
	ClusterW2     = "w2"
)

// ClusterResult is what a ClusterRun measured.
type ClusterResult struct {
	// Job is the job as braid submit --wait --json printed it.
	Job JobResult
	// Input and Output are the image files, in Dir.
	Input, Output string
	// Reference is the output of the same blur submitted as one unit
	// (no tiles), in Dir; RefJob is that job.
	Reference string
	RefJob    JobResult
	// NetBytes are the bytes each worker's interfaces carried during the
	// job, received plus sent, one entry per network, by host.
	NetBytes map[string][]int64
	// Workers is braid workers --json after the job.
	Workers []api.WorkerInfo
	// Rate is the links' rate.
	Rate int64
}

// Run brings up the bed, runs the job and takes everything down again,
// on failure too.
func (r *ClusterRun) Run(ctx context.Context) (res ClusterResult, err error) {
	size, tile, radius, threads := cmp0(r.Size, 4096), cmp0(r.Tile, 256), cmp0(r.Radius, 5), cmp0(r.Threads, 1)
	res.Rate = r.Rate
	bed, err := testbed.Up(ctx, testbed.Spec{
		Hosts:    []string{ClusterServer, ClusterW1, ClusterW2},
		Networks: []testbed.Network{{Name: "a", Rate: r.Rate, FullDuplex: true}, {Name: "b", Rate: r.Rate, FullDuplex: true}},
	})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, bed.Down()) }()
	c := &Cluster{Bed: bed, Bin: r.Bin, Dir: r.Dir, Key: newKey()}
	defer c.Stop()
	// The control API on network a; the data plane on both.
	if _, err := c.StartServer(ctx, ClusterServer, 0); err != nil {
		return res, err
	}
	workers := []string{ClusterW1, ClusterW2}
	for _, h := range workers {
		if _, err := c.StartWorker(ctx, h, []int{0, 1}, threads); err != nil {
			return res, err
		}
	}
	if _, err := c.WaitWorkers(ctx, len(workers)); err != nil {
		return res, err
	}
	res.Input = filepath.Join(r.Dir, "input.png")
	res.Output = filepath.Join(r.Dir, "output.png")
	// braid sample draws the image: faster than this process, which may
	// run under the race detector.
	if out, err := exec.CommandContext(ctx, r.Bin, "sample", "--size", strconv.Itoa(size), "-o", res.Input, "--force").CombinedOutput(); err != nil {
		return res, fmt.Errorf("braid sample: %w: %s", err, out)
	}
	id, err := c.Put(ctx, res.Input)
	if err != nil {
		return res, err
	}
	before := map[string][]int64{}
	for _, h := range workers {
		if before[h], err = c.NetBytes(ctx, h); err != nil {
			return res, err
		}
	}
	res.Job, err = c.Submit(ctx, "--op", "blur", "--input", id, "--tile", fmt.Sprintf("%dx%d", tile, tile),
		"--param", "radius="+strconv.Itoa(radius))
	if err != nil {
		return res, err
	}
	res.NetBytes = map[string][]int64{}
	for _, h := range workers {
		after, err := c.NetBytes(ctx, h)
		if err != nil {
			return res, err
		}
		for j := range after {
			res.NetBytes[h] = append(res.NetBytes[h], after[j]-before[h][j])
		}
	}
	if _, err := c.Braid(ctx, "get", res.Job.Output, "-o", res.Output, "--force"); err != nil {
		return res, err
	}
	if res.Workers, err = c.Workers(ctx); err != nil {
		return res, err
	}
	// The reference: the same blur in one unit.
	res.Reference = filepath.Join(r.Dir, "reference.png")
	if res.RefJob, err = c.Submit(ctx, "--op", "blur", "--input", id, "--param", "radius="+strconv.Itoa(radius)); err != nil {
		return res, err
	}
	if res.RefJob.Units.Total != 1 {
		return res, fmt.Errorf("the reference job has %d units, want 1", res.RefJob.Units.Total)
	}
	_, err = c.Braid(ctx, "get", res.RefJob.Output, "-o", res.Reference, "--force")
	return res, err
}

func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// cluster is the `cluster` experiment: ClusterRun with 1 Gbit/s links.
func (s *Suite) cluster(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "braid-bench-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	run := &ClusterRun{Bin: s.bin(), Dir: dir, Rate: 1e9}
	res, err := run.Run(ctx)
	if err != nil {
		return err
	}
	same, err := sameAsOneUnit(ctx, res.Input, res.Output, 5)
	if err != nil {
		return err
	}
	if !same {
		return errors.New("the output differs from the single-unit blur")
	}
	el := res.Job.Elapsed()
	t := s.section("Job system end to end: blur of a 4096 x 4096 PNG in 256 tiles",
		fmt.Sprintf("A server host and two dual-homed worker hosts (1 thread each), 2 networks at %s each, "+
			"every role a separate braid process; braid put, submit --tile 256x256 --wait and get from the server host. "+
			"Job %d: %d units in %.2f s on the server (submission to output), %.1f units/s; "+
			"the output is identical to the single-unit blur (job %d, %.2f s).",
			testbed.FormatRate(res.Rate), res.Job.Job, res.Job.Units.Total, el.Seconds(), float64(res.Job.Units.Total)/el.Seconds(),
			res.RefJob.Job, res.RefJob.Elapsed().Seconds())).
		table(text("worker", "worker"), integer("units_done", "units done", "units"), numCol("net_a_mb", "network a MB", "MB", "%.1f"),
			numCol("net_b_mb", "network b MB", "MB", "%.1f"), numCol("share_b", "share of b", "", "%.2f"))
	for _, h := range []string{ClusterW1, ClusterW2} {
		var done uint64
		for _, w := range res.Workers {
			if w.Name == h {
				done = w.Done
			}
		}
		nb := res.NetBytes[h]
		t.add(h, int64(done), float64(nb[0])/1e6, float64(nb[1])/1e6, float64(nb[1])/float64(max(nb[0]+nb[1], 1)))
	}
	s.logf("cluster: %d units in %v", res.Job.Units.Total, el)
	return nil
}

// sameAsOneUnit reports whether the PNG at out has the same pixels as the
// blur of the image at in computed here in one unit.
func sameAsOneUnit(ctx context.Context, in, out string, radius int) (bool, error) {
	img, err := os.ReadFile(in)
	if err != nil {
		return false, err
	}
	want, err := ops.Execute(ctx, ops.Blur(), bytes.NewReader(img), int64(len(img)),
		map[string]string{"radius": strconv.Itoa(radius)}, ops.Hint{}, 1)
	if err != nil {
		return false, fmt.Errorf("single-unit blur: %w", err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		return false, err
	}
	return SamePixels(got, want)
}

// SamePixels reports whether two encoded images (PNG, JPEG or GIF) have
// the same size and the same pixels.
func SamePixels(a, b []byte) (bool, error) {
	pa, err := decodeRGBA(a)
	if err != nil {
		return false, err
	}
	pb, err := decodeRGBA(b)
	if err != nil {
		return false, err
	}
	return pa.Rect == pb.Rect && bytes.Equal(pa.Pix, pb.Pix), nil
}

func decodeRGBA(b []byte) (*image.RGBA, error) {
	img, _, err := image.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decode image: %w", err)
	}
	out := image.NewRGBA(image.Rect(0, 0, img.Bounds().Dx(), img.Bounds().Dy()))
	draw.Draw(out, out.Rect, img, img.Bounds().Min, draw.Src)
	return out, nil
}

// bin returns the braid binary the process experiments start.
func (s *Suite) bin() string {
	if s.Braid != "" {
		return s.Braid
	}
	exe, _ := os.Executable()
	return exe
}
