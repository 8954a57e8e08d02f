package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CPULimit is a cgroup that caps the CPU time of the processes put in it,
// to make one worker of a bench really slower than the others.
type CPULimit struct {
	dir     string
	version int // 1 or 2
	cpus    float64
}

// cgroupRoot is where cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cpuPeriod is the accounting period of a CPU limit, in microseconds.
const cpuPeriod = 100000

// NewCPULimit makes a cgroup called name that caps its processes at cpus
// CPUs (0.2: a fifth of one CPU). It uses cgroup v2 (cpu.max) where the
// cpu controller is available there, else cgroup v1 (cpu.cfs_quota_us).
// Remove deletes it.
func NewCPULimit(name string, cpus float64) (*CPULimit, error) {
	if cpus <= 0 || cpus > 1024 {
		return nil, fmt.Errorf("bench: CPU limit %g: want more than 0 CPUs", cpus)
	}
	if strings.ContainsAny(name, "/.") || name == "" {
		return nil, fmt.Errorf("bench: bad cgroup name %q", name)
	}
	quota := max(int64(cpus*cpuPeriod), 1000)
	var errs []error
	if l, err := newCPULimitV2(name, quota); err == nil {
		l.cpus = cpus
		return l, nil
	} else {
		errs = append(errs, err)
	}
	if l, err := newCPULimitV1(name, quota); err == nil {
		l.cpus = cpus
		return l, nil
	} else {
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("bench: no CPU cgroup: %w", errors.Join(errs...))
}

func newCPULimitV2(name string, quota int64) (*CPULimit, error) {
	ctl, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	if !slices.Contains(strings.Fields(string(ctl)), "cpu") {
		return nil, errors.New("cgroup v2: no cpu controller")
	}
	sub, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"))
	if err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	if !slices.Contains(strings.Fields(string(sub)), "cpu") {
		if err := os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			return nil, fmt.Errorf("cgroup v2: enable the cpu controller: %w", err)
		}
	}
	l := &CPULimit{dir: filepath.Join(cgroupRoot, name), version: 2}
	if err := os.Mkdir(l.dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	if err := os.WriteFile(filepath.Join(l.dir, "cpu.max"), fmt.Appendf(nil, "%d %d", quota, cpuPeriod), 0); err != nil {
		os.Remove(l.dir)
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	return l, nil
}

func newCPULimitV1(name string, quota int64) (*CPULimit, error) {
	root := filepath.Join(cgroupRoot, "cpu")
	if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err != nil {
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	l := &CPULimit{dir: filepath.Join(root, name), version: 1}
	if err := os.Mkdir(l.dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"cpu.cfs_period_us", cpuPeriod}, {"cpu.cfs_quota_us", quota}} {
		if err := os.WriteFile(filepath.Join(l.dir, f.name), []byte(strconv.FormatInt(f.v, 10)), 0); err != nil {
			os.Remove(l.dir)
			return nil, fmt.Errorf("cgroup v1: %s: %w", f.name, err)
		}
	}
	return l, nil
}

// Add moves process pid, all its threads, into the cgroup.
func (l *CPULimit) Add(pid int) error {
	if err := os.WriteFile(filepath.Join(l.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("bench: put process %d in %s: %w", pid, l.dir, err)
	}
	return nil
}

// Remove deletes the cgroup. Its processes must have exited.
func (l *CPULimit) Remove() error {
	var err error
	for range 50 { // the kernel may take a moment to empty it
		if err = os.Remove(l.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("bench: remove cgroup: %w", err)
}

// String describes the limit, e.g. "20% of a CPU (cgroup v1 cpu.cfs_quota_us)".
func (l *CPULimit) String() string {
	knob := "cpu.max"
	if l.version == 1 {
		knob = "cpu.cfs_quota_us"
	}
	return fmt.Sprintf("%.0f%% of a CPU (cgroup v%d %s)", l.cpus*100, l.version, knob)
}
