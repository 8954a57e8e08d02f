package uml

import (
	"errors"
	"testing"
)

// The boot tests of this package (output, environment, working directory
// and exit status; modules on demand; a timeout killing the guest; a
// missing module) are internal/vmkernel's, which run them on each of its
// backends and skip UML's where UML does not boot on this CPU.

func TestPopulate(t *testing.T) {
	if _, err := (Config{Kernel: "/nonexistent/linux.uml"}).populate(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("missing kernel: %v, want ErrUnavailable", err)
	}
	if _, err := (Config{Kernel: "/bin/sh", Modules: t.TempDir()}).populate(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("modules without modules.dep: %v, want ErrUnavailable", err)
	}
	if Available() == nil {
		if _, err := (Config{Env: []string{"A B=1"}}).populate(); err == nil {
			t.Error("bad environment key accepted")
		}
		if _, err := Run(t.Context(), Config{}); err == nil {
			t.Error("Run without a command succeeded")
		}
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":        "''",
		"a b":     "'a b'",
		"it's":    `'it'\''s'`,
		"$HOME;x": "'$HOME;x'",
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}
