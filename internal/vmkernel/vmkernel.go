// Package vmkernel runs a command inside a Linux kernel that has what
// braid's kernel tests need and this host's kernel may lack: kernel SCTP
// with hmac, network namespaces, veth, dummy, bridge, netem and tbf. The
// command sees the host's files, so a test binary built on the host (built
// without -race: see below) runs there unchanged.
//
// It has two backends:
//
//   - User-Mode Linux (package internal/uml): Debian's linux.uml, the
//     kernel as an ordinary host process. It boots in about 2 s, but it
//     has one CPU and HZ=100, and on some hosts (Intel Xeons with AVX-512
//     and AMX) it panics before its first process runs ("Attempted to kill
//     init! exitcode=0x0000000b").
//   - QEMU: Debian's stock amd64 kernel (downloaded with apt-get download
//     and unpacked once into a cache directory, never installed) under
//     qemu-system-x86_64, with KVM where the CPU has real VMX or SVM and
//     TCG, a CPU emulator about 25x slower than the host, elsewhere. The
//     host's root is the guest's, read-only over 9p with a tmpfs overlay.
//     It boots in 6-15 s.
//
// Which one runs is chosen once per process (Choose): BRAID_VMKERNEL=uml
// or =qemu forces a backend; unset or "auto" boots UML once with `true`
// as a probe and takes it when that works, QEMU otherwise. The choice and
// its reason ("uml: probe booted in 1.9s", "qemu: uml probe failed:
// Kernel panic ...") are for the test log.
//
//	host                                 guest (UML or QEMU)
//	Run(ctx, cfg, argv)
//	  Choose: forced, or UML probe ──►   boots, runs `true`, powers off
//	  temp dir D: the command script     modprobe cfg.Load (sctp, hmac)
//	  boots the backend ─────────────►   cd cfg.Dir; env cfg.Env, BRAID_IN_VM=1
//	  [cfg.Output: uml.Follow(D/out)]    argv >> D/out 2>&1; echo $? > D/rc
//	  reads D/out, D/rc  ◄────────────   poweroff
//	  on ctx's end kills the backend's process group, by its PID
//
// Neither guest can run a binary built with -race: UML's address space
// ends below the race detector's shadow memory, and under TCG it would be
// slower still. Use the guests for behaviour and for ratios measured side
// by side in one guest, never for absolute speed.
package vmkernel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/braid-hpc/braid/internal/uml"
)

// Backend names a way to run a kernel.
type Backend string

const (
	// UML is User-Mode Linux (package internal/uml).
	UML Backend = "uml"
	// QEMU is a stock Debian kernel under qemu-system-x86_64.
	QEMU Backend = "qemu"
)

// EnvBackend is the environment variable that forces a backend: "uml",
// "qemu", or "auto" (the default: UML where a probe boots, else QEMU).
const EnvBackend = "BRAID_VMKERNEL"

// EnvInGuest is set to 1 in every guest command's environment, so a test
// binary can tell that it runs inside the guest already.
const EnvInGuest = "BRAID_IN_VM"

// ErrUnavailable is wrapped by errors when no backend can run here (or the
// forced one cannot); the message says what to install.
var ErrUnavailable = errors.New("vmkernel: no Linux kernel to run the command in")

// ErrTimeout is wrapped by Run's error when the guest did not finish
// before the context ended; the Result holds the output so far.
var ErrTimeout = errors.New("vmkernel: guest did not finish in time")

// DefaultModules are loaded before the command: kernel SCTP and the hmac
// its listen needs. Others (veth, dummy, bridge, sch_netem, sch_tbf, ...)
// load on demand when the guest kernel asks its modprobe.
var DefaultModules = []string{"sctp", "hmac"}

// Config says what to run and how. The zero value works where Installed
// reports nil.
type Config struct {
	// Load lists the modules loaded before the command; a module that
	// fails to load fails the run with exit code 125 and the reason in the
	// output. Nil means DefaultModules.
	Load []string
	// Env is added to the command's environment (KEY=value); the guest
	// starts with PATH, HOME, TMPDIR and EnvInGuest only.
	Env []string
	// Dir is the command's working directory, a host path. Empty means /.
	Dir string
	// Mem is the guest's memory (M or G suffix). Empty means 1024M.
	Mem string
	// CPUs is QEMU's virtual CPU count (UML has one). Zero means 2.
	CPUs int
	// Output, when not nil, receives the command's output as the guest
	// writes it (within about 200 ms: uml.Follow), so that a run killed
	// before the guest ends has shown what it printed; Result.Output
	// holds it all the same. Nil means only Result.Output.
	Output io.Writer
}

// Result is what the command left.
type Result struct {
	// Output is the command's standard output and standard error.
	Output []byte
	// ExitCode is the command's exit status; -1 when it never finished.
	ExitCode int
	// Console is the guest kernel's console, for diagnosing a guest that
	// did not run the command.
	Console []byte
	// Elapsed is the wall time from starting the backend to its exit.
	Elapsed time.Duration
	// PID is the backend's host process id (linux.uml or
	// qemu-system-x86_64), which led a process group of its own: gone,
	// with its group, when Run returns.
	PID int
	// Backend is the backend that ran the command.
	Backend Backend
	// Kernel is the guest kernel's release (uname -r).
	Kernel string
}

// Choice is the backend Choose picked and why.
type Choice struct {
	Backend Backend
	// Reason is one line for a test log: the backend, then why, as in
	// "uml: probe booted in 1.9s".
	Reason string
}

// validate checks cfg's environment entries and memory size.
func (c Config) validate() error {
	for _, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || !validKey(k) {
			return fmt.Errorf("vmkernel: environment entry %q is not KEY=value with KEY of letters, digits and _", e)
		}
	}
	if c.Mem != "" && !validMem(c.Mem) {
		return fmt.Errorf("vmkernel: memory %q: want a number of MiB or GiB, as 1024M or 2G", c.Mem)
	}
	if c.CPUs < 0 || c.CPUs > 64 {
		return fmt.Errorf("vmkernel: %d CPUs: want 1 to 64", c.CPUs)
	}
	return nil
}

func validKey(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func validMem(m string) bool {
	if len(m) < 2 || (m[len(m)-1] != 'M' && m[len(m)-1] != 'G') {
		return false
	}
	for _, r := range m[:len(m)-1] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// quote returns s as one single-quoted shell word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// mode reads EnvBackend.
func mode() (string, error) {
	switch m := strings.TrimSpace(os.Getenv(EnvBackend)); m {
	case "", "auto":
		return "auto", nil
	case string(UML), string(QEMU):
		return m, nil
	default:
		return "", fmt.Errorf("vmkernel: %s=%q: want uml, qemu or auto", EnvBackend, m)
	}
}

// Installed reports, without booting anything, whether a backend that
// EnvBackend allows is installed (for QEMU: installed, or its one-time
// setup can run). The error wraps ErrUnavailable and says what to
// install. A nil error does not promise that UML boots: Choose probes.
func Installed() error {
	m, err := mode()
	if err != nil {
		return err
	}
	var errs []string
	if m != string(QEMU) {
		err := uml.Available()
		if err == nil {
			return nil
		}
		errs = append(errs, err.Error())
	}
	if m != string(UML) {
		err := qemuInstalled()
		if err == nil {
			return nil
		}
		errs = append(errs, err.Error())
	}
	return fmt.Errorf("%w (%s=%s): %s", ErrUnavailable, EnvBackend, m, strings.Join(errs, "; "))
}

// probeTimeout bounds the UML probe: it boots in about 2 s, and in a few
// more on a loaded host; one that panics does so at once.
const probeTimeout = 60 * time.Second

var chosen struct {
	mu     sync.Mutex
	done   bool
	choice Choice
	err    error
}

// Choose returns the backend Run uses in this process, deciding on the
// first call: EnvBackend forces one; otherwise a UML probe (a boot of
// `true`, about 2 s) decides. The answer is kept for the process. The
// probe has a deadline of its own (a minute), shared by every caller, so
// ctx only stops a call made after it ended.
func Choose(ctx context.Context) (Choice, error) {
	if err := ctx.Err(); err != nil {
		return Choice{}, err
	}
	chosen.mu.Lock()
	defer chosen.mu.Unlock()
	if chosen.done {
		return chosen.choice, chosen.err
	}
	m, err := mode()
	if err != nil {
		return Choice{}, err
	}
	c, err := choose(m, umlBoots, qemuInstalled)
	chosen.done, chosen.choice, chosen.err = true, c, err
	return c, err
}

// umlBoots is probeUML, run once per process.
var umlBoots = sync.OnceValues(probeUML)

// probeUML boots UML with `true` and reports how long it took.
func probeUML() (time.Duration, error) {
	if err := uml.Available(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	res, err := uml.Run(ctx, uml.Config{Load: []string{}}, "true")
	if err != nil {
		if res != nil {
			if line := panicLine(res.Console); line != "" {
				return 0, fmt.Errorf("%s (%w)", line, err)
			}
		}
		return 0, err
	}
	if res.ExitCode != 0 {
		return 0, fmt.Errorf("`true` exited %d: %s", res.ExitCode, tail(res.Output, 200))
	}
	return res.Elapsed, nil
}

// panicLine returns the console's "Kernel panic" line, if any.
func panicLine(console []byte) string {
	for _, l := range strings.Split(string(console), "\n") {
		if i := strings.Index(l, "Kernel panic"); i >= 0 {
			return strings.TrimSpace(l[i:])
		}
	}
	return ""
}

// choose picks a backend for mode m ("uml", "qemu" or "auto") with the
// probe and the QEMU check given.
func choose(m string, probe func() (time.Duration, error), qemuOK func() error) (Choice, error) {
	switch m {
	case string(UML):
		if err := uml.Available(); err != nil {
			return Choice{}, fmt.Errorf("%w: %s=uml: %w", ErrUnavailable, EnvBackend, err)
		}
		return Choice{UML, "uml: forced by " + EnvBackend + "=uml"}, nil
	case string(QEMU):
		if err := qemuOK(); err != nil {
			return Choice{}, fmt.Errorf("%s=qemu: %w", EnvBackend, err)
		}
		return Choice{QEMU, "qemu: forced by " + EnvBackend + "=qemu"}, nil
	}
	d, perr := probe()
	if perr == nil {
		return Choice{UML, fmt.Sprintf("uml: probe booted in %.1fs", d.Seconds())}, nil
	}
	why := "uml probe failed: " + firstLine(perr.Error(), 300)
	if err := qemuOK(); err != nil {
		return Choice{}, fmt.Errorf("%w: %s; and %w", ErrUnavailable, why, err)
	}
	return Choice{QEMU, "qemu: " + why}, nil
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// Run runs argv in the backend Choose picks and returns its output and
// exit status. The context bounds the whole run, QEMU's one-time setup
// included: when it ends, Run kills the backend's process group and
// returns the output so far with an error wrapping ErrTimeout. An error
// wrapping ErrUnavailable says that no kernel could run the command here
// and what to install. A nonzero exit status is not an error.
func Run(ctx context.Context, cfg Config, argv ...string) (*Result, error) {
	c, err := Choose(ctx)
	if err != nil {
		return nil, err
	}
	return RunOn(ctx, c.Backend, cfg, argv...)
}

// RunOn is Run on backend b, whatever Choose would pick.
func RunOn(ctx context.Context, b Backend, cfg Config, argv ...string) (*Result, error) {
	if len(argv) == 0 {
		return nil, errors.New("vmkernel: Run needs a command")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	switch b {
	case UML:
		return runUML(ctx, cfg, argv)
	case QEMU:
		return runQEMU(ctx, cfg, argv)
	}
	return nil, fmt.Errorf("vmkernel: unknown backend %q", b)
}

// runUML runs argv through package uml.
func runUML(ctx context.Context, cfg Config, argv []string) (*Result, error) {
	env := append(append([]string(nil), cfg.Env...), EnvInGuest+"=1")
	load := cfg.Load
	if load == nil {
		load = DefaultModules
	}
	res, err := uml.Run(ctx, uml.Config{Load: load, Env: env, Dir: cfg.Dir, Mem: cfg.Mem, Output: cfg.Output}, argv...)
	var out *Result
	if res != nil {
		out = &Result{Output: res.Output, ExitCode: res.ExitCode, Console: res.Console, Elapsed: res.Elapsed, PID: res.PID, Backend: UML, Kernel: uml.Release()}
	}
	switch {
	case errors.Is(err, uml.ErrTimeout):
		err = fmt.Errorf("%w: %w", ErrTimeout, err)
	case errors.Is(err, uml.ErrUnavailable):
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return out, err
}

// Describe says, for a report, which kernel ran and how it was emulated,
// and what that means for absolute figures.
func Describe(b Backend, kernel string) string {
	switch b {
	case UML:
		return fmt.Sprintf("User-Mode Linux %s (Debian's linux.uml: the kernel runs as a host process with 1 CPU and HZ=100, so timers tick every 10 ms and every system call is a ptrace round trip: absolute throughput and CPU figures are far below a native kernel's)", kernel)
	case QEMU:
		return fmt.Sprintf("Debian's stock kernel %s under QEMU (%s, 2 virtual CPUs, HZ=250%s)", kernel, accelName(), accelNote())
	}
	return string(b)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
