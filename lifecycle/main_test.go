package lifecycle

import (
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/leaktest"
)

// TestMain fails the run if a test leaves goroutines behind.
func TestMain(m *testing.M) { leaktest.Main(m, 5*time.Second) }
