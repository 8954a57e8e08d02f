package server_test

import (
	"net/http"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/server"
)

// TestSpecPathsServed: every operation openapi.yaml describes is a route
// of the server (TestSpecDeclaresAuth checks the other way round), so the
// spec promises nothing the server does not serve.
func TestSpecPathsServed(t *testing.T) {
	var spec struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, nil)
	served := map[string]bool{}
	for _, rt := range server.Routes(c.srv) {
		served[rt.Method+" "+rt.Pattern] = true
	}
	methods := map[string]string{"get": http.MethodGet, "head": http.MethodHead, "post": http.MethodPost,
		"put": http.MethodPut, "delete": http.MethodDelete, "patch": http.MethodPatch, "options": http.MethodOptions}
	n := 0
	for path, item := range spec.Paths {
		for key := range item {
			m, ok := methods[strings.ToLower(key)]
			if !ok {
				continue // parameters, summary
			}
			n++
			if !served[m+" "+path] {
				t.Errorf("openapi.yaml describes %s %s, which the server does not serve", m, path)
			}
		}
	}
	if n < len(served) {
		t.Errorf("openapi.yaml describes %d operations, the server serves %d routes", n, len(served))
	}
}
