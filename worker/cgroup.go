package worker

import (
	"os"
	"path"
	"strconv"
	"strings"
)

// cgroupMemLimit returns the memory limit, in bytes, of the cgroup this
// process runs in, or 0 if there is none or it cannot be read: the
// smallest of memory.max (cgroup v2) or memory.limit_in_bytes (v1) of its
// cgroup and the cgroup's ancestors. procCgroup is /proc/self/cgroup's
// contents and root where the cgroup file systems are mounted
// (/sys/fs/cgroup): v2's at root, v1's memory controller at root/memory.
//
// In a container with its own cgroup namespace the path is "/" and the
// container's cgroup is mounted at root itself; without one, the path is
// the host's and may not exist under the container's mount: then root's
// own file counts (it is the container's cgroup).
func cgroupMemLimit(procCgroup, root string) int64 {
	var best int64
	take := func(n int64) {
		if n > 0 && (best == 0 || n < best) {
			best = n
		}
	}
	for _, line := range strings.Split(procCgroup, "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = root, "memory.max"
		case hasController(parts[1], "memory"):
			dir, file = path.Join(root, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		found := false
		// The cgroup and its ancestors, at most 64 levels.
		p := path.Clean("/" + parts[2])
		for range 64 {
			if n, ok := readLimit(path.Join(dir, p, file)); ok {
				found = true
				take(n)
			}
			if p == "/" {
				break
			}
			p = path.Dir(p)
		}
		if !found {
			if n, ok := readLimit(path.Join(dir, file)); ok {
				take(n)
			}
		}
	}
	return best
}

// hasController reports whether the comma-separated list has c.
func hasController(list, c string) bool {
	for _, s := range strings.Split(list, ",") {
		if s == c {
			return true
		}
	}
	return false
}

// unlimitedV1 is where cgroup v1 memory limits start to mean "none"
// (the kernel shows 9223372036854771712 for no limit).
const unlimitedV1 = 1 << 60

// readLimit reads a cgroup memory limit file: its value in bytes, 0 for
// none ("max", or v1's huge number), and whether the file was read.
func readLimit(name string) (int64, bool) {
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= unlimitedV1 {
		return 0, true
	}
	return n, true
}

// unitRAM is the memory the default MaxUnitMem divides among threads: the
// host's RAM (ram), or this process's cgroup limit where that is smaller.
// 0 if neither is known.
func unitRAM(ram int64) int64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ram
	}
	limit := cgroupMemLimit(string(b), "/sys/fs/cgroup")
	if limit > 0 && (ram <= 0 || limit < ram) {
		return limit
	}
	return ram
}
