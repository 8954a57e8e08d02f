package cli

import (
	"context"
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
	if hint := didYouMean(ne.GetSpecifiedName(), flagNames(fs), "--"); hint != "" {
		return fmt.Errorf("%w%s", err, hint)
	}
	return err
}

// flagNames lists the flags of fs a user may give: not hidden ones,
// --help or --config.
func flagNames(fs *pflag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" && f.Name != "config" {
			names = append(names, f.Name)
		}
	})
	return names
}

// unknownSubcommand reports sub, not a subcommand of the group cmd,
// with the subcommands it has and the nearest ("unknown subcommand
// "upp"; want up, down, ...; did you mean up?").
func unknownSubcommand(env *Env, cmd, sub string) int {
	subs := commands[cmd].subs
	return failUsage(env, cmd, fmt.Errorf("unknown subcommand %q; want %s%s", sub, orList(subs), didYouMean(sub, subs, "")))
}

// orList is "a", "a or b", "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// ownVariables are braid's environment variables that are not a flag's
// (BRAID_DB is also the server's --db, and braid db's).
var ownVariables = map[string]bool{
	"BRAID_KEY": true, "BRAID_SERVER": true, "BRAID_TOKEN": true, "BRAID_SERVER_FINGERPRINT": true,
	"BRAID_CONFIG": true, "BRAID_VERBOSE": true, "BRAID_DB": true,
}

// envTypos returns a warning for each BRAID_ variable of environ that the
// command of fs does not read (its flags' with a --config file, and
// ownVariables) but that is close to one it does (BRAID_MAXDATA for
// BRAID_MAX_DATA, BRAID_SEVRER for BRAID_SERVER): set by mistake, it
// would be ignored without a word. Names are compared without their
// BRAID_, so that only a small edit of the name itself suggests another
// (BRAID_FOO is not BRAID_DB). A variable that another command reads
// (allVariables), and those of the tests and benchmarks
// (BRAID_REQUIRE_*, BRAID_TEST_*, ...), are left alone.
func envTypos(fs *pflag.FlagSet, environ []string, allVariables func() map[string]bool) []string {
	known := map[string]string{} // variable: its flag, "" for ownVariables
	for v := range ownVariables {
		known[v] = ""
	}
	if f := fs.Lookup("config"); f != nil && f.Annotations[configAnnotation] != nil {
		for _, name := range flagNames(fs) {
			known[envName(name)] = name
		}
	}
	var names []string
	for v := range known {
		names = append(names, strings.TrimPrefix(v, "BRAID_"))
	}
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(k, "BRAID_")
		if _, own := known[k]; !ok || own {
			continue
		}
		if i := strings.IndexByte(rest, '_'); i > 0 && slices.Contains([]string{"REQUIRE", "TEST", "UML", "BENCH", "IN", "SCTPUDP", "KSCTP", "VM"}, rest[:i]) {
			continue
		}
		c := closest(rest, names)
		if len(c) == 0 || allVariables()[k] {
			continue
		}
		v := "BRAID_" + c[0]
		if flag := known[v]; flag != "" {
			v += " (--" + flag + ")"
		}
		out = append(out, fmt.Sprintf("%s is not a setting of braid %s and is ignored; did you mean %s?", k, fs.Name(), v))
	}
	slices.Sort(out)
	return out
}

// allVariables returns the environment variables any command reads:
// ownVariables and the flags of every command with a --config file.
// It runs each command to collect its flags, so it is called only for a
// variable that looks like a typo.
func allVariables(ctx context.Context) map[string]bool {
	all := map[string]bool{}
	for v := range ownVariables {
		all[v] = true
	}
	for _, c := range completionSpec(ctx) {
		if !slices.ContainsFunc(c.flags, func(f compFlag) bool { return f.long == "config" }) {
			continue
		}
		for _, f := range c.flags {
			all[envName(f.long)] = true
		}
	}
	return all
}
