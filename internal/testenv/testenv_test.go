package testenv

import (
	"strings"
	"testing"
)

// fakeTB records how Missing ends a test.
type fakeTB struct {
	testing.TB
	fatal, skip string
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Fatalf(format string, args ...any) { f.fatal = format }
func (f *fakeTB) Skip(args ...any)                  { f.skip = args[0].(string) }

func TestMissing(t *testing.T) {
	const v = "BRAID_REQUIRE_TESTENV_TEST"
	t.Setenv(v, "")
	var tb fakeTB
	Missing(&tb, v, "frobnicate is not installed")
	if tb.fatal != "" || !strings.Contains(tb.skip, "frobnicate is not installed") || !strings.Contains(tb.skip, v+"=1") {
		t.Errorf("variable unset: fatal %q, skip %q; want a skip naming the reason and the variable", tb.fatal, tb.skip)
	}
	t.Setenv(v, "1")
	tb = fakeTB{}
	Missing(&tb, v, "frobnicate is not installed")
	if tb.fatal == "" || tb.skip != "" {
		t.Errorf("%s=1: fatal %q, skip %q; want a failure", v, tb.fatal, tb.skip)
	}
}
