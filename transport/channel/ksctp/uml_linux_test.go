//go:build linux

package ksctp

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/uml"
)

// TestKernelSCTPInUML runs this package's tests (three times, for
// steadiness on one CPU) and the transport package's kernel-SCTP session
// tests inside User-Mode Linux, where kernel SCTP loads, when this kernel
// has none. Inside, BRAID_REQUIRE_KSCTP=1 turns any skip of a kernel-SCTP
// test into a failure. The binaries are built without -race: the race
// detector's shadow memory lies beyond the guest's address space.
//
// It skips in -short runs (it builds two test binaries and boots a
// guest), and where UML is not installed (apt-get install -y
// user-mode-linux kmod) unless BRAID_REQUIRE_KSCTP=1.
func TestKernelSCTPInUML(t *testing.T) {
	if os.Getenv("BRAID_IN_UML") == "1" {
		t.Skip("running inside User-Mode Linux already")
	}
	if Available() == nil {
		t.Skip("this kernel has SCTP: the kernel-SCTP tests run natively")
	}
	if err := uml.Available(); err != nil {
		if os.Getenv("BRAID_REQUIRE_KSCTP") == "1" {
			t.Fatalf("BRAID_REQUIRE_KSCTP=1 but %v", err)
		}
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("builds test binaries and boots User-Mode Linux; not in -short")
	}
	pkgDir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	transportDir := filepath.Join(pkgDir, "..", "..")
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	bin := buildForUML(t, ctx, map[string]string{"ksctp.test": pkgDir, "transport.test": transportDir})
	script := `rc=0
echo "== ksctp"
"$BIN/ksctp.test" -test.v -test.count=3 -test.timeout=4m || rc=1
cd "$TRANSPORT" || exit 1
echo "== transport"
"$BIN/transport.test" -test.v -test.run '^TestKernelSCTP' -test.timeout=4m || rc=1
exit $rc`
	res, err := uml.Run(ctx, uml.Config{
		Dir: pkgDir,
		Env: []string{"BIN=" + bin, "TRANSPORT=" + transportDir, "BRAID_IN_UML=1", "BRAID_REQUIRE_KSCTP=1", "GOTRACEBACK=all"},
	}, "sh", "-c", script)
	if err != nil {
		if errors.Is(err, uml.ErrUnavailable) && os.Getenv("BRAID_REQUIRE_KSCTP") != "1" {
			t.Skip(err)
		}
		if res != nil {
			t.Logf("output:\n%s", res.Output)
		}
		t.Fatal(err)
	}
	out := string(res.Output)
	if res.ExitCode != 0 {
		t.Fatalf("tests inside UML exited %d:\n%s", res.ExitCode, out)
	}
	passed := len(regexp.MustCompile(`(?m)^\s*--- PASS`).FindAllString(out, -1))
	skipped := regexp.MustCompile(`(?m)^\s*--- SKIP: (\S+)`).FindAllStringSubmatch(out, -1)
	var names []string
	for _, m := range skipped {
		names = append(names, m[1])
	}
	for _, want := range []string{"--- PASS: TestLanesKernel", "--- PASS: TestKnobsKernel", "--- PASS: TestKernelSCTPSessions", "--- PASS: TestKernelSCTPMultihomedAssociation", "--- PASS: TestKernelSCTPTamper"} {
		if !strings.Contains(out, want) {
			t.Errorf("inside UML, no %q:\n%s", want, out)
		}
	}
	t.Logf("inside UML in %v: %d passed (subtests and -count=3 included); skipped: %v",
		res.Elapsed.Round(time.Second), passed, names)
}

// buildForUML builds the test binaries (name: package directory) without
// -race into a temp dir, which it returns.
func buildForUML(t *testing.T, ctx context.Context, pkgs map[string]string) string {
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

// TestKernelSCTPBenchInUML runs the kernel-SCTP measurements of
// docs/sctp.md inside User-Mode Linux (BRAID_UML_BENCH=1; it skips
// otherwise): transport's TestKernelSCTPFailoverBench and
// TestKernelSCTPHOLBench on a two-network testbed, and this package's
// TestPaper002Bench on the guest's loopback. BRAID_UML_BENCH_RUN
// replaces the -test.run pattern; BRAID_UML_BENCH_* variables pass into
// the guest. The tables are in the log:
//
//	BRAID_UML_BENCH=1 go test -run TestKernelSCTPBenchInUML -v -timeout 60m ./transport/channel/ksctp/
func TestKernelSCTPBenchInUML(t *testing.T) {
	if os.Getenv("BRAID_UML_BENCH") != "1" {
		t.Skip("measurement; BRAID_UML_BENCH=1")
	}
	if os.Getenv("BRAID_IN_UML") == "1" {
		t.Skip("running inside User-Mode Linux already")
	}
	if err := uml.Available(); err != nil {
		t.Skip(err)
	}
	pkgDir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	transportDir := filepath.Join(pkgDir, "..", "..")
	ctx, cancel := context.WithTimeout(t.Context(), 55*time.Minute)
	defer cancel()
	bin := buildForUML(t, ctx, map[string]string{"transport.test": transportDir, "ksctp.test": pkgDir})
	run := os.Getenv("BRAID_UML_BENCH_RUN")
	if run == "" {
		run = "^(TestKernelSCTPFailoverBench|TestKernelSCTPHOLBench|TestPaper002Bench)$"
	}
	env := []string{"BIN=" + bin, "RUN=" + run, "KSCTP=" + pkgDir, "BRAID_IN_UML=1", "BRAID_REQUIRE_KSCTP=1", "GOTRACEBACK=all"}
	for _, e := range os.Environ() {
		if strings.HasPrefix(e, "BRAID_UML_BENCH") {
			env = append(env, e)
		}
	}
	res, err := uml.Run(ctx, uml.Config{Dir: transportDir, Env: env},
		"sh", "-c", `uname -r; rc=0
"$BIN/transport.test" -test.v -test.run "$RUN" -test.timeout=50m || rc=1
cd "$KSCTP" && "$BIN/ksctp.test" -test.v -test.run "$RUN" -test.timeout=50m || rc=1
exit $rc`)
	if res != nil {
		t.Logf("inside UML (%v):\n%s", res.Elapsed.Round(time.Second), res.Output)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("inside UML: exit %d", res.ExitCode)
	}
}
