package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The completion scripts parse in their shell (where it is installed),
// list every command, and complete commands, subcommands and flags as a
// user would see them.
func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	for _, sh := range []string{"bash", "zsh", "fish"} {
		t.Run(sh, func(t *testing.T) {
			code, out, errs := runQuick(t, "completion", sh)
			if code != 0 || errs != "" {
				t.Fatalf("exit %d: %s", code, errs)
			}
			for name := range commands {
				if !strings.Contains(out, name) {
					t.Errorf("the %s script does not name the command %q", sh, name)
				}
			}
			for _, want := range []string{"parallel", "path-policy", "output", "subs"} {
				if want == "subs" {
					want = "create" // token create, a subcommand
				}
				if !strings.Contains(out, want) {
					t.Errorf("the %s script lacks %q", sh, want)
				}
			}
			file := filepath.Join(dir, "braid."+sh)
			if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			bin, err := exec.LookPath(sh)
			if err != nil {
				t.Skipf("%s is not installed (apt-get install %s): only generated", sh, sh)
			}
			if b, err := exec.CommandContext(t.Context(), bin, "-n", file).CombinedOutput(); err != nil {
				t.Fatalf("%s -n rejects the script: %v\n%s", sh, err, b)
			}
			// What completing a partial command line offers.
			var complete func(line string) string
			switch sh {
			case "bash":
				complete = func(line string) string {
					words := strings.Split(line, " ")
					script := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _braid; echo "${COMPREPLY[*]}"`
					b, err := exec.CommandContext(t.Context(), bin, append([]string{"-c", script, "bash", file}, words...)...).CombinedOutput()
					if err != nil {
						t.Fatalf("%q: %v\n%s", line, err, b)
					}
					return string(b)
				}
			case "fish":
				complete = func(line string) string {
					b, err := exec.CommandContext(t.Context(), bin, "-c", `source $argv[1]; complete -C $argv[2]`, file, line).CombinedOutput()
					if err != nil {
						t.Fatalf("%q: %v\n%s", line, err, b)
					}
					return string(b)
				}
			default:
				return // zsh completes only in an interactive shell
			}
			for _, tc := range []struct{ line, want, not string }{
				{"braid pe", "perf", "send"},
				{"braid perf --par", "--parallel", "--path-policy"},
				{"braid send --pa", "--parallel", "--count"},
				{"braid op ", "add", "perf"},
				{"braid testbed exec --na", "--name", "--parallel"},
				{"braid completion --h", "--help", "--json"},
			} {
				got := complete(tc.line)
				if !strings.Contains(got, tc.want) || strings.Contains(got, tc.not) {
					t.Errorf("%s completes %q to %q; want %q, not %q", sh, tc.line, got, tc.want, tc.not)
				}
			}
		})
	}
	if code, _, errs := runQuick(t, "completion", "tcsh"); code != 2 || !strings.Contains(errs, `unknown shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d, %s", code, errs)
	}
}
