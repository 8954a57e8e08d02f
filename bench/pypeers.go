package bench

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

//go:embed paper001_peers.py
var peers001Script []byte

// pyPeerPackages are the Python packages of paper 001's peers, pinned so
// that runs compare.
var pyPeerPackages = []string{"dask==2026.8.0", "distributed==2026.8.0", "ray==2.60.0", "pillow==13.0.0"}

// PeerVenv returns the python of a virtual environment that has paper
// 001's peers (Dask distributed, Ray, Pillow), creating it with python3
// -m venv and pip the first time; it lives in the user's cache directory
// (BRAID_BENCH_VENV overrides the place).
func PeerVenv(ctx context.Context, log func(string, ...any)) (string, error) {
	dir := os.Getenv("BRAID_BENCH_VENV")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(cache, "braid", "bench-venv")
	}
	py := filepath.Join(dir, "bin", "python")
	check := func() error {
		out, err := exec.CommandContext(ctx, py, "-c", "import dask.distributed, ray, PIL").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, lastLine(out))
		}
		return nil
	}
	if check() == nil {
		return py, nil
	}
	python3, err := exec.LookPath("python3")
	if err != nil {
		return "", fmt.Errorf("python3 not found (install it to compare with Dask and Ray): %w", err)
	}
	log("creating the Python environment %s with %s", dir, strings.Join(pyPeerPackages, " "))
	if out, err := exec.CommandContext(ctx, python3, "-m", "venv", dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("python3 -m venv %s: %w: %s", dir, err, lastLine(out))
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	args := append([]string{"-m", "pip", "install", "--disable-pip-version-check", "--quiet"}, pyPeerPackages...)
	if out, err := exec.CommandContext(pctx, py, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("pip install %s: %w: %s", strings.Join(pyPeerPackages, " "), err, lastLine(out))
	}
	return py, check()
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// peerJob is one job a Python peer timed.
type peerJob struct {
	Framework string  `json:"framework"`
	Rep       int     `json:"rep"`
	Tasks     int     `json:"tasks"`
	MsPerTask float64 `json:"ms_per_task"`
}

// runPeer runs paper 001's tasks on framework (dask or ray) with workers
// worker processes of threads threads each, and returns ms per task by
// task count, one value per repetition.
func runPeer(ctx context.Context, py, dir, gif, framework string, workers, threads int, tasks []int, reps int) (map[int][]float64, error) {
	script := filepath.Join(dir, "paper001_peers.py")
	if err := os.WriteFile(script, peers001Script, 0o644); err != nil {
		return nil, err
	}
	var counts []string
	for _, n := range tasks {
		counts = append(counts, strconv.Itoa(n))
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, py, script, framework, gif, strconv.Itoa(workers), strconv.Itoa(threads), strings.Join(counts, ","), strconv.Itoa(reps))
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", framework, err, lastLine(stderr.Bytes()))
	}
	res := map[int][]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var j peerJob
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			return nil, fmt.Errorf("%s printed %q: %w", framework, sc.Text(), err)
		}
		res[j.Tasks] = append(res[j.Tasks], j.MsPerTask)
	}
	jobs := 0
	for _, v := range res {
		jobs += len(v)
	}
	if jobs != len(tasks)*reps {
		return nil, fmt.Errorf("%s: %d jobs, want %d", framework, jobs, len(tasks)*reps)
	}
	return res, nil
}
