package perf

import (
	"testing"
	"time"
)

func TestBaselineParts(t *testing.T) {
	for _, tt := range []struct {
		size int64
		k    int
	}{{10, 3}, {1 << 20, 2}, {7, 7}, {1000001, 4}} {
		parts := baselineParts(tt.size, tt.k)
		var sum int64
		for _, p := range parts {
			sum += p
			if p < tt.size/int64(tt.k) || p > tt.size/int64(tt.k)+1 {
				t.Errorf("%d over %d: part %d", tt.size, tt.k, p)
			}
		}
		if sum != tt.size || len(parts) != tt.k {
			t.Errorf("%d over %d: %v", tt.size, tt.k, parts)
		}
	}
}

func TestSummarizeRTT(t *testing.T) {
	var rtts []time.Duration
	for i := 100; i >= 1; i-- {
		rtts = append(rtts, time.Duration(i)*time.Millisecond)
	}
	s := summarizeRTT(rtts)
	if s.n != 100 || s.min != time.Millisecond || s.max != 100*time.Millisecond || s.p50 != 50*time.Millisecond ||
		s.p99 != 99*time.Millisecond || s.mean != 50500*time.Microsecond {
		t.Errorf("%+v", s)
	}
}
