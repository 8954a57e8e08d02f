package testbed

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
)

// EndProcesses ends what runs inside a bed: SIGTERM, then SIGKILL for a
// process that ignores SIGTERM; processes outside the bed live on.
func TestEndProcesses(t *testing.T) {
	t.Parallel()
	b := upBed(t, Spec{Hosts: []string{"a", "b"}, Networks: []Network{{}}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	polite := b.Exec(ctx, "a", "sleep", "600")
	stubborn := b.Exec(ctx, "b", "sh", "-c", `trap "" TERM; exec sleep 601`)
	outside := exec.CommandContext(ctx, "sleep", "602")
	for _, c := range []*exec.Cmd{polite, stubborn, outside} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer outside.Process.Kill()
	// Both run sleep inside their host (the shell has set its trap).
	for _, c := range []*exec.Cmd{polite, stubborn} {
		testwait.For(t, "sleep inside the bed", 10*time.Second, func() bool {
			comm, err := os.ReadFile("/proc/" + strconv.Itoa(c.Process.Pid) + "/comm")
			return err == nil && strings.TrimSpace(string(comm)) == "sleep"
		})
	}
	waited := make(chan error, 2)
	for _, c := range []*exec.Cmd{polite, stubborn} {
		go func() { waited <- c.Wait() }()
	}
	start := time.Now()
	n, err := b.EndProcesses(ctx)
	if err != nil || n != 2 {
		t.Fatalf("EndProcesses: ended %d, %v; want 2", n, err)
	}
	t.Logf("ended 2 processes in %v", time.Since(start))
	for range 2 {
		if err := <-waited; err == nil {
			t.Errorf("a sleep 600 inside the bed exited 0")
		}
	}
	for c, want := range map[*exec.Cmd]syscall.Signal{polite: syscall.SIGTERM, stubborn: syscall.SIGKILL} {
		ws := c.ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != want {
			t.Errorf("%v: %v, want ended by %v", c.Args, c.ProcessState, want)
		}
	}
	if err := outside.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("a process outside the bed was ended: %v", err)
	}
	if n, err := b.EndProcesses(ctx); n != 0 || err != nil {
		t.Errorf("EndProcesses on an empty bed: %d, %v", n, err)
	}
	// Down ends what started since, before it removes the namespaces.
	late := b.Exec(ctx, "a", "sleep", "603")
	if err := late.Start(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "sleep 603 inside host a", 10*time.Second, func() bool {
		comm, err := os.ReadFile("/proc/" + strconv.Itoa(late.Process.Pid) + "/comm")
		return err == nil && strings.TrimSpace(string(comm)) == "sleep"
	})
	if err := b.Down(); err != nil {
		t.Fatal(err)
	}
	if err := late.Wait(); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("sleep 603 after Down: %v, want ended by a signal", err)
	}
}
