package cli

import (
	"errors"
	"fmt"
	"os"
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
// when path is empty. Surrounding white space is trimmed.
func loadKey(path string) ([]byte, error) {
	var raw string
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read key file: %w", err)
		}
		raw = string(b)
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
