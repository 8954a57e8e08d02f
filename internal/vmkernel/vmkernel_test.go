package vmkernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/uml"
)

// backends are the backends every guest test runs on.
var backends = []Backend{UML, QEMU}

// require skips t where backend b cannot run: not installed (unless
// BRAID_REQUIRE_KSCTP=1, as in CI, which installs both), or UML that does
// not boot on this CPU (QEMU then stands in, and is required). It skips
// in -short runs: each boot takes seconds, under TCG tens of them.
func require(t *testing.T, b Backend) {
	t.Helper()
	if os.Getenv(EnvInGuest) == "1" {
		t.Skip("inside a guest already")
	}
	var err error
	switch b {
	case UML:
		err = uml.Available()
	case QEMU:
		err = qemuInstalled()
	}
	if err != nil && os.Getenv("BRAID_REQUIRE_KSCTP") == "1" {
		t.Fatalf("BRAID_REQUIRE_KSCTP=1 but %v", err)
	}
	if err != nil {
		t.Skip(err)
	}
	if testing.Short() {
		t.Skipf("boots %s (seconds); not in -short", b)
	}
	if b == UML {
		if _, err := umlBoots(); err != nil {
			t.Skipf("User-Mode Linux does not boot on this host (QEMU stands in): %v", err)
		}
	}
}

// bootTimeout bounds one test boot: QEMU under TCG on a loaded host takes
// half a minute to reach the command.
const bootTimeout = 3 * time.Minute

// TestGuest checks on each backend in one boot what the kernel tests rely
// on: the command's output (stdout and stderr), environment, working
// directory and exit status; SCTP and hmac loaded; veth, dummy, bridge,
// netem, tbf and network namespaces loading on demand; and the backend's
// process group gone afterwards.
func TestGuest(t *testing.T) {
	script := `set -e
echo "env=$BRAID_X dir=$(pwd) inguest=$BRAID_IN_VM"
grep -qw sctp /proc/modules && echo sctp-loaded
grep -qw hmac /proc/modules || grep -q hmac /proc/crypto && echo hmac-ok
ip netns add vm-a
ip link add va type veth peer name vb
ip link set vb netns vm-a
ip addr add 10.9.0.1/24 dev va && ip link set va up
ip -n vm-a addr add 10.9.0.2/24 dev vb && ip -n vm-a link set vb up
tc qdisc add dev va root handle 1: netem delay 20ms
tc qdisc add dev va parent 1:1 handle 2: tbf rate 10mbit burst 32k latency 100ms
tc qdisc show dev va | grep -q netem && echo netem-ok
tc qdisc show dev va | grep -q tbf && echo tbf-ok
ip link add d0 type dummy && echo dummy-ok
ip link add br0 type bridge && echo bridge-ok
ip netns del vm-a
echo "stderr line" >&2
exit 7`
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			require(t, b)
			ctx, cancel := context.WithTimeout(t.Context(), bootTimeout)
			defer cancel()
			res, err := RunOn(ctx, b, Config{Env: []string{"BRAID_X=it's $here"}, Dir: "/usr"}, "sh", "-c", script)
			if err != nil {
				t.Fatal(err)
			}
			out := string(res.Output)
			if res.ExitCode != 7 {
				t.Fatalf("exit code %d, want 7; output:\n%s\nconsole:\n%s", res.ExitCode, out, tail(res.Console, 2000))
			}
			for _, want := range []string{"env=it's $here dir=/usr inguest=1", "sctp-loaded", "hmac-ok", "netem-ok", "tbf-ok", "dummy-ok", "bridge-ok", "stderr line"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if res.Backend != b || res.Kernel == "" {
				t.Errorf("result names backend %q, kernel %q; want %q and a release", res.Backend, res.Kernel, b)
			}
			if !groupGone(res.PID) {
				t.Errorf("%s's process group %d is still there", b, res.PID)
			}
			t.Logf("%s %s: booted, ran and powered off in %v", b, res.Kernel, res.Elapsed.Round(time.Millisecond))
		})
	}
}

// TestTimeoutKillsGuest runs a command that never ends: Run returns soon
// after the deadline with ErrTimeout, and the backend's process (by its
// PID) and its group are gone.
func TestTimeoutKillsGuest(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			require(t, b)
			if b == QEMU {
				if _, _, err := Setup(t.Context()); err != nil { // not part of the deadline below
					t.Fatal(err)
				}
			}
			const deadline = 10 * time.Second
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			start := time.Now()
			res, err := RunOn(ctx, b, Config{Load: []string{}}, "sh", "-c", "echo before; sleep 600; echo after")
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("Run: %v, want ErrTimeout", err)
			}
			if d := time.Since(start); d > deadline+5*time.Second {
				t.Errorf("Run returned after %v, deadline %v", d, deadline)
			}
			if res == nil || res.PID <= 0 {
				t.Fatalf("result %+v, want the backend's PID", res)
			}
			if strings.Contains(string(res.Output), "after") || res.ExitCode != -1 {
				t.Errorf("exit code %d, output %q; want -1 and no \"after\"", res.ExitCode, res.Output)
			}
			if err := syscall.Kill(res.PID, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("%s process %d is still there (kill 0: %v)", b, res.PID, err)
			}
			if !groupGone(res.PID) {
				t.Errorf("%s's process group %d is still there", b, res.PID)
			}
		})
	}
}

// TestModuleMissing: a module that does not exist fails the run before
// the command, with exit code 125 and the reason in the output.
func TestModuleMissing(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			require(t, b)
			ctx, cancel := context.WithTimeout(t.Context(), bootTimeout)
			defer cancel()
			res, err := RunOn(ctx, b, Config{Load: []string{"no_such_module_braid"}}, "echo", "ran")
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 125 || strings.Contains(string(res.Output), "ran") || !strings.Contains(string(res.Output), "modprobe no_such_module_braid failed") {
				t.Fatalf("exit %d, output:\n%s", res.ExitCode, res.Output)
			}
		})
	}
}

// TestBadConfig: bad environment entries, memory sizes and commands are
// refused before anything boots, on either backend.
func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Env: []string{"A B=1"}},
		{Env: []string{"=x"}},
		{Env: []string{"NOEQUALS"}},
		{Env: []string{"1A=2"}},
		{Env: []string{"A;rm=1"}},
		{Env: []string{"OK=1", "$(x)=1"}},
		{Mem: "lots"},
		{Mem: "1024"},
		{CPUs: -1},
	} {
		for _, b := range backends {
			start := time.Now()
			if _, err := RunOn(t.Context(), b, cfg, "true"); err == nil || errors.Is(err, ErrUnavailable) || time.Since(start) > time.Second {
				t.Errorf("%s %+v: %v after %v, want a config error at once", b, cfg, err, time.Since(start))
			}
		}
	}
	if _, err := RunOn(t.Context(), UML, Config{}); err == nil {
		t.Error("Run without a command succeeded")
	}
	if _, err := RunOn(t.Context(), "vbox", Config{}, "true"); err == nil {
		t.Error("unknown backend accepted")
	}
	if err := (Config{Env: []string{"A_1=x y", "B=", "C=a=b"}, Mem: "2G"}).validate(); err != nil {
		t.Errorf("good config refused: %v", err)
	}
}

// TestChoose covers the selection: forced either way, and automatic with
// UML booting, UML failing and QEMU standing in, and neither.
func TestChoose(t *testing.T) {
	booted := func() (time.Duration, error) { return 1900 * time.Millisecond, nil }
	panicked := func() (time.Duration, error) {
		return 0, errors.New("Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b (uml: ...)")
	}
	ok := func() error { return nil }
	noQEMU := func() error { return fmt.Errorf("%w: QEMU backend: missing qemu-system-x86_64", ErrUnavailable) }
	for _, tc := range []struct {
		name, mode string
		probe      func() (time.Duration, error)
		qemu       func() error
		want       Backend
		reason     string // a part of Choice.Reason, or of the error when want is ""
	}{
		{"auto, UML boots", "auto", booted, ok, UML, "uml: probe booted in 1.9s"},
		{"auto, UML panics", "auto", panicked, ok, QEMU, "qemu: uml probe failed: Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b"},
		{"auto, neither", "auto", panicked, noQEMU, "", "missing qemu-system-x86_64"},
		{"forced qemu", "qemu", booted, ok, QEMU, "qemu: forced by BRAID_VMKERNEL=qemu"},
		{"forced qemu, missing", "qemu", booted, noQEMU, "", "BRAID_VMKERNEL=qemu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := choose(tc.mode, tc.probe, tc.qemu)
			if tc.want == "" {
				if err == nil || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("choice %+v, error %v; want ErrUnavailable with %q", c, err, tc.reason)
				}
				return
			}
			if err != nil || c.Backend != tc.want || !strings.Contains(c.Reason, tc.reason) {
				t.Fatalf("choice %+v, error %v; want %s with %q", c, err, tc.want, tc.reason)
			}
		})
	}
	t.Run("forced uml", func(t *testing.T) {
		c, err := choose("uml", panicked, ok)
		if uml.Available() != nil {
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("UML not installed: choice %+v, error %v; want ErrUnavailable", c, err)
			}
			return
		}
		if err != nil || c.Backend != UML || c.Reason != "uml: forced by BRAID_VMKERNEL=uml" {
			t.Fatalf("choice %+v, error %v", c, err)
		}
	})
	t.Run("env", func(t *testing.T) {
		for v, want := range map[string]string{"": "auto", "auto": "auto", "uml": "uml", "qemu": "qemu", " qemu ": "qemu"} {
			t.Setenv(EnvBackend, v)
			if m, err := mode(); err != nil || m != want {
				t.Errorf("%s=%q: mode %q, %v; want %q", EnvBackend, v, m, err, want)
			}
		}
		t.Setenv(EnvBackend, "kvm")
		if _, err := mode(); err == nil || !strings.Contains(err.Error(), "want uml, qemu or auto") {
			t.Errorf("%s=kvm: %v, want an error naming the choices", EnvBackend, err)
		}
		if err := Installed(); err == nil {
			t.Errorf("%s=kvm: Installed reports nil", EnvBackend)
		}
	})
}

// TestChooseHere makes the real choice on this host, as Run would without
// BRAID_VMKERNEL: UML when its probe boots, QEMU when not.
func TestChooseHere(t *testing.T) {
	require(t, QEMU)
	if uml.Available() != nil {
		t.Skip("User-Mode Linux is not installed: nothing to probe")
	}
	c, err := choose("auto", umlBoots, qemuInstalled)
	if err != nil {
		t.Fatal(err)
	}
	_, perr := umlBoots()
	switch {
	case perr == nil && (c.Backend != UML || !strings.HasPrefix(c.Reason, "uml: probe booted in ")):
		t.Errorf("UML boots, but the choice is %+v", c)
	case perr != nil && (c.Backend != QEMU || !strings.HasPrefix(c.Reason, "qemu: uml probe failed: ")):
		t.Errorf("UML does not boot (%v), but the choice is %+v", perr, c)
	}
	t.Logf("chosen: %s", c.Reason)
}

// TestInitrd reads back the initramfs archive the QEMU setup writes.
func TestInitrd(t *testing.T) {
	var buf bytes.Buffer
	cw := &cpioWriter{w: &buf}
	cw.dir("bin")
	cw.file("bin/busybox", 0o755, []byte("abcde"))
	cw.symlink("bin/sh", "busybox")
	if err := cw.close(); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		name string
		mode uint32
		data string
	}
	var got []entry
	b := buf.Bytes()
	for len(b) > 0 {
		if len(b) < 110 || string(b[:6]) != "070701" {
			t.Fatalf("bad header at %d: %q", buf.Len()-len(b), b[:min(len(b), 16)])
		}
		var f [13]uint32
		for i := range f {
			fmt.Sscanf(string(b[6+8*i:14+8*i]), "%08X", &f[i])
		}
		mode, size, namesize := f[1], int(f[6]), int(f[11])
		nameEnd := 110 + namesize
		name := string(b[110 : nameEnd-1])
		dataStart := (nameEnd + 3) &^ 3
		data := string(b[dataStart : dataStart+size])
		got = append(got, entry{name, mode, data})
		next := (dataStart + size + 3) &^ 3
		b = b[next:]
		if name == "TRAILER!!!" {
			break
		}
	}
	want := []entry{{"bin", 0o40755, ""}, {"bin/busybox", 0o100755, "abcde"}, {"bin/sh", 0o120777, "busybox"}, {"TRAILER!!!", 0, ""}}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(b) != 0 {
		t.Fatalf("archive holds %v (and %d bytes after), want %v", got, len(b), want)
	}
}

// groupGone reports whether no process is left in process group pgid.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// TestOutputStreams: Config.Output receives the command's output while
// the guest runs. The command prints a line and then sleeps for longer
// than the test's bound; the writer ends the run (cancels its context)
// when the line arrives. Were the output copied only when the guest ends,
// the line would come after the bound, from a guest killed by it.
func TestOutputStreams(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			require(t, b)
			if b == QEMU {
				if _, _, err := Setup(t.Context()); err != nil { // not part of the bound below
					t.Fatal(err)
				}
			}
			// A bound against a hang only: a loaded host boots QEMU's
			// guest in up to a minute.
			const bound = 3 * time.Minute
			ctx, cancel := context.WithTimeoutCause(t.Context(), bound, errors.New("the bound passed"))
			defer cancel()
			live := &liveWriter{ctx: ctx, want: "ready\n", found: cancel}
			res, err := RunOn(ctx, b, Config{Load: []string{}, Output: live}, "sh", "-c", "echo ready; sleep 600; echo after")
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("Run: %v, want ErrTimeout (the writer cancels on the line)", err)
			}
			got, beforeEnd := live.result()
			if got != "ready\n" || !beforeEnd {
				t.Fatalf("Config.Output got %q, while the guest ran: %v; want \"ready\\n\" while it ran (cause: %v)", got, beforeEnd, context.Cause(ctx))
			}
			if string(res.Output) != got {
				t.Errorf("Result.Output %q, Config.Output %q: want the same", res.Output, got)
			}
		})
	}
}

// liveWriter records what Run's Config.Output received, and whether its
// first byte came before ctx ended; once it holds want, it calls found.
type liveWriter struct {
	ctx       context.Context
	want      string
	found     func()
	mu        sync.Mutex
	b         strings.Builder
	beforeEnd bool
}

func (l *liveWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() == 0 && len(p) > 0 {
		l.beforeEnd = l.ctx.Err() == nil
	}
	n, err := l.b.Write(p)
	if l.b.String() == l.want {
		l.found()
	}
	return n, err
}

func (l *liveWriter) result() (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String(), l.beforeEnd
}
