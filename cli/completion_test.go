package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testenv"
)

// zshDriver drives an interactive zsh in a pseudo-terminal (module
// zsh/zpty), as a user at a terminal: it loads the completion script
// $COMPFILE, types $LINE and a TAB, and the shell writes to $OUT every
// match the completion offered ("match: ..."; a wrapper of compadd
// records them) and then the command line after the TAB ("buffer: ...").
// zsh completes only in its line editor, so there is no other way.
const zshDriver = `
zmodload zsh/zpty || exit 3
zpty -b z zsh -f -i || exit 3
zpty -w z 'PS1="" PS2=""; unsetopt beep'
zpty -w z 'autoload -Uz compinit && compinit -u -D'
zpty -w z 'source $COMPFILE'
zpty -w z 'compadd() { if (( ${@[(I)-[OAD]]} )); then builtin compadd "$@"; return; fi; local -a m; builtin compadd -O m "$@"; print -rl -- "match: "${^m} >>$OUT; builtin compadd "$@" }'
zpty -w z 'dump() { print -r -- "buffer: $BUFFER" >>$OUT; print -r -- end >>$OUT }; zle -N dump; bindkey "^B" dump; bindkey "^I" complete-word'
zpty -w -n z "$LINE"$'\t\x02'
for i in {1..200}; do
  [[ -f $OUT ]] && grep -qx end $OUT && break
  sleep 0.05
done
zpty -d z
grep -qx end $OUT || { print -u2 "zsh did not complete within 10s"; exit 4; }
`

// The completion scripts parse in their shell (where it is installed),
// list every command, and complete commands, subcommands and flags as a
// user would see them: bash through its completion function, fish with
// complete -C, zsh in an interactive shell on a pseudo-terminal. A shell
// that is not installed skips, unless BRAID_REQUIRE_SHELLS=1 (CI).
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
				if os.Getenv("BRAID_REQUIRE_SHELLS") == "1" {
					t.Fatalf("BRAID_REQUIRE_SHELLS=1 but %s is not installed (apt-get install %s)", sh, sh)
				}
				t.Skipf("%s is not installed (apt-get install %s): only generated; set BRAID_REQUIRE_SHELLS=1 to make this a failure", sh, sh)
			}
			if b, err := exec.CommandContext(t.Context(), bin, "-n", file).CombinedOutput(); err != nil {
				t.Fatalf("%s -n rejects the script: %v\n%s", sh, err, b)
			}
			// What completing a partial command line offers.
			var complete func(line string) string
			switch sh {
			case "bash":
				complete = func(line string) string {
					// bash splits words at '=' too (COMP_WORDBREAKS):
					// --policy=pro is --policy, = and pro.
					words := strings.Split(strings.ReplaceAll(line, "=", " = "), " ")
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
			case "zsh":
				driver := filepath.Join(dir, "drive.zsh")
				if err := os.WriteFile(driver, []byte(zshDriver), 0o644); err != nil {
					t.Fatal(err)
				}
				n := 0
				complete = func(line string) string {
					n++
					out := filepath.Join(dir, fmt.Sprintf("zsh-%d.out", n))
					ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
					defer cancel()
					cmd := exec.CommandContext(ctx, bin, "-f", driver)
					cmd.Env = append(os.Environ(), "COMPFILE="+file, "OUT="+out, "LINE="+line)
					if b, err := cmd.CombinedOutput(); err != nil {
						if code := cmd.ProcessState.ExitCode(); code == 3 {
							testenv.Missing(t, "BRAID_REQUIRE_SHELLS", fmt.Sprintf("this zsh has no zsh/zpty module (Debian's has): %s", b))
						}
						t.Fatalf("%q: %v\n%s", line, err, b)
					}
					b, err := os.ReadFile(out)
					if err != nil {
						t.Fatal(err)
					}
					return string(b)
				}
				// A unique match is inserted into the command line.
				for _, tc := range []struct{ line, want string }{
					{"braid pe", "buffer: braid perf \n"},
					{"braid perf --rev", "buffer: braid perf --reverse \n"},
					{"braid token cr", "buffer: braid token create \n"},
				} {
					if got := complete(tc.line); !strings.Contains(got, tc.want) {
						t.Errorf("zsh: TAB after %q gives %q; want %q", tc.line, got, tc.want)
					}
				}
			}
			for _, tc := range []struct{ line, want, not string }{
				{"braid pe", "perf", "send"},
				{"braid perf --ti", "--title", "--count"},
				{"braid perf --tim", "--time", "--title"},
				{"braid perf --par", "--parallel", "--path-policy"},
				{"braid send --pa", "--parallel", "--count"},
				{"braid op ", "add", "perf"},
				{"braid testbed exec --na", "--name", "--parallel"},
				{"braid completion --h", "--help", "--json"},
				// A flag of a few fixed values offers them, not files.
				{"braid submit --policy pro", "proportional", "cli.go"},
				{"braid submit --policy ", "dynamic", "cli.go"},
				{"braid server --log-level w", "warn", "cli.go"},
				// --flag=value, which bash splits at '=': before, the
				// word before the cursor was "=" and bash offered files.
				{"braid submit --policy=", "dynamic", "cli.go"},
				{"braid submit --policy=pro", "proportional", "cli.go"},
				{"braid perf --stripe=", "basic", "cli.go"},
				// Flags and arguments of a few values, which completed
				// files before.
				{"braid token create --role ", "monitor", "cli.go"},
				{"braid perf --mode ", "pingpong", "cli.go"},
				{"braid perf -C ", "reno", "cli.go"},
				{"braid jobs --state ", "canceled", "cli.go"},
				{"braid worker --transport ", "sctp-udp", "cli.go"},
				{"braid completion ", "fish", "cli.go"},
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
