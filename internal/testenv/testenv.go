// Package testenv is how braid's tests treat a missing part of their
// environment (root, network namespaces, a tool): where it may be missing,
// on a developer's machine, the test skips and says what to install;
// where CI promised it, by setting the test's BRAID_REQUIRE_* variable to
// 1 (.ci/run sets them all), the same test fails instead, so that CI
// cannot pass by skipping. docs/testing.md lists the variables.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// Variables that make a missing environment a failure. Older ones
// (BRAID_REQUIRE_WASM, _USRSCTP, _KSCTP, _SHELLS, _CHROMIUM) are read
// where their tests are.
const (
	// NetNS: root, iproute2, network namespaces and nftables, for
	// testbed beds (testbed.Skip, testbed.SkipLoss).
	NetNS = "BRAID_REQUIRE_NETNS"
	// Root: tests that mount a file system (a small tmpfs).
	Root = "BRAID_REQUIRE_ROOT"
	// Systemd: systemd-analyze, which checks deploy/'s unit files.
	Systemd = "BRAID_REQUIRE_SYSTEMD"
	// Iperf3: iperf3 and python3, for braid perf's comparison with iperf3.
	Iperf3 = "BRAID_REQUIRE_IPERF3"
	// PTY: a pseudo-terminal, for the progress display.
	PTY = "BRAID_REQUIRE_PTY"
	// Cgroup: root and a writable memory cgroup (v1, or v2 delegating
	// memory), for the worker's memory defaults in a real cgroup. .ci/run
	// does not set it: the test runs wherever it can.
	Cgroup = "BRAID_REQUIRE_CGROUP"
)

// Required reports whether variable is set to 1.
func Required(variable string) bool { return os.Getenv(variable) == "1" }

// Missing ends tb because why (what is missing and how to get it) holds:
// a failure when variable is 1, else a skip that names the variable.
func Missing(tb testing.TB, variable, why string) {
	tb.Helper()
	if Required(variable) {
		tb.Fatalf("%s=1 but %s", variable, why)
		return
	}
	tb.Skip(fmt.Sprintf("%s (set %s=1 to make this a failure)", why, variable))
}
