package cli

import (
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

// TestEnvTypos: a BRAID_ variable close to a flag's (BRAID_MAXDATA) is
// named with the one meant; braid's own variables and the tests' are not.
func TestEnvTypos(t *testing.T) {
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	fs.String("max-data", "", "")
	fs.String("data", "", "")
	fs.Duration("heartbeat", 0, "")
	got := envTypos(fs, []string{
		"BRAID_MAXDATA=1", "BRAID_HEARTBEET=2s", "BRAID_DATA=/x", "BRAID_KEY=k", "BRAID_TOKEN=t",
		"BRAID_REQUIRE_WASM=1", "BRAID_TEST_S3=x", "HOME=/root", "BRAID_SOMETHING_ELSE=1",
	})
	want := []string{
		"BRAID_HEARTBEET is not a setting of braid server and is ignored; did you mean BRAID_HEARTBEAT (--heartbeat)?",
		"BRAID_MAXDATA is not a setting of braid server and is ignored; did you mean BRAID_MAX_DATA (--max-data)?",
	}
	if !slices.Equal(got, want) {
		t.Errorf("envTypos = %q\nwant %q", got, want)
	}
}

// TestLogLevelHelp: the default of --log-level is said once.
func TestLogLevelHelp(t *testing.T) {
	_, stdout, _ := runQuick(t, "server", "--help")
	if n := strings.Count(stdout, "(default info)"); n > 1 {
		t.Errorf("--help says (default info) %d times", n)
	}
}
