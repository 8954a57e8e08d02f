package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestDidYouMean: a mistyped command or flag is answered with the nearest
// names; nothing is suggested for a word far from all of them.
func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr; empty: no suggestion
	}{
		{[]string{"sever"}, `unknown command "sever"; did you mean server?`},
		{[]string{"sumbit"}, "did you mean submit?"},
		{[]string{"help", "wrker"}, "did you mean worker?"},
		{[]string{"server", "--max-dat", "1"}, "unknown flag: --max-dat; did you mean --max-data?"},
		{[]string{"perf", "--bidirectional"}, "did you mean --bidir?"},
		// A subcommand, with the group's real ones (before: testbed
		// listed none, and op's list disagreed with 'braid help').
		{[]string{"testbed", "upp"}, `unknown subcommand "upp"; want up, down, show, exec, link, rate, loss or list; did you mean up?`},
		{[]string{"op", "ad"}, `unknown subcommand "ad"; want add, rm or run; did you mean add?`},
		{[]string{"token", "crate"}, "did you mean create?"},
		{[]string{"zzzzzz"}, ""},
		{[]string{"server", "--qqqqqqqq"}, ""},
	} {
		code, _, stderr := runQuick(t, tc.args...)
		if code != 2 {
			t.Errorf("braid %v: exit %d, want 2", tc.args, code)
		}
		if tc.want == "" {
			if strings.Contains(stderr, "did you mean") {
				t.Errorf("braid %v suggested something far: %s", tc.args, stderr)
			}
			continue
		}
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("braid %v: stderr %q, want %q", tc.args, stderr, tc.want)
		}
	}
}

// TestEnvTypos: a BRAID_ variable close to one the command reads
// (BRAID_MAXDATA, a flag's with --config; BRAID_SEVRER, a client's) is
// named with the one meant; braid's own variables, the tests', those
// another command reads and those far from all (BRAID_FOO is three edits
// from BRAID_DB) are not.
func TestEnvTypos(t *testing.T) {
	others := func() map[string]bool { return map[string]bool{"BRAID_TOKENS": true} }
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	fs.String("max-data", "", "")
	fs.String("data", "", "")
	fs.Duration("heartbeat", 0, "")
	configFlag(fs)
	got := envTypos(fs, []string{
		"BRAID_MAXDATA=1", "BRAID_HEARTBEET=2s", "BRAID_DATA=/x", "BRAID_KEY=k", "BRAID_TOKEN=t",
		"BRAID_REQUIRE_WASM=1", "BRAID_TEST_S3=x", "HOME=/root", "BRAID_SOMETHING_ELSE=1", "BRAID_FOO=1", "BRAID_TOKENS=1",
	}, others)
	want := []string{
		"BRAID_HEARTBEET is not a setting of braid server and is ignored; did you mean BRAID_HEARTBEAT (--heartbeat)?",
		"BRAID_MAXDATA is not a setting of braid server and is ignored; did you mean BRAID_MAX_DATA (--max-data)?",
	}
	if !slices.Equal(got, want) {
		t.Errorf("server: envTypos = %q\nwant %q", got, want)
	}
	// A client command, without --config, reads braid's own variables.
	client := pflag.NewFlagSet("jobs", pflag.ContinueOnError)
	client.String("server", "", "")
	got = envTypos(client, []string{"BRAID_SEVRER=https://10.0.0.1:7400", "BRAID_SERVER=x", "BRAID_FOO=1", "BRAID_MAXDATA=1"}, others)
	want = []string{"BRAID_SEVRER is not a setting of braid jobs and is ignored; did you mean BRAID_SERVER?"}
	if !slices.Equal(got, want) {
		t.Errorf("jobs: envTypos = %q\nwant %q", got, want)
	}
}

// The warnings reach the user of a client command, and of a command with
// a config file; an unknown config key gets the nearest flag's name.
func TestTyposEndToEnd(t *testing.T) {
	t.Setenv("BRAID_SEVRER", "https://10.0.0.1:7400")
	t.Setenv("BRAID_KEY", "typos-end-to-end-key-0123")
	_, _, stderr := runQuick(t, "jobs", "--server", "https://127.0.0.1:1", "--timeout", "2s")
	if !strings.Contains(stderr, "warning: BRAID_SEVRER is not a setting of braid jobs and is ignored; did you mean BRAID_SERVER?") {
		t.Errorf("braid jobs with BRAID_SEVRER set: %s", stderr)
	}
	cfg := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(cfg, []byte("max-dat: 1G\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runQuick(t, "server", "--config", cfg)
	if code != 2 || !strings.Contains(stderr, `unknown key "max-dat"`) || !strings.Contains(stderr, "did you mean max-data?") {
		t.Errorf("server --config with max-dat: exit %d: %s", code, stderr)
	}
	// 'braid help' says what op's subcommands are.
	_, out, _ := runQuick(t, "help")
	if !strings.Contains(out, "add, rm or run a user operation") {
		t.Errorf("braid help's op line does not name add, rm and run:\n%s", out)
	}
}

// TestLogLevelHelp: the default of --log-level is said once.
func TestLogLevelHelp(t *testing.T) {
	_, stdout, _ := runQuick(t, "server", "--help")
	if n := strings.Count(stdout, "(default info)"); n > 1 {
		t.Errorf("--help says (default info) %d times", n)
	}
}
