package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --key-file takes a file with the key alone, or the EnvironmentFile the
// services read (/etc/braid/env, a BRAID_KEY= line), so that root can
// run a client command with the key the services have. Before, the
// whole line "BRAID_KEY=..." was taken as the key, and the server said
// the cluster key differs.
func TestLoadKeyFile(t *testing.T) {
	const key = "c2VjcmV0LWNsdXN0ZXIta2V5LTAxMjM0NTY3ODk="
	for _, tc := range []struct {
		name, file, want, err string
	}{
		{"bare key", key + "\n", key, ""},
		{"env file", "BRAID_KEY=" + key + "\n", key, ""},
		{"env file with others", "# braid\nBRAID_LOG_LEVEL=debug\nBRAID_KEY=" + key + "\n", key, ""},
		{"double quotes", `BRAID_KEY="` + key + `"`, key, ""},
		{"single quotes", "BRAID_KEY='" + key + "'", key, ""},
		{"export", "export BRAID_KEY=" + key, key, ""},
		{"no BRAID_KEY", "BRAID_SERVER=https://10.0.0.1:7400\n", "", "sets BRAID_SERVER but no BRAID_KEY="},
		{"empty value", "BRAID_KEY=\n", "", "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "env")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := loadKey(path)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one with %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Errorf("error %v", err)
			case string(got) != tc.want:
				t.Errorf("key %q, want %q", got, tc.want)
			}
		})
	}
}
