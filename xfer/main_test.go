package xfer

import (
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.Main(m, 5*time.Second) }
