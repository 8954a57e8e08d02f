package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLoadPipelineInputs: a step's inputs list becomes the request's
// Inputs, blob:ID as ID; input and inputs together, or an empty input in
// the list, are refused naming the step.
func TestLoadPipelineInputs(t *testing.T) {
	id := strings.Repeat("ab", 32)
	dir := t.TempDir()
	load := func(yaml string) error {
		t.Helper()
		p := filepath.Join(dir, "p.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		req, err := loadPipeline(t.Context(), nil, p)
		if err == nil {
			if got := req.Steps[1].Inputs; !slices.Equal(got, []string{"step:a", id, "job:3"}) || req.Steps[1].Input != "" {
				t.Errorf("inputs %q, input %q", got, req.Steps[1].Input)
			}
			if req.Steps[0].Input != id || req.Steps[0].Inputs != nil {
				t.Errorf("step a: input %q, inputs %q", req.Steps[0].Input, req.Steps[0].Inputs)
			}
		}
		return err
	}
	if err := load("steps:\n- {name: a, op: noop, input: blob:" + id + "}\n- {name: b, op: noop, inputs: [step:a, blob:" + id + ", job:3]}\n"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"steps:\n- {name: a, op: noop, input: " + id + ", inputs: [" + id + "]}\n", `step 1 ("a"): give input or inputs, not both`},
		{"steps:\n- {name: a, op: noop, inputs: [" + id + ", \"\"]}\n", `step 1 ("a"): an empty input`},
		{"steps:\n- {name: a, op: noop}\n", `step 1 ("a"): no input`},
	} {
		if err := load(c.yaml); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want it to say %q", c.yaml, err, c.want)
		}
	}
}
