package sched

import (
	"slices"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]Policy{"": Dynamic, "dynamic": Dynamic, "Equal": Equal, " proportional ": Proportional} {
		got, err := ParsePolicy(in)
		if err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %v, %v", in, got, err)
		}
		if in != "" && got.String() != strings.ToLower(strings.TrimSpace(in)) {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	if _, err := ParsePolicy("fastest"); err == nil || !strings.Contains(err.Error(), "dynamic, equal or proportional") {
		t.Errorf("unknown policy: %v", err)
	}
}

func TestShares(t *testing.T) {
	ws := func(streams ...int) []Worker {
		var out []Worker
		for _, s := range streams {
			out = append(out, Worker{Streams: s})
		}
		return out
	}
	tests := []struct {
		name    string
		p       Policy
		n       int
		workers []Worker
		want    []int
	}{
		{"equal even", Equal, 9, ws(2, 2, 1), []int{3, 3, 3}},
		{"equal remainder first", Equal, 10, ws(2, 2, 1), []int{4, 3, 3}},
		{"equal fewer units", Equal, 2, ws(1, 1, 1), []int{1, 1, 0}},
		{"equal none", Equal, 0, ws(1, 1), []int{0, 0}},
		{"proportional exact", Proportional, 10, ws(2, 2, 1), []int{4, 4, 2}},
		{"proportional 3-3-1", Proportional, 7, ws(3, 3, 1), []int{3, 3, 1}},
		{"proportional largest remainder", Proportional, 10, ws(3, 3, 1), []int{4, 4, 2}},
		{"proportional tie goes first", Proportional, 1, ws(1, 1), []int{1, 0}},
		{"proportional zero streams weigh 1", Proportional, 4, ws(0, 3), []int{1, 3}},
		{"dynamic has none", Dynamic, 10, ws(1, 1), nil},
		{"no workers", Equal, 10, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Shares(tt.p, tt.n, tt.workers)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Shares = %v, want %v", got, tt.want)
			}
			sum := 0
			for _, n := range got {
				sum += n
			}
			if got != nil && sum != tt.n {
				t.Errorf("shares sum to %d, want %d", sum, tt.n)
			}
		})
	}
}
