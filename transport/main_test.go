package transport

import (
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/leaktest"
)

// TestMain fails the run if a test leaves session goroutines behind.
func TestMain(m *testing.M) { leaktest.Main(m, 3*time.Second) }
