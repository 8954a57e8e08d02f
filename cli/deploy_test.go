package cli

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/braid-hpc/braid/internal/testenv"
)

const deployDir = "../deploy"

// flagSetOf returns the real FlagSet of a command ("server", "op add").
func flagSetOf(t *testing.T, name string) *pflag.FlagSet {
	t.Helper()
	words := strings.Fields(name)
	c, ok := commands[words[0]]
	if !ok {
		t.Fatalf("no command %q", words[0])
	}
	var fs *pflag.FlagSet
	env := &Env{Stdout: io.Discard, Stderr: io.Discard, collect: func(f *pflag.FlagSet) { fs = f }}
	c.run(t.Context(), env, append(words[1:], "--help"))
	if fs == nil {
		t.Fatalf("braid %s has no flags", name)
	}
	return fs
}

// checkArgv checks that argv (after the binary) is a braid command line
// this CLI accepts, and that the --config file it names, read from
// deploy/, sets only flags the command has.
func checkArgv(t *testing.T, where string, argv []string) {
	t.Helper()
	if len(argv) == 0 {
		t.Fatalf("%s: no braid command", where)
	}
	fs := flagSetOf(t, argv[0])
	fs.SetOutput(io.Discard)
	if err := fs.Parse(argv[1:]); err != nil {
		t.Errorf("%s: braid %s: %v", where, strings.Join(argv, " "), err)
		return
	}
	if fs.NArg() > 0 {
		t.Errorf("%s: braid %s takes no arguments %q", where, argv[0], fs.Args())
	}
	if cfg := fs.Lookup("config"); cfg != nil && cfg.Value.String() != "" {
		local := filepath.Join(deployDir, filepath.Base(cfg.Value.String()))
		b, err := os.ReadFile(local)
		if err != nil {
			t.Fatalf("%s: --config %s: deploy/ has no %s", where, cfg.Value, filepath.Base(local))
		}
		if err := applyConfigFile(fs, local, b); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
}

// unit reads a systemd unit file into section -> key -> values.
func unit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", path, n, line)
			}
			out[section][strings.TrimSpace(k)] = append(out[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return out
}

// The systemd units run commands and flags this braid has, with config
// files from deploy/ whose keys are its flags; systemd-analyze verify
// accepts them where it is installed.
func TestDeploySystemdUnits(t *testing.T) {
	units, _ := filepath.Glob(filepath.Join(deployDir, "*.service"))
	want := map[string]string{"braid-server.service": "server", "braid-worker.service": "worker"}
	if len(units) != len(want) {
		t.Fatalf("deploy/ has units %v, want %v", units, want)
	}
	for _, path := range units {
		u := unit(t, path)
		for _, s := range []string{"Unit", "Service", "Install"} {
			if u[s] == nil {
				t.Errorf("%s: no [%s] section", path, s)
			}
		}
		exec := u["Service"]["ExecStart"]
		if len(exec) != 1 {
			t.Fatalf("%s: ExecStart %q, want one", path, exec)
		}
		argv := strings.Fields(exec[0])
		if argv[0] != "/usr/local/bin/braid" || len(argv) < 2 || argv[1] != want[filepath.Base(path)] {
			t.Errorf("%s: ExecStart=%s, want /usr/local/bin/braid %s ...", path, exec[0], want[filepath.Base(path)])
		}
		checkArgv(t, path, argv[1:])
		if u["Install"]["WantedBy"] == nil {
			t.Errorf("%s: no WantedBy: systemctl enable would do nothing", path)
		}
	}

	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testenv.Missing(t, testenv.Systemd, "systemd-analyze is not installed (apt-get install systemd): the units were checked against the CLI only")
	}
	// systemd-analyze checks that ExecStart is executable: stand this
	// test binary in for /usr/local/bin/braid.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var files []string
	for _, path := range units {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(dst, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/braid", self)), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, dst)
	}
	out, err := exec.CommandContext(t.Context(), sa, append([]string{"verify", "--man=no"}, files...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// The Containerfile builds the real main package with the Go version of
// go.mod, copies what it built, and runs a command line this braid takes.
func TestDeployContainerfile(t *testing.T) {
	path := filepath.Join(deployDir, "Containerfile")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(mod))
	var built, copied string
	var entry, cmd []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "FROM":
			if m := regexp.MustCompile(`golang:(\d+\.\d+)`).FindStringSubmatch(rest); m != nil && (goVersion == nil || m[1] != goVersion[1]) {
				t.Errorf("builds with Go %s, go.mod says %v", m[1], goVersion)
			}
		case "RUN":
			if m := regexp.MustCompile(`go build .*-o (\S+) (\S+)`).FindStringSubmatch(rest); m != nil {
				built = m[1]
				if _, err := os.Stat(filepath.Join("..", m[2], "main.go")); err != nil {
					t.Errorf("go build %s: %v", m[2], err)
				}
			}
		case "COPY":
			f := strings.Fields(rest)
			if len(f) >= 3 && f[0] == "--from=build" {
				copied = f[1]
			} else if len(f) == 2 && f[0] != "." {
				if _, err := os.Stat(filepath.Join("..", f[0])); err != nil {
					t.Errorf("COPY %s: %v", f[0], err)
				}
			}
		case "ENTRYPOINT", "CMD":
			var argv []string
			if err := json.Unmarshal([]byte(rest), &argv); err != nil {
				t.Errorf("%s %s: want the exec (JSON) form: %v", word, rest, err)
			}
			if word == "ENTRYPOINT" {
				entry = argv
			} else {
				cmd = argv
			}
		}
	}
	if built == "" || built != copied {
		t.Errorf("go build -o %q, COPY --from=build %q", built, copied)
	}
	if len(entry) != 1 || entry[0] != "/usr/local/bin/braid" {
		t.Errorf("ENTRYPOINT %q", entry)
	}
	checkArgv(t, path+" CMD", cmd)
}
