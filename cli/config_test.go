package cli

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// configFlags is a command's FlagSet with --config, as server and worker
// have it.
func configFlags(env *Env) (*map[string]any, func(args ...string) int) {
	fs := newFlags(env, "server", "", "")
	v := map[string]any{
		"listen":    fs.String("listen", "127.0.0.1:7400", ""),
		"data":      fs.String("data", "", ""),
		"max-tries": fs.Int("max-tries", 0, ""),
		"heartbeat": fs.Duration("heartbeat", time.Second, ""),
		"verbose":   fs.BoolP("verbose", "v", false, ""),
		"ops":       fs.String("ops", "", ""),
		"max-data":  sizeFlag(fs, "max-data", "0", 0, 0, "500G, or 0 for no limit", ""),
	}
	configFlag(fs)
	return &v, func(args ...string) int { return parseFlags(env, fs, args) }
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "braid.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A flag on the command line wins over BRAID_<FLAG>, which wins over the
// --config file, which wins over the default.
func TestConfigPrecedence(t *testing.T) {
	file := writeConfig(t, `# braid server configuration
listen: 10.0.0.1:7400     # only here
data: /from/file          # also in the environment
max-tries: 5              # also in the environment and on the command line
verbose: true
ops: [blur, wordcount]    # a list is a comma-separated flag
`)
	t.Setenv("BRAID_DATA", "/from/env")
	t.Setenv("BRAID_MAX_TRIES", "7")
	t.Setenv("BRAID_HEARTBEAT", "3s") // only here
	var stderr strings.Builder
	v, parse := configFlags(&Env{Stdout: io.Discard, Stderr: &stderr})
	if code := parse("--max-tries", "9", "--config", file); code != -1 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	got := map[string]any{}
	for k, p := range *v {
		switch p := p.(type) {
		case *string:
			got[k] = *p
		case *int:
			got[k] = *p
		case *bool:
			got[k] = *p
		case *time.Duration:
			got[k] = *p
		}
	}
	want := map[string]any{"listen": "10.0.0.1:7400", "data": "/from/env", "max-tries": 9, "heartbeat": 3 * time.Second,
		"verbose": true, "ops": "blur,wordcount"}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %v, want %v", k, got[k], w)
		}
	}
}

// A bad key, value or variable is an error that names it, with the file's
// line, and exit code 2.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        [2]string
		want       string
	}{
		{"unknown key", "listen: x\n\nmax-dataa: 5G\n", [2]string{}, `braid.yaml:3: unknown key "max-dataa": keys are the long flags of 'braid server --help'`},
		{"bad value", "data: /d\nmax-tries: many\n", [2]string{}, `braid.yaml:2: max-tries "many": want a whole number`},
		// A value checked by its flag's type, not later by the command:
		// the error names the file and line, not a flag.
		{"bad size", "data: /d\n\nmax-data: lots\n", [2]string{}, `braid.yaml:3: max-data "lots": want a size such as 500G, or 0 for no limit`},
		{"bad duration", "heartbeat: often\n", [2]string{}, `braid.yaml:1: heartbeat "often": want a duration such as 30s`},
		{"not a mapping", "- listen\n- data\n", [2]string{}, `braid.yaml:1: want keys and values`},
		{"nested", "data:\n  dir: /d\n", [2]string{}, `braid.yaml:1: data: want a value or a list of values`},
		{"yaml syntax", "data: [unclosed\n", [2]string{}, `braid.yaml: yaml:`},
		{"bad variable", "", [2]string{"BRAID_MAX_TRIES", "lots"}, `BRAID_MAX_TRIES="lots": want a whole number`},
		{"bad size variable", "", [2]string{"BRAID_MAX_DATA", "lots"}, `BRAID_MAX_DATA="lots": want a size such as 500G`},
		{"bad variable wins over a good file", "max-tries: 3\n", [2]string{"BRAID_VERBOSE", "maybe"}, `BRAID_VERBOSE="maybe"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env[0] != "" {
				t.Setenv(tc.env[0], tc.env[1])
			}
			var stderr strings.Builder
			_, parse := configFlags(&Env{Stdout: io.Discard, Stderr: &stderr})
			if code := parse("--config", writeConfig(t, tc.file)); code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
		})
	}
	var stderr strings.Builder
	_, parse := configFlags(&Env{Stdout: io.Discard, Stderr: &stderr})
	if code := parse("--config", "/no/such/braid.yaml"); code != 2 || !strings.Contains(stderr.String(), "--config: open /no/such/braid.yaml") {
		t.Errorf("missing file: exit %d, %q", code, stderr.String())
	}
}

// braid server runs from a config file and the environment alone.
func TestServerConfigFile(t *testing.T) {
	t.Setenv("BRAID_KEY", "config-file-test-key-0123456789")
	dir := filepath.Join(t.TempDir(), "data")
	t.Setenv("BRAID_DATA", dir)
	file := writeConfig(t, "listen: 127.0.0.1:0\ndata: /not/this/one\nretain: 7d\n")
	srv := startBraid(t, "server", "--config", file)
	srv.waitOutput(t, regexp.MustCompile(`listening on (https?://\S+) \(data in `+regexp.QuoteMeta(dir)+`\)`))
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("the data directory from BRAID_DATA: %v", err)
	}
}

// A bad value in braid server's and braid worker's config files is
// reported with the file, the line and the key, as the user wrote it,
// not as a flag they never typed; so is one from the environment.
func TestConfigFileBadValues(t *testing.T) {
	t.Setenv("BRAID_KEY", "config-file-test-key-0123456789")
	for _, tc := range []struct {
		cmd, file string
		want      []string
	}{
		{"server", "data: /tmp/braid-never\nmax-data: lots\nretain: soon\nmax-module: 0\nunit-mem: 8G\n", []string{
			`braid.yaml:2: max-data "lots": want a size such as 500G, or 0 for no limit`,
			`braid.yaml:3: retain "soon": want days such as 7d`,
			`braid.yaml:4: max-module "0": want a size such as 64M`,
			`braid.yaml:5: unit-mem "8G": want a size such as 256M (64K to 4G)`}},
		{"worker", "server: https://127.0.0.1:1\nmodule-cache: big\nmax-unit-mem: 1K\n", []string{
			`braid.yaml:2: module-cache "big": want a size such as 512M or 4G`,
			`braid.yaml:3: max-unit-mem "1K": want a size such as 512M or 2G, at least 64K`}},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			code, _, stderr := runQuick(t, tc.cmd, "--config", writeConfig(t, tc.file))
			if code != 2 {
				t.Errorf("exit %d, want 2: %s", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q\nlacks %q", stderr, w)
				}
			}
			if strings.Contains(stderr, "--max-data") || strings.Contains(stderr, "--module-cache") {
				t.Errorf("stderr names a flag the user did not give: %q", stderr)
			}
		})
	}
	t.Setenv("BRAID_MAX_DATA", "lots")
	if code, _, stderr := runQuick(t, "server", "--data", t.TempDir()); code != 2 || !strings.Contains(stderr, `BRAID_MAX_DATA="lots": want a size such as 500G`) {
		t.Errorf("BRAID_MAX_DATA=lots: exit %d, %q", code, stderr)
	}
}

// A bad --timeout (any duration flag) names the flag and the forms it
// takes, not Go's parser ("time: invalid duration").
func TestBadDurationFlag(t *testing.T) {
	for _, args := range [][]string{{"jobs", "--timeout", "long"}, {"wait", "1", "--timeout=5 minutes"}, {"server", "--heartbeat", "1"}} {
		code, _, stderr := runQuick(t, args...)
		flag := strings.SplitN(strings.TrimPrefix(args[len(args)-2], "--"), "=", 2)[0]
		if strings.HasPrefix(args[len(args)-1], "--") {
			flag = strings.SplitN(strings.TrimPrefix(args[len(args)-1], "--"), "=", 2)[0]
		}
		want := "--" + flag + ` "`
		if code != 2 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "want a duration such as 30s, 5m, 1h30m or 250ms") ||
			strings.Contains(stderr, "time: invalid duration") {
			t.Errorf("braid %s: exit %d, %q; want 2 naming %s and the forms", strings.Join(args, " "), code, stderr, want)
		}
	}
}
