package server_test

import (
	"os"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/leaktest"
)

// TestMain fails the run if a test leaves goroutines behind. Started
// with childWorkerEnv set, the binary is a worker process instead.
func TestMain(m *testing.M) {
	if url := os.Getenv(childWorkerEnv); url != "" {
		os.Exit(runChildWorker(url))
	}
	if spec := os.Getenv(childServerEnv); spec != "" {
		os.Exit(runChildServer(spec))
	}
	leaktest.Main(m, 5*time.Second)
}
