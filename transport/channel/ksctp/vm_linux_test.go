//go:build linux

package ksctp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/vmkernel"
)

// kernelTests are this package's tests that need kernel SCTP: the ones
// TestKernelSCTPInVM runs under QEMU, where code runs about 25x slower
// than on the host and the rest (which the host runs anyway) would only
// cost time. TestKernelTestsListed keeps the list complete.
var kernelTests = []string{"TestEcho", "TestMultihomed", "TestCloseEOF", "TestDeadline", "TestDialRefused", "TestLanesKernel", "TestKnobsKernel", "TestUnavailable"}

// TestKernelSCTPInVM runs the kernel-SCTP tests inside a Linux kernel
// with SCTP (internal/vmkernel) when this kernel has none: this package's
// tests and the transport package's kernel-SCTP session tests (the
// multi-homed ones and the tamper test included). Under User-Mode Linux
// (fast) it runs all of this package's tests three times, for steadiness
// on one CPU; under QEMU with TCG only kernelTests, once. Inside,
// BRAID_REQUIRE_KSCTP=1 turns any skip of a kernel-SCTP test into a
// failure. The binaries are built on the host, without -race (the race
// detector's shadow memory lies beyond UML's address space).
//
// It skips in -short runs (it builds two test binaries and boots a
// guest), and where no backend is installed (see vmkernel.Installed)
// unless BRAID_REQUIRE_KSCTP=1.
func TestKernelSCTPInVM(t *testing.T) {
	if os.Getenv(vmkernel.EnvInGuest) == "1" {
		t.Skip("running inside a guest kernel already")
	}
	if Available() == nil {
		t.Skip("this kernel has SCTP: the kernel-SCTP tests run natively")
	}
	if err := vmkernel.Installed(); err != nil {
		if os.Getenv("BRAID_REQUIRE_KSCTP") == "1" {
			t.Fatalf("BRAID_REQUIRE_KSCTP=1 but %v", err)
		}
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("builds test binaries and boots a guest kernel; not in -short")
	}
	choice, err := vmkernel.Choose(t.Context())
	if err != nil {
		if errors.Is(err, vmkernel.ErrUnavailable) && os.Getenv("BRAID_REQUIRE_KSCTP") != "1" {
			t.Skip(err) // UML installed but does not boot, and no QEMU
		}
		t.Fatal(err)
	}
	t.Logf("kernel: %s", choice.Reason)
	pkgDir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	transportDir := filepath.Join(pkgDir, "..", "..")
	// Under TCG a boot takes 6-30 s and the tests several minutes: the
	// guest's own -test.timeout stays below the whole run's.
	total, inner := 8*time.Minute, "4m"
	ksctpArgs := `-test.count=3`
	if choice.Backend == vmkernel.QEMU {
		total, inner = 15*time.Minute, "10m"
		ksctpArgs = `-test.count=1 -test.run '^(` + strings.Join(kernelTests, "|") + `)$'`
	}
	ctx, cancel := context.WithTimeout(t.Context(), total)
	defer cancel()
	bin := buildForVM(t, ctx, map[string]string{"ksctp.test": pkgDir, "transport.test": transportDir})
	script := `rc=0
echo "== ksctp"
"$BIN/ksctp.test" -test.v ` + ksctpArgs + ` -test.timeout=` + inner + ` || rc=1
cd "$TRANSPORT" || exit 1
echo "== transport"
"$BIN/transport.test" -test.v -test.run '^TestKernelSCTP' -test.timeout=` + inner + ` || rc=1
exit $rc`
	res, err := vmkernel.Run(ctx, vmkernel.Config{
		Dir: pkgDir,
		Env: []string{"BIN=" + bin, "TRANSPORT=" + transportDir, "BRAID_REQUIRE_KSCTP=1", "GOTRACEBACK=all"},
	}, "sh", "-c", script)
	if err != nil {
		if errors.Is(err, vmkernel.ErrUnavailable) && os.Getenv("BRAID_REQUIRE_KSCTP") != "1" {
			t.Skip(err)
		}
		if res != nil {
			t.Logf("output:\n%s", res.Output)
		}
		t.Fatal(err)
	}
	out := string(res.Output)
	if res.ExitCode != 0 {
		t.Fatalf("tests inside %s exited %d:\n%s", res.Backend, res.ExitCode, out)
	}
	passed := len(regexp.MustCompile(`(?m)^\s*--- PASS`).FindAllString(out, -1))
	skipped := regexp.MustCompile(`(?m)^\s*--- SKIP: (\S+)`).FindAllStringSubmatch(out, -1)
	var names []string
	for _, m := range skipped {
		names = append(names, m[1])
	}
	for _, want := range []string{"--- PASS: TestLanesKernel", "--- PASS: TestKnobsKernel", "--- PASS: TestKernelSCTPSessions", "--- PASS: TestKernelSCTPMultihomedAssociation", "--- PASS: TestKernelSCTPTamper"} {
		if !strings.Contains(out, want) {
			t.Errorf("inside %s, no %q:\n%s", res.Backend, want, out)
		}
	}
	top := regexp.MustCompile(`(?m)^( {0,4}--- \w+: .*|== \w+|PASS)$`).FindAllString(out, -1)
	t.Logf("inside %s %s in %v: %d passed (subtests and -count included); skipped: %v; by test:\n%s",
		res.Backend, res.Kernel, res.Elapsed.Round(time.Second), passed, names, strings.Join(top, "\n"))
}

// TestKernelTestsListed: every test of this package that calls
// requireKernel is in kernelTests, so that QEMU runs it too, and every
// benchmark that does is in vmBenchmarks, so that BenchmarkKernelSCTPInVM
// runs it (go test runs no benchmark unless asked: CI runs none).
func TestKernelTestsListed(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, n := range kernelTests {
		listed[n] = true
	}
	calls := regexp.MustCompile(`(?m)^\trequireKernel\(t\)$`)
	fn := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\) \{\n((?:\t.*\n|\n)*?)\}\n`)
	bench := regexp.MustCompile(`(?m)^func (Benchmark\w+)\(b \*testing\.B\) \{\n((?:\t.*\n|\n)*?)\}\n`)
	inVM := regexp.MustCompile(vmBenchmarks)
	found, benchFound := 0, 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fn.FindAllStringSubmatch(string(src), -1) {
			name, body := m[1], m[2]
			if !calls.MatchString(body) {
				continue
			}
			found++
			if !listed[name] {
				t.Errorf("%s (%s) needs kernel SCTP but is not in kernelTests: QEMU would not run it", name, f)
			}
		}
		for _, m := range bench.FindAllStringSubmatch(string(src), -1) {
			name, body := m[1], m[2]
			if !strings.Contains(body, "requireKernel(b)") {
				continue
			}
			benchFound++
			if !inVM.MatchString(name) {
				t.Errorf("%s (%s) needs kernel SCTP but is not in vmBenchmarks: BenchmarkKernelSCTPInVM would not run it", name, f)
			}
		}
	}
	if found < 7 {
		t.Errorf("found %d tests calling requireKernel, want 7 at least: is the pattern stale?", found)
	}
	if benchFound < 3 {
		t.Errorf("found %d benchmarks calling requireKernel, want 3 at least: is the pattern stale?", benchFound)
	}
}

// buildForVM builds the test binaries (name: package directory) without
// -race into a temp dir, which it returns.
func buildForVM(t testing.TB, ctx context.Context, pkgs map[string]string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := t.TempDir()
	for out, dir := range pkgs {
		cmd := exec.CommandContext(ctx, goTool, "test", "-c", "-o", filepath.Join(bin, out), ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go test -c in %s: %v\n%s", dir, err, out)
		}
	}
	return bin
}

// vmBenchmarks are the kernel-SCTP benchmarks of docs/sctp.md that
// BenchmarkKernelSCTPInVM runs by default: transport's on a two-network
// testbed, this package's on the guest's loopback.
const vmBenchmarks = "^(BenchmarkKernelSCTPFailover|BenchmarkKernelSCTPHOL|BenchmarkPaper002|BenchmarkStall|BenchmarkHOL)$"

// BenchmarkKernelSCTPInVM runs the kernel-SCTP benchmarks of docs/sctp.md
// inside a guest kernel (internal/vmkernel: User-Mode Linux where it
// boots, which docs/sctp.md's figures came from, else QEMU; BRAID_VMKERNEL
// forces one), and prints their result lines as the guest's test binaries
// write them, while the guest runs (benchstat reads them). BRAID_VM_BENCH replaces the -bench
// pattern (vmBenchmarks; it applies to both packages, e.g.
// '^BenchmarkKernelSCTPFailover$/link_down'), BRAID_VM_BENCHTIME the
// guest's -benchtime (2x: two iterations of each); other BRAID_*
// variables pass into the guest. One guest run, whatever b.N:
//
//	go test -run '^$' -bench KernelSCTPInVM -benchtime 1x -timeout 60m ./transport/channel/ksctp/
func BenchmarkKernelSCTPInVM(b *testing.B) {
	if os.Getenv(vmkernel.EnvInGuest) == "1" {
		b.Skip("running inside a guest kernel already")
	}
	if err := vmkernel.Installed(); err != nil {
		b.Skip(err)
	}
	choice, err := vmkernel.Choose(b.Context())
	if err != nil {
		b.Skip(err)
	}
	b.Logf("kernel: %s", choice.Reason)
	pkgDir, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	transportDir := filepath.Join(pkgDir, "..", "..")
	ctx, cancel := context.WithTimeout(b.Context(), 55*time.Minute)
	defer cancel()
	bin := buildForVM(b, ctx, map[string]string{"transport.test": transportDir, "ksctp.test": pkgDir})
	pattern := cmp.Or(os.Getenv("BRAID_VM_BENCH"), vmBenchmarks)
	benchtime := cmp.Or(os.Getenv("BRAID_VM_BENCHTIME"), "2x")
	env := []string{"BIN=" + bin, "BENCH=" + pattern, "BENCHTIME=" + benchtime, "KSCTP=" + pkgDir, "BRAID_REQUIRE_KSCTP=1", "GOTRACEBACK=all"}
	ran := false
	for b.Loop() {
		if ran {
			continue // the guest ran every benchmark asked for once
		}
		ran = true
		// The guest's lines reach stdout as they are written: a run
		// killed midway (go test's -timeout, ^C) has shown its finished
		// benchmarks, and its progress can be watched.
		fmt.Printf("# inside %s, started %s:\n", choice.Backend, time.Now().UTC().Format(time.DateTime))
		res, err := vmkernel.Run(ctx, vmkernel.Config{Dir: transportDir, Env: env, Output: os.Stdout},
			"sh", "-c", `uname -r; rc=0
"$BIN/transport.test" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME" -test.timeout=50m || rc=1
cd "$KSCTP" && "$BIN/ksctp.test" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME" -test.timeout=50m || rc=1
exit $rc`)
		if res != nil {
			fmt.Printf("# inside %s %s: ended after %v\n", res.Backend, res.Kernel, res.Elapsed.Round(time.Second))
		}
		if err != nil {
			b.Fatal(err)
		}
		if res.ExitCode != 0 {
			b.Fatalf("inside %s: exit %d", res.Backend, res.ExitCode)
		}
	}
	b.ReportMetric(0, "ns/op") // the guest's lines carry the figures
}
