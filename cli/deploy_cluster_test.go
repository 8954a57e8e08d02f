package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The example cluster of three servers sharing PostgreSQL and S3 runs
// braid commands and flags this braid has, every server with the shared
// config file and a name of its own, and the worker registered with all
// three.
func TestDeployClusterCompose(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "cluster-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("cluster-compose.yaml: %v", err)
	}
	var names, servers []string
	for name, svc := range doc.Services {
		if svc.Image != "braid" {
			continue
		}
		checkArgv(t, "cluster-compose.yaml service "+name, svc.Command)
		switch svc.Command[0] {
		case "server":
			names = append(names, svc.Environment["BRAID_NAME"])
			servers = append(servers, "https://"+name+":7400")
			if svc.Environment["BRAID_KEY"] == "" {
				t.Errorf("server %s has no BRAID_KEY", name)
			}
		case "worker":
			i := slices.Index(svc.Command, "--server")
			if i < 0 || i+1 == len(svc.Command) {
				t.Fatalf("worker %s: no --server", name)
			}
			defer func() {
				got := strings.Split(svc.Command[i+1], ",")
				slices.Sort(got)
				slices.Sort(servers)
				if !slices.Equal(got, servers) {
					t.Errorf("worker %s registers with %v, want every server %v", name, got, servers)
				}
			}()
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Errorf("server names %q, want a, b and c, one each", names)
	}
	cfg, err := os.ReadFile(filepath.Join(deployDir, "cluster-server.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"db: postgres://", "blobs: s3://"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("cluster-server.yaml does not set %q", want)
		}
	}
}
