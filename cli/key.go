package cli

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/pflag"
)

// keyFlag registers --key-file on fs and returns a loader that resolves the
// cluster key from --key-file, else BRAID_KEY.
func keyFlag(fs *pflag.FlagSet) func() ([]byte, error) {
	path := fs.String("key-file", "", "read the cluster key from this `file` (default: the BRAID_KEY environment variable)")
	return func() ([]byte, error) { return loadKey(*path) }
}

// errNoKey tells the user how to provide the cluster key.
var errNoKey = errors.New("no cluster key: set BRAID_KEY or pass --key-file FILE (every host of a cluster needs the same key)")

// loadKey returns the cluster key from the file at path, or from BRAID_KEY
// when path is empty. Surrounding white space is trimmed. The file holds
// the key alone, or is a systemd EnvironmentFile such as /etc/braid/env
// with a BRAID_KEY=KEY line (keyFromEnvFile), so that root can use the
// file the services read.
func loadKey(path string) ([]byte, error) {
	var raw string
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read key file: %w", err)
		}
		if raw, err = keyFromEnvFile(string(b)); err != nil {
			return nil, fmt.Errorf("key file %s: %w", path, err)
		}
	} else {
		raw = os.Getenv("BRAID_KEY")
	}
	raw = strings.TrimSpace(raw)
	if raw == "" {
		if path != "" {
			return nil, fmt.Errorf("key file %s is empty", path)
		}
		return nil, errNoKey
	}
	if len(raw) < 8 {
		return nil, errors.New("cluster key is shorter than 8 bytes; use a longer random secret")
	}
	return []byte(raw), nil
}

// envAssign matches a line of an EnvironmentFile that sets a BRAID_
// variable: its name and value.
var envAssign = regexp.MustCompile(`^(?:export\s+)?(BRAID_[A-Z0-9_]*)=(.*)$`)

// keyFromEnvFile returns the key in a key file's text b: the value of
// its BRAID_KEY= line when it is an EnvironmentFile (quotes removed, as
// systemd does), else b itself. A file that sets other BRAID_ variables
// but not BRAID_KEY is an error, not a key.
func keyFromEnvFile(b string) (string, error) {
	var others []string
	for _, l := range strings.Split(b, "\n") {
		m := envAssign.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		if m[1] != "BRAID_KEY" {
			others = append(others, m[1])
			continue
		}
		v := strings.TrimSpace(m[2])
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		return v, nil
	}
	if len(others) > 0 {
		return "", fmt.Errorf("sets %s but no BRAID_KEY=: give the file with the cluster key", strings.Join(others, ", "))
	}
	return b, nil
}
