package uml

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// require skips t where UML cannot run, unless BRAID_REQUIRE_KSCTP=1 (CI,
// which installs it), and in -short runs: each boot takes a few seconds.
func require(t *testing.T) {
	t.Helper()
	if os.Getenv("BRAID_IN_VM") == "1" {
		t.Skip("already inside UML")
	}
	err := Available()
	if err != nil && os.Getenv("BRAID_REQUIRE_KSCTP") == "1" {
		t.Fatalf("BRAID_REQUIRE_KSCTP=1 but %v", err)
	}
	if err != nil {
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("boots User-Mode Linux (seconds); not in -short")
	}
}

func run(t *testing.T, timeout time.Duration, cfg Config, argv ...string) (*Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	res, err := Run(ctx, cfg, argv...)
	if err != nil && errors.Is(err, ErrUnavailable) && os.Getenv("BRAID_REQUIRE_KSCTP") != "1" {
		t.Skip(err) // installed but cannot boot here (no ptrace, say)
	}
	return res, err
}

// TestGuestKernel checks in one boot what the kernel-SCTP tests rely on:
// the command's output, environment, working directory and exit status;
// SCTP and hmac loaded; veth, netem, tbf and network namespaces loading on
// demand; one CPU.
func TestGuestKernel(t *testing.T) {
	require(t)
	script := `set -e
echo "env=$BRAID_X dir=$(pwd) cpus=$(nproc)"
grep -qw sctp /proc/modules && echo sctp-loaded
grep -qw hmac /proc/modules && echo hmac-loaded
ip netns add uml-a
ip link add va type veth peer name vb
ip link set vb netns uml-a
ip addr add 10.9.0.1/24 dev va && ip link set va up
ip -n uml-a addr add 10.9.0.2/24 dev vb && ip -n uml-a link set vb up
tc qdisc add dev va root handle 1: netem delay 20ms
tc qdisc add dev va parent 1:1 handle 2: tbf rate 10mbit burst 32k latency 100ms
tc qdisc show dev va | grep -q netem && echo netem-ok
tc qdisc show dev va | grep -q tbf && echo tbf-ok
ip netns del uml-a
echo "stderr line" >&2
exit 7`
	res, err := run(t, 60*time.Second, Config{Env: []string{"BRAID_X=it's here"}, Dir: "/usr"}, "sh", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Output)
	if res.ExitCode != 7 {
		t.Fatalf("exit code %d, want 7; output:\n%s\nconsole:\n%s", res.ExitCode, out, tail(res.Console, 2000))
	}
	for _, want := range []string{"env=it's here dir=/usr cpus=1", "sctp-loaded", "hmac-loaded", "netem-ok", "tbf-ok", "stderr line"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !groupGone(res.PID) {
		t.Errorf("linux.uml's process group %d is still there", res.PID)
	}
	t.Logf("booted, ran and powered off in %v", res.Elapsed.Round(time.Millisecond))
}

// TestTimeoutKillsGuest runs a command that never ends: Run returns at the
// deadline with the output so far, and linux.uml and its processes are
// gone.
func TestTimeoutKillsGuest(t *testing.T) {
	require(t)
	start := time.Now()
	res, err := run(t, 10*time.Second, Config{Load: []string{}}, "sh", "-c", "echo $$ before; sleep 600; echo after")
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Run: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("Run returned after %v, deadline 10s", d)
	}
	if res == nil || !strings.Contains(string(res.Output), "before") || strings.Contains(string(res.Output), "after") {
		t.Fatalf("result %+v", res)
	}
	if res.ExitCode != -1 {
		t.Errorf("exit code %d, want -1", res.ExitCode)
	}
	if res.PID <= 0 || !groupGone(res.PID) {
		t.Errorf("linux.uml's process group %d is still there", res.PID)
	}
}

// TestModuleMissing: a module that does not exist fails the run before
// the command, with the reason in the output.
func TestModuleMissing(t *testing.T) {
	require(t)
	res, err := run(t, 60*time.Second, Config{Load: []string{"no_such_module_braid"}}, "echo", "ran")
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 125 || strings.Contains(string(res.Output), "ran") || !strings.Contains(string(res.Output), "modprobe no_such_module_braid failed") {
		t.Fatalf("exit %d, output:\n%s", res.ExitCode, res.Output)
	}
}

func TestPopulate(t *testing.T) {
	if _, err := (Config{Kernel: "/nonexistent/linux.uml"}).populate(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("missing kernel: %v, want ErrUnavailable", err)
	}
	if _, err := (Config{Kernel: "/bin/sh", Modules: t.TempDir()}).populate(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("modules without modules.dep: %v, want ErrUnavailable", err)
	}
	if Available() == nil {
		if _, err := (Config{Env: []string{"A B=1"}}).populate(); err == nil {
			t.Error("bad environment key accepted")
		}
		if _, err := Run(t.Context(), Config{}); err == nil {
			t.Error("Run without a command succeeded")
		}
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":        "''",
		"a b":     "'a b'",
		"it's":    `'it'\''s'`,
		"$HOME;x": "'$HOME;x'",
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// groupGone reports whether no process is left in process group pgid.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}
