package store

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports keeps store free of the rest of braid: the server and worker
// import it, never the other way round.
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/braid-hpc/braid") {
			t.Errorf("store imports %s; it must import nothing else of braid", imp)
		}
	}
}
