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
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/testenv"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/internal/wasmtest"
	"github.com/braid-hpc/braid/wasm"
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
	child := memCgroup(t, limit)

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
	if err := cmd.Run(); err != nil {
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

// memCgroup makes a child of this process's own memory cgroup limited to
// limit bytes (v2 memory.max, or v1 memory.limit_in_bytes where the
// memory controller is v1's) and returns its directory; it is removed at
// the end of the test, on failure too, once the processes put in it have
// ended (the test ends them first: register their cleanups after this
// call). It skips t without root, a writable cgroup hierarchy, or more
// RAM than limit (testenv.Cgroup).
func memCgroup(t *testing.T, limit int64) string {
	t.Helper()
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
	child := filepath.Join(dir, fmt.Sprintf("braid-test-%d-%d", os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(child, 0o755); err != nil {
		skip("cannot make a child cgroup: %v", err)
	}
	t.Cleanup(func() {
		// The cgroup goes once its last process has left: a killed
		// process leaves it within moments.
		var err error
		if !testwait.Until(10*time.Second, func() bool {
			err = os.Remove(child)
			return err == nil || errors.Is(err, os.ErrNotExist)
		}) {
			t.Errorf("removing the test cgroup %s: %v", child, err)
		}
	})
	if err := os.WriteFile(filepath.Join(child, file), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		skip("cannot limit the child cgroup's memory (%s): %v", file, err)
	}
	return child
}

// cgroupSeq numbers the test cgroups of this process.
var cgroupSeq atomic.Int64

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

// TestCgroupHostileUnit puts a real `braid worker` of 2 threads in a
// memory cgroup of 4 GiB (v1 or v2, whichever this kernel's memory
// controller is: TestCgroupV2InVM runs it on v2), where its default
// --max-unit-mem is 4 GiB / 4 / 2 less the call stack's reserve, 376M,
// and runs two units at once of a module that grows and writes its memory
// until a grow is refused, asking for the whole cap. Each must fail with
// the sandbox's "memory limit of 376 MiB reached", and the worker must
// come through: still running and registered, a later unit served, and
// the cgroup's own counters say it never reached its limit (v2
// memory.events max, oom and oom_kill 0; v1 memory.failcnt and
// oom_control's oom_kill 0), and what the units took from the cgroup at
// its peak, over the idle worker's usage, is within a unit's memory and
// its stack reserve per thread (a unit's transient 2x, issue 25, passed
// it), and is handed back once they end. It skips as TestCgroupDefaultCap
// does (memCgroup), and in -short runs.
func TestCgroupHostileUnit(t *testing.T) {
	const limit, threads = 4 << 30, 2
	if testing.Short() {
		t.Skip("builds braid and runs a server and a worker; not in -short")
	}
	child := memCgroup(t, limit)
	want := defaultMaxUnitMem(limit, threads)
	if want != 376<<20 {
		t.Fatalf("defaultMaxUnitMem(4 GiB, 2) = %d, want 376 MiB: the rule changed, change the test", want)
	}
	c := newCluster(t, braidBinary(t))
	// The shell joins the cgroup, then becomes the worker.
	join := []string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(child, "cgroup.procs")}
	w := c.worker("cg", threads, join)
	ws := c.waitWorkers(1)
	if ws[0].MaxUnitMem != want {
		t.Errorf("the worker in a cgroup of 4 GiB registered max_unit_mem %d, want %d (376 MiB)", ws[0].MaxUnitMem, want)
	}
	c.waitLog(w, fmt.Sprintf(`(max_unit_mem=%d)`, want))

	c.addOp("ok", wasmtest.Module{MemPages: 1}.Bytes())
	c.addOp("hog", wasmtest.MemoryHog(256)) // 16 MiB a grow
	in := c.put([]byte("x"))
	if j := c.run("--op", "ok", "--input", in); j.State != api.JobDone { // compiled, warm
		t.Fatalf("a module that does nothing: %s %q", j.State, j.Error)
	}
	before := readCgroup(t, child)

	j := c.run("--op", "hog", "--input", in, "--repeat", fmt.Sprint(threads), "--unit-mem", fmt.Sprint(want), "--max-tries", "1")
	if j.State != api.JobFailed || !strings.Contains(j.Error, "memory limit of 376 MiB reached") || strings.Contains(j.Error, "lost") {
		t.Errorf("units growing memory past --unit-mem 376M: %s %q, want failed on \"memory limit of 376 MiB reached\"", j.State, j.Error)
	}
	// The job failed with its first unit: the other may still run. The
	// counters are read once the worker says it runs nothing.
	if !testwait.Until(time.Minute, func() bool {
		now := c.workers()
		return len(now) == 1 && now[0].Running == 0 && now[0].Queued == 0
	}) {
		t.Errorf("the worker still runs units a minute after the job ended: %+v", c.workers())
	}
	// A unit's memory goes back as its run ends, which the heartbeat
	// may announce a moment before: wait (bounded) for the usage to
	// fall back, then judge it.
	var after map[string]int64
	testwait.Until(20*time.Second, func() bool {
		after = readCgroup(t, child)
		return after["current"]-before["current"] <= 64<<20
	})
	if !w.alive() {
		t.Fatalf("the worker ended (%v)", w.err)
	}
	if now := c.workers(); len(now) != 1 || now[0].ID != ws[0].ID {
		t.Errorf("live workers after the units: %+v, want the one, %s", now, ws[0].ID)
	}
	if j := c.run("--op", "ok", "--input", in); j.State != api.JobDone {
		t.Errorf("a unit after the hostile ones: %s %q", j.State, j.Error)
	}
	for _, k := range []string{"max", "oom", "oom_kill", "failcnt"} {
		if n, ok := after[k]; ok && n != 0 {
			t.Errorf("the worker's cgroup counts %s %d, want 0: it reached its limit", k, n)
		}
	}
	if _, ok := after["oom_kill"]; !ok {
		t.Errorf("no oom_kill counter in %s: %v", child, after)
	}
	if peak, ok := after["peak"]; ok && peak-before["current"] > threads*(want+wasm.StackReserve) {
		t.Errorf("the units took %.1f MiB from the cgroup at the peak, more than the %d MiB that %d threads of %d MiB units and their stack reserve may",
			mib(peak-before["current"]), threads*(want+wasm.StackReserve)>>20, threads, want>>20)
	}
	if held := after["current"] - before["current"]; held > 64<<20 {
		t.Errorf("idle again after the units, the worker holds %.1f MiB more than before them: their memory was not handed back", mib(held))
	}
	t.Logf("cgroup %s: the idle worker used %.1f MiB, at its peak %.1f MiB (%.1f MiB more; a unit may take %d MiB + %d MiB of stack on each of %d threads), %.1f MiB once idle again; counters %v",
		child, mib(before["current"]), mib(after["peak"]), mib(after["peak"]-before["current"]), want>>20, wasm.StackReserve>>20, threads, mib(after["current"]), after)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// readCgroup reads a memory cgroup's counters: "current" and "peak" usage
// (v2 memory.current and memory.peak, v1 memory.usage_in_bytes and
// memory.max_usage_in_bytes), v2 memory.events' (max, oom, oom_kill...),
// v1 memory.failcnt ("failcnt") and memory.oom_control's oom_kill.
func readCgroup(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	one := func(key, file string) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			out[key] = n
		}
	}
	pairs := func(file string) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return
		}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, " "); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					out[k] = n
				}
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.max")); err == nil {
		one("current", "memory.current")
		one("peak", "memory.peak")
		pairs("memory.events")
	} else {
		one("current", "memory.usage_in_bytes")
		one("peak", "memory.max_usage_in_bytes")
		one("failcnt", "memory.failcnt")
		pairs("memory.oom_control")
		delete(out, "oom_kill_disable")
		delete(out, "under_oom")
	}
	if len(out) == 0 {
		t.Fatalf("no memory counters in %s", dir)
	}
	return out
}
