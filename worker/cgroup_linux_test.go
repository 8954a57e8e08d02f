package worker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testenv"
	"github.com/braid-hpc/braid/internal/testwait"
)

// cgroupHelperEnv, when set, makes TestCgroupHelper print what a worker
// in its cgroup takes as its memory: the process that TestCgroupDefaultCap
// starts inside a child cgroup.
const cgroupHelperEnv = "BRAID_CGROUP_HELPER"

// TestCgroupHelper is not a test on its own: run by TestCgroupDefaultCap
// inside a child cgroup, it prints the memory the worker's defaults divide
// (unitRAM), the default --max-unit-mem for 2 threads and the default
// --compiled-cache, as a worker there would take them.
func TestCgroupHelper(t *testing.T) {
	if os.Getenv(cgroupHelperEnv) == "" {
		t.Skip("run by TestCgroupDefaultCap inside a child cgroup")
	}
	ram := unitRAM(memTotal())
	cfg := Config{Servers: []string{"https://127.0.0.1:1"}, Key: []byte("k"), Threads: 2}
	if err := cfg.populate(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("cgroup-helper %d %d %d\n", ram, cfg.MaxUnitMem, cfg.CompiledCache)
}

// TestCgroupDefaultCap checks the worker's memory defaults in a real
// cgroup, not only fake cgroup files: it makes a child of this process's
// own memory cgroup (v2 memory.max, or v1 memory.limit_in_bytes where the
// memory controller is v1's), limited to 3 GiB, runs TestCgroupHelper in
// it, and expects a worker of 2 threads there to divide 3 GiB: 256M per
// unit (3 GiB / 4 / 2 less the call stack's reserve is below 256M) and
// 768M of compiled modules. The child is removed at the end, on failure
// too. It needs root and a writable cgroup hierarchy: it skips without,
// unless BRAID_REQUIRE_CGROUP is 1 (testenv.Cgroup).
func TestCgroupDefaultCap(t *testing.T) {
	const limit = 3 << 30
	skip := func(format string, args ...any) {
		t.Helper()
		testenv.Missing(t, testenv.Cgroup, fmt.Sprintf(format, args...))
	}
	if os.Geteuid() != 0 {
		skip("needs root to make a child cgroup")
	}
	if ram := memTotal(); ram > 0 && ram <= limit {
		skip("the host has %d bytes of RAM, not more than the %d bytes the test limits the cgroup to", ram, limit)
	}
	if own := unitRAM(memTotal()); own > 0 && own <= limit {
		skip("this process's cgroup already limits it to %d bytes, not more than %d", own, limit)
	}
	proc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		skip("no /proc/self/cgroup: %v", err)
	}
	dir, file, err := ownMemoryCgroup(string(proc), "/sys/fs/cgroup")
	if err != nil {
		skip("%v", err)
	}
	child := filepath.Join(dir, fmt.Sprintf("braid-test-%d", os.Getpid()))
	if err := os.Mkdir(child, 0o755); err != nil {
		skip("cannot make a child cgroup: %v", err)
	}
	var pid int // the helper, while it runs
	t.Cleanup(func() {
		if pid > 0 {
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
		}
		// The cgroup goes once its last process has left: a killed
		// helper leaves it within moments.
		var err error
		if !testwait.Until(10*time.Second, func() bool {
			err = os.Remove(child)
			return err == nil || errors.Is(err, os.ErrNotExist)
		}) {
			t.Errorf("removing the test cgroup %s: %v", child, err)
		}
	})
	if err := os.WriteFile(filepath.Join(child, file), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		skip("cannot limit the child cgroup's memory (%s): %v", file, err)
	}

	// The shell joins the cgroup, then becomes the helper: it starts
	// inside it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1" && exec "$2" -test.run '^TestCgroupHelper$' -test.v`,
		"sh", filepath.Join(child, "cgroup.procs"), self)
	cmd.Env = append(os.Environ(), cgroupHelperEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid = cmd.Process.Pid
	err = cmd.Wait()
	pid = 0
	if err != nil {
		t.Fatalf("the helper in the child cgroup: %v\n%s", err, out.Bytes())
	}
	var ram, unitMem, compiled int64
	_, after, ok := strings.Cut(out.String(), "cgroup-helper ")
	if !ok {
		t.Fatalf("the helper printed no figures:\n%s", out.Bytes())
	}
	if _, err := fmt.Sscan(after, &ram, &unitMem, &compiled); err != nil {
		t.Fatalf("the helper's figures: %v\n%s", err, out.Bytes())
	}
	if ram != limit {
		t.Errorf("a worker in a cgroup of %d bytes divides %d bytes, want the cgroup's limit", limit, ram)
	}
	if want := defaultMaxUnitMem(limit, 2); unitMem != want || want != 256<<20 {
		t.Errorf("default --max-unit-mem of 2 threads in a 3 GiB cgroup: %d, want %d (256M)", unitMem, want)
	}
	if compiled != 768<<20 {
		t.Errorf("default --compiled-cache in a 3 GiB cgroup: %d, want %d (768M)", compiled, 768<<20)
	}
}

// ownMemoryCgroup returns the directory of this process's memory cgroup
// under root (from procCgroup, /proc/self/cgroup's contents), and its
// limit file: v1's memory controller if it is mounted, else v2's if it
// delegates memory to children.
func ownMemoryCgroup(procCgroup, root string) (dir, file string, err error) {
	var v2 string
	for _, line := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case hasController(parts[1], "memory"):
			d := filepath.Join(root, "memory", parts[2])
			if _, err := os.Stat(filepath.Join(d, "memory.limit_in_bytes")); err != nil {
				return "", "", fmt.Errorf("the v1 memory cgroup %s is not mounted here: %v", d, err)
			}
			return d, "memory.limit_in_bytes", nil
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		}
	}
	if v2 == "" {
		return "", "", errors.New("this process is in no memory cgroup (/proc/self/cgroup)")
	}
	d := filepath.Join(root, v2)
	ctl, err := os.ReadFile(filepath.Join(d, "cgroup.subtree_control"))
	if err != nil || !hasController(strings.Join(strings.Fields(string(ctl)), ","), "memory") {
		return "", "", fmt.Errorf("the cgroup v2 %s does not delegate the memory controller to children (cgroup.subtree_control: %q, %v)", d, ctl, err)
	}
	return d, "memory.max", nil
}
