// Package uml runs a command inside User-Mode Linux: a Linux kernel booted
// as an ordinary process (Debian's user-mode-linux package, linux.uml),
// with the host's files as a read-only root (hostfs). It gives tests the
// kernel features this host may lack: kernel SCTP with hmac, veth, network
// namespaces, netem and tbf, loaded from the package's modules. It is
// internal/vmkernel's fast backend: use that package, which falls back to
// QEMU where UML does not boot (some Intel CPUs) and whose tests boot this
// one.
//
// The guest has one CPU and HZ=100, and its address space ends at 512 GiB,
// below the race detector's shadow memory: run binaries built without
// -race in it, and use it for behaviour and relative effects, not speed.
//
//	host                               guest (linux.uml, pid 1 = init.sh)
//	Run(ctx, cfg, argv)
//	  temp dir D: init.sh, modprobe ─► mount proc, sys, D (rw), /run (tmpfs)
//	  linux.uml ... init=D/init.sh     modprobe -d D/modroot sctp hmac ...
//	                                   /proc/sys/kernel/modprobe = D/modprobe
//	  [Config.Output: Follow(D/out)]     argv > D/out 2>&1; echo $? > D/rc
//	  reads D/out, D/rc  ◄──────────── poweroff
//	  kills linux.uml's process group on ctx's end; removes D
package uml

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/braid-hpc/braid/internal/syncbuf"
)

// ErrUnavailable is wrapped by Available's and Run's errors when UML cannot
// run here: install it with apt-get install -y user-mode-linux kmod.
var ErrUnavailable = errors.New("uml: User-Mode Linux unavailable")

// ErrTimeout is wrapped by Run's error when the guest did not finish
// before the context ended; the Result holds the output so far.
var ErrTimeout = errors.New("uml: guest did not finish in time")

// DefaultModules are loaded before the command: kernel SCTP and the hmac
// its listen needs (without hmac, listen fails with ENOSYS: "failed to load
// transform for md5"). Others (veth, sch_netem, sch_tbf, bridge, ...) load
// on demand through the guest's modprobe wrapper.
var DefaultModules = []string{"sctp", "hmac"}

// Config says how to boot the guest. The zero value works where Available
// reports nil.
type Config struct {
	// Kernel is the UML kernel binary. Empty means linux.uml from PATH.
	Kernel string
	// Modules is the directory of the kernel's modules (its
	// lib/modules/VERSION). Empty means the only directory under
	// /usr/lib/uml/modules.
	Modules string
	// Mem is the guest's memory, as linux.uml's mem= takes it. Empty means
	// 1024M.
	Mem string
	// Load lists the modules loaded before the command runs; a module
	// that fails to load fails Run. Nil means DefaultModules.
	Load []string
	// Env is added to the command's environment (KEY=value); the guest
	// starts with PATH and HOME only.
	Env []string
	// Dir is the command's working directory, a host path (the guest sees
	// the host's files). Empty means /.
	Dir string
	// Output, when not nil, receives the command's output as the guest
	// writes it (within about 200 ms, see Follow), so that a run that is
	// killed has shown what it printed; Result.Output holds it all the
	// same. Nil means only Result.Output.
	Output io.Writer
}

// Result is what the command left.
type Result struct {
	// Output is the command's standard output and standard error.
	Output []byte
	// ExitCode is the command's exit status; -1 when it never finished.
	ExitCode int
	// Console is the guest kernel's console (boot messages, the init
	// script's own errors), for diagnosing a guest that did not run.
	Console []byte
	// Elapsed is the wall time from starting linux.uml to its exit.
	Elapsed time.Duration
	// PID is linux.uml's host process id, which led a process group of
	// its own: gone, with its group, when Run returns.
	PID int
}

// modulesRoot is where Debian's user-mode-linux puts its modules.
const modulesRoot = "/usr/lib/uml/modules"

// populate fills in the defaults, or reports what is missing.
func (c Config) populate() (Config, error) {
	if c.Kernel == "" {
		k, err := exec.LookPath("linux.uml")
		if err != nil {
			return c, fmt.Errorf("%w: no linux.uml in PATH: apt-get install -y user-mode-linux kmod", ErrUnavailable)
		}
		c.Kernel = k
	}
	if _, err := os.Stat(c.Kernel); err != nil {
		return c, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if c.Modules == "" {
		ents, err := os.ReadDir(modulesRoot)
		if err != nil || len(ents) != 1 || !ents[0].IsDir() {
			return c, fmt.Errorf("%w: want one kernel version under %s (apt-get install -y user-mode-linux), found %d entries (%v)",
				ErrUnavailable, modulesRoot, len(ents), err)
		}
		c.Modules = filepath.Join(modulesRoot, ents[0].Name())
	}
	if _, err := os.Stat(filepath.Join(c.Modules, "modules.dep")); err != nil {
		return c, fmt.Errorf("%w: modules: %v", ErrUnavailable, err)
	}
	if _, err := findModprobe(); err != nil {
		return c, err
	}
	if c.Mem == "" {
		c.Mem = "1024M"
	}
	if c.Load == nil {
		c.Load = DefaultModules
	}
	if c.Dir == "" {
		c.Dir = "/"
	}
	for _, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" || strings.ContainsAny(k, " '\"$;\n") {
			return c, fmt.Errorf("uml: environment entry %q is not KEY=value", e)
		}
	}
	return c, nil
}

func findModprobe() (string, error) {
	for _, p := range []string{"/usr/sbin/modprobe", "/sbin/modprobe"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no modprobe: apt-get install -y kmod", ErrUnavailable)
}

// Available reports whether Run can boot a guest here, without booting
// one: linux.uml, its modules and modprobe are installed. The error wraps
// ErrUnavailable and says what to install.
func Available() error {
	_, err := Config{}.populate()
	return err
}

// quote returns s as one single-quoted shell word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// initScript is the guest's pid 1. %[1]s is the temp dir, %[2]s the
// modules to load, %[3]s the environment exports, %[4]s the working
// directory, %[5]s the command.
const initScript = `#!/bin/sh
D=%[1]s
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HOME=/run/home
TMPDIR=/run/tmp
export PATH HOME TMPDIR
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t hostfs -o "$D" hostfs "$D"
mount -t tmpfs tmpfs /run
mkdir -p /run/netns /run/home /run/tmp
echo started > "$D/started"
echo "$D/modprobe" > /proc/sys/kernel/modprobe
ok=1
for m in %[2]s; do
	"$D/modprobe" "$m" >> "$D/out" 2>&1 || { echo "uml: modprobe $m failed" >> "$D/out"; ok=0; }
done
ip link set lo up
%[3]s
if [ $ok = 1 ]; then
	cd %[4]s && %[5]s >> "$D/out" 2>&1
	echo $? > "$D/rc"
else
	echo 125 > "$D/rc"
fi
sync
echo o > /proc/sysrq-trigger
sleep 10
`

// Run boots a guest, runs argv in it and returns its output and exit
// status. The context bounds the whole run: when it ends, Run kills
// linux.uml (and the host processes it forked, its process group) and
// returns what the command printed so far with an error wrapping
// ErrTimeout. A guest that never reached its init returns an error
// wrapping ErrUnavailable with the console in the Result. A nonzero exit
// status is not an error.
func Run(ctx context.Context, cfg Config, argv ...string) (*Result, error) {
	if len(argv) == 0 {
		return nil, errors.New("uml: Run needs a command")
	}
	c, err := cfg.populate()
	if err != nil {
		return nil, err
	}
	modprobe, _ := findModprobe()
	dir, err := os.MkdirTemp("", "braid-uml-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var cmd, env strings.Builder
	for i, a := range argv {
		if i > 0 {
			cmd.WriteByte(' ')
		}
		cmd.WriteString(quote(a))
	}
	for _, e := range c.Env {
		k, v, _ := strings.Cut(e, "=")
		fmt.Fprintf(&env, "%s=%s\nexport %s\n", k, quote(v), k)
	}
	var load []string
	for _, m := range c.Load {
		load = append(load, quote(m))
	}
	// The host has no /lib/modules for the guest's kernel: a module root
	// of our own, and a modprobe wrapper that the guest kernel runs to
	// load modules on demand (veth, sch_netem, ...).
	modroot := filepath.Join(dir, "modroot")
	if err := os.MkdirAll(filepath.Join(modroot, "lib", "modules"), 0o755); err != nil {
		return nil, err
	}
	if err := os.Symlink(c.Modules, filepath.Join(modroot, "lib", "modules", filepath.Base(c.Modules))); err != nil {
		return nil, err
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nexec %s -d %s \"$@\"\n", quote(modprobe), quote(modroot))
	if err := os.WriteFile(filepath.Join(dir, "modprobe"), []byte(wrapper), 0o755); err != nil {
		return nil, err
	}
	script := fmt.Sprintf(initScript, quote(dir), strings.Join(load, " "), env.String(), quote(c.Dir), cmd.String())
	initPath := filepath.Join(dir, "init.sh")
	if err := os.WriteFile(initPath, []byte(script), 0o755); err != nil {
		return nil, err
	}
	umid := "braid" + strconv.Itoa(os.Getpid()) + filepath.Base(dir)[len("braid-uml-"):]
	uml := exec.Command(c.Kernel,
		"mem="+c.Mem, "rootfstype=hostfs", "ro",
		"uml_dir="+dir, "umid="+umid, "init="+initPath,
		"con=null", "con0=fd:0,fd:1")
	var console lockedBuffer
	uml.Stdout, uml.Stderr = &console, &console
	// The guest's processes are host processes forked by linux.uml: a
	// group of their own lets a timeout end them all.
	uml.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	uml.Env = append(os.Environ(), "TMPDIR="+dir) // linux.uml's memory file
	start := time.Now()
	if err := uml.Start(); err != nil {
		return nil, fmt.Errorf("%w: start %s: %v", ErrUnavailable, c.Kernel, err)
	}
	pid := uml.Process.Pid
	stop := func() {}
	if c.Output != nil {
		stop = Follow(filepath.Join(dir, "out"), c.Output)
	}
	werr, timedOut := WaitGroup(ctx, uml)
	stop()
	res := &Result{ExitCode: -1, Console: console.Bytes(), Elapsed: time.Since(start), PID: pid}
	res.Output, _ = os.ReadFile(filepath.Join(dir, "out"))
	if timedOut {
		return res, fmt.Errorf("%w after %v: %v", ErrTimeout, res.Elapsed.Round(time.Millisecond), context.Cause(ctx))
	}
	if _, err := os.Stat(filepath.Join(dir, "started")); err != nil {
		return res, fmt.Errorf("%w: the guest did not start (linux.uml: %v); console ends: %s",
			ErrUnavailable, werr, tail(res.Console, 400))
	}
	rc, err := os.ReadFile(filepath.Join(dir, "rc"))
	if err != nil {
		return res, fmt.Errorf("uml: the guest ended without the command's exit status (linux.uml: %v); console ends: %s",
			werr, tail(res.Console, 400))
	}
	res.ExitCode, err = strconv.Atoi(strings.TrimSpace(string(rc)))
	if err != nil {
		return res, fmt.Errorf("uml: exit status %q: %w", rc, err)
	}
	return res, nil
}

// WaitGroup waits for cmd, started as the leader of a process group of
// its own (Setpgid), to exit, and returns its Wait error. When ctx ends
// first it kills the group and reports timedOut. Either way it then ends
// what is left of the group (a guest kernel may leave forked helpers
// behind) and waits, bounded, until its members are reaped.
func WaitGroup(ctx context.Context, cmd *exec.Cmd) (werr error, timedOut bool) {
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case werr = <-exited:
	case <-ctx.Done():
		timedOut = true
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		werr = <-exited
	}
	for i := 0; i < 200 && syscall.Kill(-pid, syscall.SIGKILL) == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	return werr, timedOut
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return bytes.TrimSpace(b)
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer = syncbuf.Buffer

// Release returns the UML kernel's release (its modules directory's
// name), or "" where UML is not installed.
func Release() string {
	c, err := Config{}.populate()
	if err != nil {
		return ""
	}
	return filepath.Base(c.Modules)
}
