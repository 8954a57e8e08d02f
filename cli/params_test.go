package cli

import (
	"strings"
	"testing"
)

// TestFmtParamsLong: status shows a long parameter value by its start
// and size, not 900 KB of it; short ones whole.
func TestFmtParamsLong(t *testing.T) {
	got := fmtParams(map[string]string{"big": strings.Repeat("x", 900000), "radius": "5"})
	if len(got) > 120 || !strings.Contains(got, "big=xxxx") || !strings.Contains(got, "... ("+formatBytes(900000)+")") || !strings.HasSuffix(got, " radius=5") {
		t.Errorf("fmtParams = %q", got)
	}
}
