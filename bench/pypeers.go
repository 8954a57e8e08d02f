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
	"slices"
	"strconv"
	"strings"
	"time"
)

//go:embed paper001_peers.py
var peers001Script []byte

// pyPeerPackages are the Python packages of paper 001's peers, pinned so
// that runs compare.
var pyPeerPackages = []string{"dask==2026.8.0", "distributed==2026.8.0", "ray==2.60.0", "pillow==13.0.0"}

// peerVenvDir is where the peers' virtual environment lives: the user's
// cache directory, or BRAID_BENCH_VENV.
func peerVenvDir() (string, error) {
	if dir := os.Getenv("BRAID_BENCH_VENV"); dir != "" {
		return dir, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "braid", "bench-venv"), nil
}

// venvVersions checks that the python of a virtual environment imports
// the peers and has exactly the pinned versions of pyPeerPackages.
func venvVersions(ctx context.Context, py string) error {
	var names, want []string
	for _, p := range pyPeerPackages {
		name, v, _ := strings.Cut(p, "==")
		names = append(names, name)
		want = append(want, v)
	}
	script := "import sys, importlib.metadata as m\nimport dask.distributed, ray, PIL\nprint(' '.join(m.version(p) for p in sys.argv[1:]))"
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, py, append([]string{"-c", script}, names...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, lastLine(out))
	}
	if got := strings.Fields(string(out)); !slices.Equal(got, want) {
		return fmt.Errorf("%s has %s %s, want %s", py, strings.Join(names, " "), strings.Join(got, " "), strings.Join(want, " "))
	}
	return nil
}

// CachedPeerVenv returns the python of the peers' virtual environment if
// an earlier run created it with the pinned versions; it installs
// nothing.
func CachedPeerVenv(ctx context.Context) (string, error) {
	dir, err := peerVenvDir()
	if err != nil {
		return "", err
	}
	py := filepath.Join(dir, "bin", "python")
	if _, err := os.Stat(py); err != nil {
		return "", fmt.Errorf("no cached environment at %s (a full run of braid bench --paper 001 creates it)", dir)
	}
	if err := venvVersions(ctx, py); err != nil {
		return "", fmt.Errorf("cached environment %s does not match: %w", dir, err)
	}
	return py, nil
}

// PeerVenv returns the python of a virtual environment that has paper
// 001's peers (Dask distributed, Ray, Pillow) at the pinned versions. It
// reuses the one in the user's cache directory (BRAID_BENCH_VENV
// overrides the place) when its versions match, so only the first run
// pays for the install; otherwise it creates it with python3 -m venv and
// pip, over any mismatching one.
func PeerVenv(ctx context.Context, log func(string, ...any)) (string, error) {
	py, err := CachedPeerVenv(ctx)
	if err == nil {
		return py, nil
	}
	log("%v: installing", err)
	dir, err := peerVenvDir()
	if err != nil {
		return "", err
	}
	py = filepath.Join(dir, "bin", "python")
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
	return py, venvVersions(ctx, py)
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
