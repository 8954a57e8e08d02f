package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// How long EndProcesses lets processes exit after SIGTERM, then after
// SIGKILL, and how often it looks.
const (
	termWait = 2 * time.Second
	killWait = 2 * time.Second
	procPoll = 20 * time.Millisecond
)

// EndProcesses ends every process inside the bed's namespaces (those that
// Exec or `braid testbed exec` started, and anything they started): SIGTERM,
// then SIGKILL for those still there after a short wait. It returns how
// many processes it ended. Processes outside the bed are never signalled,
// nor is the calling process (whose threads Run switches into a host).
// Down calls it first.
func (b *Bed) EndProcesses(ctx context.Context) (int, error) {
	b.mu.Lock()
	namespaces := slices.Clone(b.created)
	b.mu.Unlock()
	return endProcesses(ctx, namespaces)
}

// endProcesses ends the processes in the named namespaces. A process that
// a signalled one starts meanwhile is found by the next round; three
// rounds bound the whole.
func endProcesses(ctx context.Context, namespaces []string) (int, error) {
	ended := map[int]bool{}
	for range 3 {
		procs, err := bedProcesses(ctx, namespaces)
		if err != nil || len(procs) == 0 {
			return len(ended), err
		}
		for _, p := range procs {
			ended[p.pid] = true
		}
		left := signalAndWait(procs, syscall.SIGTERM, termWait)
		left = signalAndWait(left, syscall.SIGKILL, killWait)
		if len(left) > 0 {
			var pids []string
			for _, p := range left {
				pids = append(pids, strconv.Itoa(p.pid))
			}
			return len(ended), fmt.Errorf("testbed: processes %s in namespace %s still run %v after SIGKILL", strings.Join(pids, ", "), left[0].ns, killWait)
		}
	}
	procs, err := bedProcesses(ctx, namespaces)
	if err == nil && len(procs) > 0 {
		err = fmt.Errorf("testbed: new processes keep starting in namespace %s (pid %d); end what starts them", procs[0].ns, procs[0].pid)
	}
	return len(ended), err
}

// bedProc is a process inside one of a bed's namespaces, held by a pidfd
// (os.FindProcess on Linux), so that a signal never reaches another
// process that reused its pid.
type bedProc struct {
	pid  int
	ns   string
	nsID string // "net:[inode]", as /proc/<pid>/ns/net reads
	p    *os.Process
}

// inNS reports whether the process is still inside its namespace: false
// once it exited (an exited process leaves its namespaces, even before
// its parent reaps it).
func (p bedProc) inNS() bool {
	id, err := os.Readlink("/proc/" + strconv.Itoa(p.pid) + "/ns/net")
	return err == nil && id == p.nsID
}

// bedProcesses lists the processes inside the namespaces, other than the
// calling one.
func bedProcesses(ctx context.Context, namespaces []string) ([]bedProc, error) {
	var procs []bedProc
	for _, ns := range namespaces {
		var st syscall.Stat_t
		if err := syscall.Stat(nsPath(ns), &st); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			return nil, fmt.Errorf("testbed: namespace %s: %w", ns, err)
		}
		nsID := "net:[" + strconv.FormatUint(st.Ino, 10) + "]"
		out, err := run(ctx, "ip", "netns", "pids", ns)
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(string(out)) {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 1 || pid == os.Getpid() {
				continue
			}
			p, err := os.FindProcess(pid)
			if err != nil {
				continue
			}
			bp := bedProc{pid: pid, ns: ns, nsID: nsID, p: p}
			// Checked after the pidfd is held: the pid is that process's
			// until the pidfd is released.
			if !bp.inNS() {
				p.Release()
				continue
			}
			procs = append(procs, bp)
		}
	}
	return procs, nil
}

// signalAndWait sends sig to procs and waits up to d for them to leave
// their namespaces. It returns those still inside and releases the rest.
func signalAndWait(procs []bedProc, sig syscall.Signal, d time.Duration) []bedProc {
	if len(procs) == 0 {
		return nil
	}
	for _, p := range procs {
		p.p.Signal(sig) // an error means it has exited already
	}
	deadline := time.Now().Add(d)
	for {
		procs = slices.DeleteFunc(procs, func(p bedProc) bool {
			if p.inNS() {
				return false
			}
			p.p.Release()
			return true
		})
		if len(procs) == 0 || time.Now().After(deadline) {
			return procs
		}
		time.Sleep(procPoll)
	}
}
