package ops

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// checkParams fails on a parameter name the operation does not declare.
func checkParams(op string, known []Param, params map[string]string) error {
	for name := range params {
		found := false
		for _, p := range known {
			if p.Name == name {
				found = true
				break
			}
		}
		if !found {
			names := make([]string, len(known))
			for i, p := range known {
				names[i] = p.Name
			}
			have := "it takes none"
			if len(names) > 0 {
				have = "known: " + strings.Join(names, ", ")
			}
			return fmt.Errorf("%s: unknown parameter %q (%s): %w", op, name, have, ErrBadParam)
		}
	}
	return nil
}

// intParam parses params[name] as an integer in [lo, hi]; missing means def.
func intParam(op string, params map[string]string, name string, def, lo, hi int) (int, error) {
	s, ok := params[name]
	if !ok || s == "" {
		return def, nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%s: parameter %s=%q: want a whole number from %d to %d: %w", op, name, s, lo, hi, ErrBadParam)
	}
	return v, nil
}

// floatParam parses params[name] as a number in (lo, hi]; missing means
// def, and ok reports whether it was given.
func floatParam(op string, params map[string]string, name string, def, lo, hi float64) (v float64, ok bool, err error) {
	s, ok := params[name]
	if !ok || s == "" {
		return def, false, nil
	}
	v, err = strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || v <= lo || v > hi {
		return 0, false, fmt.Errorf("%s: parameter %s=%q: want a number above %g and at most %g: %w", op, name, s, lo, hi, ErrBadParam)
	}
	return v, true, nil
}

// withParam returns a copy of params with name set to value.
func withParam(params map[string]string, name, value string) map[string]string {
	out := make(map[string]string, len(params)+1)
	for k, v := range params {
		out[k] = v
	}
	out[name] = value
	return out
}
