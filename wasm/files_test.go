package wasm

import (
	"errors"
	"testing"
)

// TestRunFiles: a module finds the files of RunFiles in /in, in the order
// given, with their bytes, and can neither write there nor reach anything
// else of the host.
func TestRunFiles(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "files")
	stdin := []byte("leftright")
	files := []File{{Name: "left", Data: stdin[:4]}, {Name: "right", Data: stdin[4:]}, {Name: "empty"}}
	out, err := m.RunFiles(t.Context(), "files", stdin, files, nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := "left=left\nright=right\nempty=\nwrite refused\npasswd refused\n"
	if string(out) != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
	// Without files there is no /in, as before.
	out, err = m.Run(t.Context(), "files", stdin, nil, Limits{})
	if re := runError(t, err); re.Reason != ReasonExit || string(out) != "" {
		t.Errorf("without files: %v, output %q; want exit 1", err, out)
	}
}

// TestRunFilesBadNames: names that are not one path element, or that
// repeat, are refused before the module runs.
func TestRunFilesBadNames(t *testing.T) {
	e := newEngine(t, Config{})
	m := compile(t, e, "files")
	for _, name := range []string{"", ".", "..", "a/b", "nul\x00"} {
		_, err := m.RunFiles(t.Context(), "files", nil, []File{{Name: name}}, nil, Limits{})
		if !errors.Is(err, ErrBadFile) {
			t.Errorf("name %q: %v; want ErrBadFile", name, err)
		}
	}
	_, err := m.RunFiles(t.Context(), "files", nil, []File{{Name: "a"}, {Name: "a"}}, nil, Limits{})
	if !errors.Is(err, ErrBadFile) {
		t.Errorf("a name twice: %v; want ErrBadFile", err)
	}
}
