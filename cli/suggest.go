package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// closest returns the candidates nearest to s: within an edit distance of
// a third of s's length (at least 1, at most 3), or equal to s once case,
// dashes and underscores are ignored, or one a prefix of the other (s of
// at least 3 bytes, the candidate of at least 4). The nearest come first, then by name.
func closest(s string, candidates []string) []string {
	norm := func(x string) string {
		return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(x))
	}
	limit := min(max(len(s)/3, 1), 3)
	type hit struct {
		name string
		d    int
	}
	var hits []hit
	for _, c := range candidates {
		if c == s {
			continue
		}
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		switch {
		case norm(c) == norm(s):
			d = 0
		case len(s) >= 3 && strings.HasPrefix(c, s), len(c) >= 4 && strings.HasPrefix(s, c):
			d = min(d, 1)
		case d > limit:
			continue
		}
		hits = append(hits, hit{c, d})
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if a.d != b.d {
			return a.d - b.d
		}
		return strings.Compare(a.name, b.name)
	})
	var out []string
	for _, h := range hits {
		out = append(out, h.name)
	}
	return out
}

// didYouMean returns " (did you mean X?)", " (did you mean X or Y?)", or
// "" when nothing is close.
func didYouMean(s string, candidates []string, prefix string) string {
	c := closest(s, candidates)
	if len(c) == 0 {
		return ""
	}
	if len(c) > 2 {
		c = c[:2]
	}
	for i := range c {
		c[i] = prefix + c[i]
	}
	return "; did you mean " + strings.Join(c, " or ") + "?"
}

// suggestFlag adds the nearest flag names to pflag's error for an
// unknown long flag ("unknown flag: --max-dta; did you mean --max-data?").
func suggestFlag(fs *pflag.FlagSet, err error) error {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) || ne.GetSpecifiedName() == "" {
		return err
	}
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	if hint := didYouMean(ne.GetSpecifiedName(), names, "--"); hint != "" {
		return fmt.Errorf("%w%s", err, hint)
	}
	return err
}

// ownVariables are braid's environment variables that are not a flag's.
var ownVariables = map[string]bool{
	"BRAID_KEY": true, "BRAID_SERVER": true, "BRAID_TOKEN": true, "BRAID_SERVER_FINGERPRINT": true,
	"BRAID_CONFIG": true, "BRAID_VERBOSE": true,
}

// envTypos returns a warning for each BRAID_ variable of environ that no
// flag of fs reads but that is close to one that does (BRAID_MAXDATA for
// BRAID_MAX_DATA): set by mistake, it would be ignored without a word.
// Variables of the tests and benchmarks (BRAID_REQUIRE_*, BRAID_TEST_*,
// ...) are left alone.
func envTypos(fs *pflag.FlagSet, environ []string) []string {
	known := map[string]string{}
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" && !f.Hidden {
			known[envName(f.Name)] = f.Name
			names = append(names, envName(f.Name))
		}
	})
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "BRAID_") || known[k] != "" || ownVariables[k] {
			continue
		}
		rest := strings.TrimPrefix(k, "BRAID_")
		if i := strings.IndexByte(rest, '_'); i > 0 && slices.Contains([]string{"REQUIRE", "TEST", "UML", "BENCH", "IN", "SCTPUDP", "KSCTP"}, rest[:i]) {
			continue
		}
		if c := closest(k, names); len(c) > 0 {
			out = append(out, fmt.Sprintf("%s is not a setting of braid %s and is ignored; did you mean %s (--%s)?", k, fs.Name(), c[0], known[c[0]]))
		}
	}
	slices.Sort(out)
	return out
}
