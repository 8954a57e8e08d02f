package client

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports keeps client light: of braid it imports only api, so that
// programs embedding a client do not link the server, the worker or the
// transport.
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/braid-hpc/braid") && imp != "github.com/braid-hpc/braid/api" {
			t.Errorf("client imports %s; it may import only api of braid", imp)
		}
		if strings.Contains(imp, ".") && !strings.HasPrefix(imp, "github.com/braid-hpc/braid") {
			t.Errorf("client imports %s, outside the standard library", imp)
		}
	}
}
