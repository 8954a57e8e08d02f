package worker

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testenv"
	"github.com/braid-hpc/braid/internal/vmkernel"
)

// TestCgroupV2InVM runs the real-cgroup tests (TestCgroupDefaultCap,
// TestCgroupHostileUnit) on cgroup v2 where this host's memory controller
// is v1's: in Debian's stock kernel under QEMU (internal/vmkernel; 5 GiB
// of guest memory, touched only as far as the units go), which mounts the
// unified hierarchy at /sys/fs/cgroup and delegates memory to its
// children before running them with BRAID_REQUIRE_CGROUP=1, so that there
// they run or fail. The worker's test binary and braid are built on the
// host without -race.
//
// It skips in -short runs, where the host's own memory controller is v2
// (the tests run natively), and where QEMU is not installed unless
// BRAID_REQUIRE_CGROUP is 1.
func TestCgroupV2InVM(t *testing.T) {
	if os.Getenv(vmkernel.EnvInGuest) == "1" {
		t.Skip("running inside a guest kernel already")
	}
	if proc, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		if _, file, err := ownMemoryCgroup(string(proc), "/sys/fs/cgroup"); err == nil && file == "memory.max" {
			t.Skip("this host's memory cgroup is v2: the cgroup tests run natively")
		}
	}
	if testing.Short() {
		t.Skip("builds braid and boots a guest kernel; not in -short")
	}
	if err := vmkernel.Installed(); err != nil {
		testenv.Missing(t, testenv.Cgroup, err.Error())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	defer cancel()
	pkgDir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	braid := goBuild(t, bin, "braid", "build", "github.com/braid-hpc/braid/cmd/braid")
	test := goBuild(t, bin, "worker.test", "test", "-c", ".")
	script := `mount -t cgroup2 none /sys/fs/cgroup && echo +memory > /sys/fs/cgroup/cgroup.subtree_control || exit 1
echo "cgroup v2: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
exec "$TEST" -test.v -test.count=1 -test.timeout=8m -test.run '^(TestCgroupDefaultCap|TestCgroupHostileUnit)$'`
	res, err := vmkernel.RunOn(ctx, vmkernel.QEMU, vmkernel.Config{
		Load: []string{}, Mem: "5G", Dir: pkgDir,
		Env: []string{"TEST=" + test, braidBinEnv + "=" + braid, testenv.Cgroup + "=1", "GOTRACEBACK=all"},
	}, "sh", "-c", script)
	if err != nil {
		if res != nil {
			t.Logf("output:\n%s", res.Output)
		}
		if errors.Is(err, vmkernel.ErrUnavailable) {
			testenv.Missing(t, testenv.Cgroup, err.Error())
		}
		t.Fatal(err)
	}
	out := string(res.Output)
	if res.ExitCode != 0 {
		t.Fatalf("the cgroup tests in %s exited %d:\n%s", vmkernel.Describe(res.Backend, res.Kernel), res.ExitCode, out)
	}
	for _, want := range []string{"--- PASS: TestCgroupDefaultCap", "--- PASS: TestCgroupHostileUnit", "cgroup /sys/fs/cgroup/braid-test-"} {
		if !strings.Contains(out, want) {
			t.Errorf("in the guest, no %q:\n%s", want, out)
		}
	}
	figures := regexp.MustCompile(`(?m)^.*(cgroup v2:|cgroup /sys/fs/cgroup/|--- ).*$`).FindAllString(out, -1)
	t.Logf("in %s, %v:\n%s", vmkernel.Describe(res.Backend, res.Kernel), res.Elapsed.Round(time.Second), strings.Join(figures, "\n"))
}
