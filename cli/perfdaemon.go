package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemonEnv marks the process that braid perf -s -D started in the
// background: its fd 3 is the pipe on which it tells the starting process
// that it listens, or why it could not.
const daemonEnv = "BRAID_PERF_DAEMON"

// daemonStartTimeout bounds how long -D waits for the server to listen.
const daemonStartTimeout = 15 * time.Second

// daemonize runs braid perf with args again as a new session leader with
// no terminal (iperf3 -D: Go cannot fork), its standard streams on
// /dev/null (--logfile still works), and waits until it listens. It
// returns the exit code of the starting process: 0 once the server
// listens, 1 with the server's error if it could not start.
func daemonize(env *Env, args []string) int {
	exe, err := os.Executable()
	if err != nil {
		env.Errorf("perf: -D: cannot find braid's own executable to start in the background: %v", err)
		return 1
	}
	r, w, err := os.Pipe()
	if err != nil {
		env.Errorf("perf: -D: %v", err)
		return 1
	}
	defer r.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		w.Close()
		env.Errorf("perf: -D: %v", err)
		return 1
	}
	defer null.Close()
	cmd := exec.Command(exe, append([]string{"perf"}, args...)...)
	cmd.Env = append(os.Environ(), daemonEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, null, null
	cmd.ExtraFiles = []*os.File{w} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		env.Errorf("perf: -D: start the server in the background: %v", err)
		return 1
	}
	type answer struct {
		line string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		line, err := bufio.NewReader(r).ReadString('\n')
		got <- answer{strings.TrimSpace(line), err}
	}()
	fail := func(format string, args ...any) int {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		env.Errorf("perf: -D: "+format, args...)
		return 1
	}
	select {
	case a := <-got:
		switch {
		case strings.HasPrefix(a.line, "ok"):
			_ = cmd.Process.Release()
			return 0
		case strings.HasPrefix(a.line, "error "):
			return fail("the server did not start: %s", strings.TrimPrefix(a.line, "error "))
		default:
			return fail("the server exited before it listened (%v)", a.err)
		}
	case <-time.After(daemonStartTimeout):
		return fail("the server did not listen within %v", daemonStartTimeout)
	}
}

// daemonReady is how a server started by -D tells the starting process
// that it listens (err nil) or why it stops; a no-op in any other process.
// Only the first call counts.
func daemonReady() func(err error) {
	if os.Getenv(daemonEnv) != "1" {
		return func(error) {}
	}
	os.Unsetenv(daemonEnv)
	f := os.NewFile(3, "braid-perf-ready")
	return func(err error) {
		if f == nil {
			return
		}
		if err != nil {
			fmt.Fprintf(f, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Fprintln(f, "ok")
		}
		f.Close()
		f = nil
	}
}

// writePidFile writes this process's pid to path, as iperf3 -I, refusing
// when path names another process that is alive. The returned function
// removes the file if it still holds this pid.
func writePidFile(path string) (remove func(), err error) {
	if b, err := os.ReadFile(path); err == nil {
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 && pid != os.Getpid() {
			if kerr := syscall.Kill(pid, 0); kerr == nil || errors.Is(kerr, syscall.EPERM) {
				return nil, fmt.Errorf("--pidfile %s: process %d is running (another braid perf -s?); stop it or remove the file", path, pid)
			}
		}
	}
	me := strconv.Itoa(os.Getpid())
	if err := os.WriteFile(path, []byte(me+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("--pidfile: %w", err)
	}
	return func() {
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == me {
			_ = os.Remove(path)
		}
	}, nil
}
