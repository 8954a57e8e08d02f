package ops

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sleep returns the sleep operation, for scheduling tests: Hint.Units
// units (default 1) that each wait "ms" milliseconds and return nothing.
// Parameter "fail" lists unit indexes (comma-separated) that fail instead,
// to test how a failing unit fails its job.
func Sleep() Op { return sleep{} }

type sleep struct{}

func (sleep) Name() string { return "sleep" }
func (sleep) Info() Info {
	return Info{
		Doc: "units that wait a while and return nothing; for scheduling tests",
		Params: []Param{
			{Name: "ms", Default: "100", Doc: "milliseconds each unit waits, 0 to 3600000"},
			{Name: "fail", Doc: "comma-separated unit indexes that fail instead"},
		},
	}
}

func (s sleep) Split(_ io.ReaderAt, _ int64, params map[string]string, hint Hint) ([]UnitSpec, error) {
	if err := hint.check("sleep", false); err != nil {
		return nil, err
	}
	if err := checkParams("sleep", s.Info().Params, params); err != nil {
		return nil, err
	}
	if _, _, err := s.parse(params); err != nil {
		return nil, err
	}
	n := max(hint.Units, 1)
	if err := checkUnits("sleep", n, hint); err != nil {
		return nil, err
	}
	specs := make([]UnitSpec, n)
	for i := range specs {
		specs[i].Params = withParam(params, "unit", strconv.Itoa(i))
	}
	return repeat(specs, hint.copies()), nil
}

func (sleep) parse(params map[string]string) (time.Duration, []int, error) {
	ms, err := intParam("sleep", params, "ms", 100, 0, 3600_000)
	if err != nil {
		return 0, nil, err
	}
	var fail []int
	for _, f := range strings.Split(params["fail"], ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		i, err := strconv.Atoi(f)
		if err != nil || i < 0 {
			return 0, nil, fmt.Errorf("sleep: parameter fail=%q: want unit indexes like 0,3: %w", params["fail"], ErrBadParam)
		}
		fail = append(fail, i)
	}
	return time.Duration(ms) * time.Millisecond, fail, nil
}

func (s sleep) Run(ctx context.Context, params map[string]string, _ [][]byte) ([]byte, error) {
	d, fail, err := s.parse(params)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
	}
	if unit, err := strconv.Atoi(params["unit"]); err == nil && slices.Contains(fail, unit) {
		return nil, fmt.Errorf("sleep: unit %d fails as the job asked (parameter fail)", unit)
	}
	return nil, nil
}

func (sleep) Assemble(_ map[string]string, hint Hint, results [][]byte) ([]byte, error) {
	_, err := firstCopy("sleep", results, hint)
	return nil, err
}
