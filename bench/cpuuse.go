package bench

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU accounting for the job-system papers. A cluster's server, workers
// and client share this machine's cores, so a figure where more workers
// are slower (paper 001's Fig. 10 on 2 cores) needs the CPU each process
// used beside the wall time: when braid's processes keep every core busy,
// the cores, not the scheduling, bound the time per task.

// userHZ is the unit of /proc's CPU times: Linux reports them in
// USER_HZ ticks, 100 a second on every architecture braid builds for.
const userHZ = 100

// CPUUse is the CPU time a cluster's processes used while the jobs of one
// layout and task count ran, summed over those jobs, with their wall time.
type CPUUse struct {
	// Layout is the cluster layout, a series name of the figure.
	Layout string `json:"layout"`
	// Tasks is the task count of each job; Jobs how many jobs are summed.
	Tasks int `json:"tasks"`
	Jobs  int `json:"jobs"`
	// Wall is the time from each submission to the client's exit, in
	// seconds, summed over the jobs.
	Wall float64 `json:"wall_s"`
	// Server, Workers (one entry per worker) and Client (braid submit
	// --wait) are the processes' user+system CPU seconds over the jobs.
	Server  float64   `json:"server_cpu_s"`
	Workers []float64 `json:"worker_cpu_s"`
	Client  float64   `json:"client_cpu_s"`
	// Machine is the busy time of every CPU of the machine over the jobs
	// (/proc/stat), whoever used it: more than braid's own means other
	// work shared the cores.
	Machine float64 `json:"machine_cpu_s"`
	// Cores is the number of CPUs the machine has online.
	Cores int `json:"cores"`
	// LoadStart and LoadEnd are /proc/loadavg's first three fields before
	// the layout's first job and after its last.
	LoadStart string `json:"load_start,omitempty"`
	LoadEnd   string `json:"load_end,omitempty"`
}

// WorkerCPU is the workers' CPU seconds together.
func (u *CPUUse) WorkerCPU() float64 {
	var s float64
	for _, w := range u.Workers {
		s += w
	}
	return s
}

// BraidCPU is the CPU seconds of braid's processes: server, workers and
// client.
func (u *CPUUse) BraidCPU() float64 { return u.Server + u.WorkerCPU() + u.Client }

// Busy is how many cores braid's processes kept busy on average: their
// CPU time over the wall time.
func (u *CPUUse) Busy() float64 { return ratio(u.BraidCPU(), u.Wall) }

// MachineBusy is how many cores were busy on average, by any process.
func (u *CPUUse) MachineBusy() float64 { return ratio(u.Machine, u.Wall) }

// PerTask is braid's processes' CPU milliseconds per task.
func (u *CPUUse) PerTask() float64 { return ratio(1000*u.BraidCPU(), float64(u.Jobs*u.Tasks)) }

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// cpuClock reads CPU time used so far: of one process (all its threads,
// those that ended too) and of the whole machine.
type cpuClock interface {
	proc(pid int) (time.Duration, error)
	machine() (time.Duration, error)
}

// procClock reads /proc.
type procClock struct{}

// proc returns utime+stime of /proc/PID/stat.
func (procClock) proc(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: CPU time of process %d: %w", pid, err)
	}
	return parseProcStat(b)
}

// parseProcStat returns utime+stime from the text of /proc/PID/stat. The
// command name (field 2) may hold spaces and parentheses, so the fields
// are counted from the last ')'.
func parseProcStat(b []byte) (time.Duration, error) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: /proc/PID/stat %q: no command name", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc/PID/stat %q: %d fields after the command name, want 13 or more", s, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bench: /proc/PID/stat: CPU time %q is not a tick count", v)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// machine returns the busy time of every CPU from /proc/stat.
func (procClock) machine() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: machine CPU time: %w", err)
	}
	return parseMachineStat(b)
}

// parseMachineStat returns the busy time in /proc/stat's "cpu" line: all
// of its times but idle and iowait (guest times are counted in user and
// nice already, so they are left out).
func parseMachineStat(b []byte) (time.Duration, error) {
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, fmt.Errorf("bench: /proc/stat starts %q, want the \"cpu\" line", line)
	}
	var ticks int64
	for i, v := range f[1:min(len(f), 9)] { // user nice system idle iowait irq softirq steal
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bench: /proc/stat: CPU time %q is not a tick count", v)
		}
		if i != 3 && i != 4 {
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// cpuMeter measures a cluster's processes around each job.
type cpuMeter struct {
	clock   cpuClock
	server  int   // PID
	workers []int // PIDs
	// client returns the CPU time of the client commands that ended so
	// far (Cluster.ClientCPU).
	client func() time.Duration
	now    func() time.Time
}

// cpuMark is what a cpuMeter read at one moment.
type cpuMark struct {
	at                      time.Time
	server, client, machine time.Duration
	workers                 []time.Duration
}

func (m *cpuMeter) mark() (cpuMark, error) {
	k := cpuMark{at: m.now()}
	var errs []error
	var err error
	k.server, err = m.clock.proc(m.server)
	errs = append(errs, err)
	for _, pid := range m.workers {
		w, err := m.clock.proc(pid)
		errs = append(errs, err)
		k.workers = append(k.workers, w)
	}
	k.machine, err = m.clock.machine()
	errs = append(errs, err)
	k.client = m.client()
	return k, errors.Join(errs...)
}

// add adds one job's use between two marks.
func (u *CPUUse) add(from, to cpuMark) {
	u.Jobs++
	u.Wall += to.at.Sub(from.at).Seconds()
	u.Server += (to.server - from.server).Seconds()
	u.Client += (to.client - from.client).Seconds()
	u.Machine += (to.machine - from.machine).Seconds()
	for i := range to.workers {
		if i >= len(u.Workers) {
			u.Workers = append(u.Workers, 0)
		}
		u.Workers[i] += (to.workers[i] - from.workers[i]).Seconds()
	}
}

// selfCPU returns this process's user+system CPU time so far, or 0 where
// getrusage fails.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg returns /proc/loadavg's first three fields, or "" where it
// cannot be read.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
