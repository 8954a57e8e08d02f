package bench

import (
	"os"
	"testing"
)

// TestScaleRun runs the scale experiment's workload once on one server
// over SQLite and, with BRAID_TEST_POSTGRES, on two servers sharing a
// PostgreSQL database, and with BRAID_TEST_S3 as well on three servers
// sharing PostgreSQL and a bucket: every job must end done (scaleRun
// fails otherwise) and the figures must be measured.
func TestScaleRun(t *testing.T) {
	type run struct{ db, blobs string }
	runs := []run{{}}
	if admin := os.Getenv("BRAID_TEST_POSTGRES"); admin != "" {
		for range 2 {
			u, drop, err := freshDatabase(t.Context(), admin)
			if err != nil {
				t.Fatal(err)
			}
			defer drop()
			runs = append(runs, run{db: u})
		}
		if s3 := os.Getenv("BRAID_TEST_S3"); s3 != "" {
			b, drop, err := freshBucket(t.Context(), s3)
			if err != nil {
				t.Fatal(err)
			}
			defer drop()
			runs[2].blobs = b
		} else {
			runs = runs[:2]
		}
	}
	for i, r := range runs {
		res, err := scaleRun(t.Context(), r.db, r.blobs, i+1, 12)
		if err != nil {
			t.Fatalf("%d server(s) over %q, blobs %q: %v", i+1, r.db, r.blobs, err)
		}
		if res.unitsPerSec <= 0 || res.p50 <= 0 || res.p95 < res.p50 {
			t.Errorf("%d server(s): figures %+v", i+1, res)
		}
	}
}
