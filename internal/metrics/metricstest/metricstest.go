// Package metricstest reads Prometheus expositions in tests: Parse lints
// and parses one, Value and Max find a series' value.
package metricstest

import (
	"bytes"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse lints an exposition in the text format with promlint (each
// problem is a test error) and returns its metric families by name.
func Parse(t testing.TB, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	return fams
}

// Value returns the value of the first series of name whose labels
// include want (a histogram's: its sample count); false if there is none.
func Value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	for _, m := range matching(fams, name, want) {
		return value(m), true
	}
	return 0, false
}

// Max returns the largest value of name's series whose labels include
// want, 0 if there is none.
func Max(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	best := 0.0
	for _, m := range matching(fams, name, want) {
		best = max(best, value(m))
	}
	return best
}

func matching(fams map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
next:
	for _, m := range fams[name].GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
