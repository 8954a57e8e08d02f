package store

import (
	"runtime"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/leaktest"
)

// TestMain fails the run if a test leaves goroutines behind.
func TestMain(m *testing.M) { leaktest.Main(m, time.Second) }

type runtimeMem struct{ total uint64 }

func (m *runtimeMem) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.total = s.TotalAlloc
}
