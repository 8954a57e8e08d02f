package worker

import (
	"bufio"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// memTotal returns the host's RAM in bytes, or 0 if unknown.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// diskFree returns the bytes available to us on dir's file system.
func diskFree(dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// cpuMHz returns the processor's nominal (maximum) frequency in MHz, or
// the current one of the first CPU where that is all the kernel tells.
func cpuMHz() int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); err == nil {
		if khz, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && khz > 0 {
			return khz / 1000
		}
	}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return int(mhz + 0.5)
			}
		}
	}
	return 0
}

// loadAvg returns the one-minute load average.
func loadAvg() float64 {
	// The kernel updates the load average every 5 s; a second-old value
	// spares a file read to each heartbeat of a process that runs many
	// workers, or answers many servers.
	now := time.Now().UnixNano()
	if at := loadAt.Load(); at != 0 && now-at < int64(time.Second) {
		return math.Float64frombits(loadBits.Load())
	}
	v := readLoadAvg()
	loadBits.Store(math.Float64bits(v))
	loadAt.Store(now)
	return v
}

// The last load average read, and when (UnixNano).
var (
	loadBits atomic.Uint64
	loadAt   atomic.Int64
)

func readLoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
