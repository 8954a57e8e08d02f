package worker

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupMemLimit reads fake cgroup trees: the worker's default
// --max-unit-mem comes from the smaller of the host's RAM and this limit,
// so a worker in a 3 GiB cgroup on a 24 GiB host does not let a unit ask
// for 2.8 GiB.
func TestCgroupMemLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cgroup string
		files  map[string]string // path under root -> contents
		want   int64
	}{
		{"v2", "0::/system.slice/braid.service\n",
			map[string]string{"system.slice/braid.service/memory.max": "3221225472\n", "system.slice/memory.max": "max\n"}, 3 << 30},
		{"v2 parent smaller", "0::/a/b\n",
			map[string]string{"a/b/memory.max": "max\n", "a/memory.max": "1073741824\n"}, 1 << 30},
		{"v2 unlimited", "0::/a\n", map[string]string{"a/memory.max": "max\n"}, 0},
		{"v2 namespace", "0::/\n", map[string]string{"memory.max": "2147483648\n"}, 2 << 30},
		{"v1", "12:cpu,cpuacct:/x\n11:memory:/user.slice/w1\n0::/\n",
			map[string]string{"memory/user.slice/w1/memory.limit_in_bytes": "3221225472\n", "memory/memory.limit_in_bytes": "9223372036854771712\n"}, 3 << 30},
		{"v1 unlimited", "11:memory:/w\n",
			map[string]string{"memory/w/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"v1 host path in a container", "4:memory:/docker/abc\n",
			map[string]string{"memory/memory.limit_in_bytes": "536870912\n"}, 512 << 20},
		{"none", "", nil, 0},
		{"garbage", "what\n::\n0::\n", map[string]string{"memory.max": "lots\n"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, data := range tc.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := cgroupMemLimit(tc.cgroup, root); got != tc.want {
				t.Fatalf("cgroupMemLimit = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestUnitRAM: the RAM the default cap divides is never more than the
// host's.
func TestUnitRAM(t *testing.T) {
	if got := unitRAM(16 << 30); got <= 0 || got > 16<<30 {
		t.Fatalf("unitRAM(16 GiB) = %d, want at most 16 GiB", got)
	}
}
