package cli

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.1",
		Main:      debug.Module{Path: "github.com/braid-hpc/braid", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-20T10:00:00Z"},
			{Key: "vcs.modified", Value: "false"},
		},
	}
	modified := &debug.BuildInfo{
		GoVersion: "go1.26.2",
		Main:      debug.Module{Path: "github.com/braid-hpc/braid", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "fedcba"},
			{Key: "vcs.time", Value: "2026-11-21T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	bare := &debug.BuildInfo{GoVersion: "go1.26.3"}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tt := range []struct {
		name     string
		bi       *debug.BuildInfo
		args     []string
		text     []string // lines of the text output
		wantJSON versionInfo
	}{
		{"tagged", stamped, []string{"version"}, []string{
			"braid v1.4.0",
			"  module  github.com/braid-hpc/braid",
			"  commit  0123456789abcdef0123456789abcdef01234567",
			"  time    2026-11-20T10:00:00Z",
			"  go      go1.26.1 " + platform,
		}, versionInfo{"github.com/braid-hpc/braid", "v1.4.0", "0123456789abcdef0123456789abcdef01234567", "2026-11-20T10:00:00Z", false, "go1.26.1", platform}},
		{"modified", modified, []string{"--version"}, []string{
			"braid (devel)",
			"  module  github.com/braid-hpc/braid",
			"  commit  fedcba (with uncommitted changes)",
			"  time    2026-11-21T10:00:00Z",
			"  go      go1.26.2 " + platform,
		}, versionInfo{"github.com/braid-hpc/braid", "(devel)", "fedcba", "2026-11-21T10:00:00Z", true, "go1.26.2", platform}},
		{"no vcs", bare, []string{"version"}, []string{
			"braid (devel)",
			"  module  github.com/braid-hpc/braid",
			"  commit  unknown (built without VCS information)",
			"  go      go1.26.3 " + platform,
		}, versionInfo{"github.com/braid-hpc/braid", "(devel)", "", "", false, "go1.26.3", platform}},
		{"no build info", nil, []string{"version"}, []string{
			"braid (devel)",
			"  module  github.com/braid-hpc/braid",
			"  commit  unknown (built without VCS information)",
			"  go      " + runtime.Version() + " " + platform,
		}, versionInfo{"github.com/braid-hpc/braid", "(devel)", "", "", false, runtime.Version(), platform}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			old := buildInfo
			buildInfo = func() *debug.BuildInfo { return tt.bi }
			t.Cleanup(func() { buildInfo = old })

			code, out, errs := runQuick(t, tt.args...)
			if want := strings.Join(tt.text, "\n") + "\n"; code != 0 || errs != "" || out != want {
				t.Errorf("braid %s: exit %d, stderr %q\ngot:\n%s\nwant:\n%s", strings.Join(tt.args, " "), code, errs, out, want)
			}
			code, out, errs = runQuick(t, append(tt.args, "--json")...)
			var got versionInfo
			if err := json.Unmarshal([]byte(out), &got); code != 0 || errs != "" || err != nil || got != tt.wantJSON {
				t.Errorf("--json: exit %d, stderr %q, %v:\n%s\nwant %+v", code, errs, err, out, tt.wantJSON)
			}
		})
	}
}

// Without stubs: the test binary's own build information.
func TestVersionOfThisBinary(t *testing.T) {
	code, out, _ := runQuick(t, "version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	if v.Go != runtime.Version() || v.Module == "" || v.Version == "" {
		t.Errorf("got %+v, want go %s and a module and version", v, runtime.Version())
	}
	if code, _, errs := runQuick(t, "version", "extra"); code != 2 || !strings.Contains(errs, "unexpected arguments") {
		t.Errorf("version extra: exit %d: %s", code, errs)
	}
}
