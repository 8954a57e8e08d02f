package sched

import (
	"fmt"
	"strings"
)

// Policy decides how a job's units are shared among workers.
type Policy int

// Policies. The zero value is Dynamic.
const (
	// Dynamic hands the next ready unit to any stream with room.
	Dynamic Policy = iota
	// Equal splits each operation's units evenly among its workers when
	// the job arrives.
	Equal
	// Proportional splits them in proportion to the workers' streams.
	Proportional
)

// ParsePolicy parses "dynamic", "equal" or "proportional"; the empty string
// is Dynamic.
func ParsePolicy(s string) (Policy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "dynamic":
		return Dynamic, nil
	case "equal":
		return Equal, nil
	case "proportional":
		return Proportional, nil
	}
	return 0, fmt.Errorf("sched: unknown policy %q: want dynamic, equal or proportional", s)
}

// String returns the policy's name as ParsePolicy reads it.
func (p Policy) String() string {
	switch p {
	case Dynamic:
		return "dynamic"
	case Equal:
		return "equal"
	case Proportional:
		return "proportional"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// static reports whether p plans assignments up front.
func (p Policy) static() bool { return p == Equal || p == Proportional }

// Shares splits n units among workers by policy p and returns how many
// each gets, in the order given. Equal gives everyone n/len(workers), the
// first ones one more until n is used up. Proportional weighs each worker
// by its Streams (at least 1) and hands out the remainders by the largest
// fraction, earlier workers first on ties. Dynamic has no shares: nil.
func Shares(p Policy, n int, workers []Worker) []int {
	if !p.static() || len(workers) == 0 {
		return nil
	}
	out := make([]int, len(workers))
	if p == Equal {
		for i := range out {
			out[i] = n / len(workers)
			if i < n%len(workers) {
				out[i]++
			}
		}
		return out
	}
	total := 0
	for _, w := range workers {
		total += max(w.Streams, 1)
	}
	// Floor of each exact share, then the rest by largest remainder.
	rem := make([]int, len(workers))
	given := 0
	for i, w := range workers {
		q := n * max(w.Streams, 1)
		out[i], rem[i] = q/total, q%total
		given += out[i]
	}
	for ; given < n; given++ {
		best := 0
		for i := range rem {
			if rem[i] > rem[best] {
				best = i
			}
		}
		out[best]++
		rem[best] = -1
	}
	return out
}
