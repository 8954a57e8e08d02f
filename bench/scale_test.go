package bench

import (
	"os"
	"testing"
)

// TestScaleRun runs the scale experiment's workload once on one server
// over SQLite and, with BRAID_TEST_POSTGRES, on two servers sharing a
// PostgreSQL database: every job must end done (scaleRun fails
// otherwise) and the figures must be measured.
func TestScaleRun(t *testing.T) {
	runs := []string{""}
	if admin := os.Getenv("BRAID_TEST_POSTGRES"); admin != "" {
		u, drop, err := freshDatabase(t.Context(), admin)
		if err != nil {
			t.Fatal(err)
		}
		defer drop()
		runs = append(runs, u)
	}
	for i, db := range runs {
		res, err := scaleRun(t.Context(), db, i+1, 12)
		if err != nil {
			t.Fatalf("%d server(s) over %q: %v", i+1, db, err)
		}
		if res.unitsPerSec <= 0 || res.p50 <= 0 || res.p95 < res.p50 {
			t.Errorf("%d server(s): figures %+v", i+1, res)
		}
	}
}
