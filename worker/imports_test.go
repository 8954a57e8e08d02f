package worker

import (
	"go/build"
	"testing"
)

// TestImports: a worker does not link the server, the scheduler or the
// job store.
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		switch imp {
		case "github.com/braid-hpc/braid/server", "github.com/braid-hpc/braid/sched", "github.com/braid-hpc/braid/store":
			t.Errorf("worker imports %s", imp)
		}
	}
}
