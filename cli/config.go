package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Long-running commands (server, worker) also take their flags from a
// configuration file and from the environment. The file is YAML whose
// keys are the long flag names:
//
//	listen: 10.0.0.1:7400
//	data: /var/lib/braid
//	max-data: 500G
//	verbose: true
//	listen: [10.1.0.5:7420, 10.2.0.5:7420]   # a list is a comma-separated flag
//
// Each flag also reads BRAID_ and its name in capitals with underscores
// for dashes (BRAID_MAX_DATA). A flag on the command line wins over the
// environment, which wins over the file, which wins over the default.

// configAnnotation marks a FlagSet whose command reads a config file.
const configAnnotation = "braid-config"

// configFlag adds --config to fs and makes parseFlags fill the flags not
// given on the command line from the environment and the file.
func configFlag(fs *pflag.FlagSet) {
	fs.String("config", "", "read flags from this YAML `file`: one key per long flag name, e.g. 'max-data: 500G'; "+
		"flags on the command line, then BRAID_<FLAG> environment variables (BRAID_MAX_DATA), win over it")
	_ = fs.SetAnnotation("config", configAnnotation, []string{"true"})
}

// envName is the environment variable of flag name: BRAID_MAX_DATA for
// max-data.
func envName(name string) string {
	return "BRAID_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// applyConfig sets the flags of fs that the command line did not give:
// first from the environment (lookup), then from the --config file (or
// BRAID_CONFIG). Errors name the variable, or the file, line and key.
func applyConfig(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" || f.Hidden {
			return
		}
		v, ok := lookup(envName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, strings.TrimSpace(v)); err != nil {
			errs = append(errs, badValue(err, func(f *pflag.Flag, v string) string { return fmt.Sprintf("%s=%q", envName(f.Name), v) }))
		}
	})
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	path := fs.Lookup("config").Value.String()
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	return applyConfigFile(fs, path, b)
}

// applyConfigFile sets the flags the YAML document b names, except those
// already set on the command line or by the environment.
func applyConfigFile(fs *pflag.FlagSet, path string, b []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: want keys and values, one per line (listen: 10.0.0.1:7400)", path, m.Line)
	}
	var errs []error
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		at := fmt.Sprintf("%s:%d", path, k.Line)
		f := fs.Lookup(k.Value)
		switch {
		case f == nil || k.Value == "help" || k.Value == "config":
			errs = append(errs, fmt.Errorf("%s: unknown key %q: keys are the long flags of 'braid %s --help'%s", at, k.Value, fs.Name(),
				didYouMean(k.Value, flagNames(fs), "")))
			continue
		case seen[k.Value] > 0:
			errs = append(errs, fmt.Errorf("%s: %q is also on line %d", at, k.Value, seen[k.Value]))
			continue
		}
		seen[k.Value] = k.Line
		var val string
		switch v.Kind {
		case yaml.ScalarNode:
			val = v.Value
		case yaml.SequenceNode:
			var items []string
			for _, it := range v.Content {
				if it.Kind != yaml.ScalarNode {
					errs = append(errs, fmt.Errorf("%s: %s: want a list of values", at, k.Value))
					continue
				}
				items = append(items, it.Value)
			}
			val = strings.Join(items, ",")
		default:
			errs = append(errs, fmt.Errorf("%s: %s: want a value or a list of values", at, k.Value))
			continue
		}
		if f.Changed {
			continue // the command line or the environment gave it
		}
		if err := fs.Set(k.Value, val); err != nil {
			errs = append(errs, badValue(err, func(f *pflag.Flag, v string) string { return fmt.Sprintf("%s: %s %q", at, f.Name, v) }))
		}
	}
	return errors.Join(errs...)
}
