package cli

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/braid-hpc/braid/internal/syncbuf"
	"github.com/braid-hpc/braid/internal/testenv"
	"github.com/braid-hpc/braid/internal/testwait"
)

// recipe returns the install commands in the comment of a deploy/ unit:
// the comment lines indented by three spaces after '#'.
func recipe(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if cmd, ok := strings.CutPrefix(l, "#   "); ok && strings.TrimSpace(cmd) != "" {
			lines = append(lines, cmd)
		}
	}
	if len(lines) == 0 {
		t.Fatalf("%s: no install commands in its comment", path)
	}
	return lines
}

// hostRoot rewrites the recipe's host paths into root, a directory
// standing in for /: /etc, /var and /usr/local/bin.
func hostRoot(root, s string) string {
	return regexp.MustCompile(`(^|[\s"=:])/(etc|var|usr/local/bin)/`).ReplaceAllString(s, "${1}"+root+"/${2}/")
}

// TestDeploySystemdRecipe follows the install recipe in the comments of
// deploy/'s units literally, as root in bash: it creates the service user
// and the files with the owners and modes the recipe gives, under a
// directory standing in for / (the paths are the one thing rewritten,
// with the user's name and the binary's source), then does what systemd
// would: reads EnvironmentFile= as root, makes StateDirectory= and
// CacheDirectory= for User=, and runs ExecStart= as that user. The
// server must start from its config file, and the worker register with
// it. The systemctl lines are left out: no systemd runs in CI
// (TestDeploySystemdUnits checks the units with systemd-analyze).
func TestDeploySystemdRecipe(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, testenv.Root, "the recipe runs as root (useradd, install -o)")
	}
	for _, tool := range []string{"bash", "useradd", "userdel", "getent", "install"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, testenv.Root, tool+" is not installed")
		}
	}
	bin := builtBraid(t)
	name := fmt.Sprintf("braidt%d", os.Getpid()%1000000)
	if _, err := user.Lookup(name); err == nil {
		t.Fatalf("user %s exists already", name)
	}
	t.Cleanup(func() {
		if _, err := user.Lookup(name); err == nil {
			if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
				t.Errorf("userdel %s: %v: %s", name, err, out)
			}
		}
		_ = exec.Command("groupdel", name).Run() // if userdel left it
	})
	deploy, err := filepath.Abs(deployDir)
	if err != nil {
		t.Fatal(err)
	}
	userName := regexp.MustCompile(`(getent passwd |-g |-o |nologin )braid\b`)
	run := func(root, unitFile string, subst map[string]string) {
		t.Helper()
		for _, d := range []string{"usr/local/bin", "etc/systemd/system", "var/lib", "var/cache"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		var script []string
		for _, l := range recipe(t, unitFile) {
			if strings.HasPrefix(l, "systemctl ") {
				continue
			}
			l = strings.ReplaceAll(l, `"$(go env GOPATH)/bin/braid"`, bin)
			l = strings.ReplaceAll(l, " deploy/", " "+deploy+"/")
			l = userName.ReplaceAllString(hostRoot(root, l), "${1}"+name)
			for k, v := range subst {
				l = strings.ReplaceAll(l, k, v)
			}
			script = append(script, l)
		}
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(script, "\n"))
		cmd.Dir = filepath.Dir(deploy)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s's recipe:\n%s\n: %v\n%s", filepath.Base(unitFile), strings.Join(script, "\n"), err, out)
		}
	}

	// One root a host: the server's, then a worker's on another host.
	srvRoot, wrkRoot := tempRoot(t), tempRoot(t)
	run(srvRoot, filepath.Join(deploy, "braid-server.service"), nil)
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("the recipe made no user %s: %v", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, f := range []struct {
		path     string
		mode     os.FileMode
		uid, gid int
	}{
		{"etc/braid", os.ModeDir | 0o750, 0, gid},
		{"etc/braid/env", 0o600, 0, 0},
		{"etc/braid/server.yaml", 0o640, 0, gid},
		{"usr/local/bin/braid", 0o755, 0, 0},
	} {
		fi, err := os.Stat(filepath.Join(srvRoot, f.path))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != f.mode || int(st.Uid) != f.uid || int(st.Gid) != f.gid {
			t.Errorf("/%s: %v %d:%d, want %v %d:%d", f.path, fi.Mode(), st.Uid, st.Gid, f.mode, f.uid, f.gid)
		}
	}
	env := environmentFile(t, filepath.Join(srvRoot, "etc/braid/env"))
	key := strings.TrimPrefix(env[0], "BRAID_KEY=")
	if len(key) < 32 {
		t.Fatalf("/etc/braid/env: %q, want BRAID_KEY=<a key>", env)
	}
	// The worker's host gets the server's key, as its recipe says.
	run(wrkRoot, filepath.Join(deploy, "braid-worker.service"), map[string]string{"<the cluster key>": key})

	// The config files name host paths and addresses; the environment,
	// which wins over them, points them into the test's roots and at
	// loopback.
	srv := startService(t, srvRoot, filepath.Join(deploy, "braid-server.service"), uid, gid, "StateDirectory", "var/lib",
		"BRAID_LISTEN=127.0.0.1:0", "BRAID_DATA="+filepath.Join(srvRoot, "var/lib/braid"))
	url := srv.wait(t, regexp.MustCompile(`braid server listening on (\S+)`))
	wrkMetrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	wrk := startService(t, wrkRoot, filepath.Join(deploy, "braid-worker.service"), uid, gid, "CacheDirectory", "var/cache",
		"BRAID_SERVER="+url, "BRAID_LISTEN=127.0.0.1:0", "BRAID_MODULE_DIR="+filepath.Join(wrkRoot, "var/cache/braid/modules"),
		"BRAID_METRICS="+wrkMetrics)
	wrk.wait(t, regexp.MustCompile(`braid worker: (data plane on)`))
	t.Setenv("BRAID_KEY", key)
	var last string
	if !testwait.Until(60*time.Second, func() bool {
		code, out, errs := runQuick(t, "workers", "--server", url, "--json")
		last = out + errs
		var list struct {
			Workers []struct {
				Alive bool `json:"alive"`
			} `json:"workers"`
		}
		return code == 0 && json.Unmarshal([]byte(out), &list) == nil && len(list.Workers) == 1 && list.Workers[0].Alive
	}) {
		t.Fatalf("the worker did not register within 60s: %s\nserver:\n%s\nworker:\n%s", last, srv.output(), wrk.output())
	}
	prometheusScrapes(t, bin, srvRoot, url, "http://"+wrkMetrics+"/metrics")
}

// prometheusScrapes follows deploy/prometheus.yml on the recipe's hosts:
// its comment's token command, run as root with no BRAID_KEY in its
// environment (the key comes from /etc/braid/env through --key-file),
// then a scrape of the server as its braid-server job does it (the bearer
// token, the server's certificate as ca_file, its server_name), and of the
// worker's metrics address.
func prometheusScrapes(t *testing.T, bin, srvRoot, url, workerMetrics string) {
	t.Helper()
	cfg := prometheusConfig(t)
	argv := append(strings.Fields(hostRoot(srvRoot, " "+cfg.tokenCommand)), "--server", url)
	cmd := exec.Command(bin, argv[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BRAID_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	var tok struct {
		Token string `json:"token"`
	}
	if err != nil || json.Unmarshal(out, &tok) != nil || tok.Token == "" {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("prometheus.yml's %s: %v: %s%s", strings.Join(argv, " "), err, out, stderr)
	}
	job := cfg.job(t, "braid-server")
	pem, err := os.ReadFile(filepath.Join(srvRoot, "var/lib/braid/tls/cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("the server's cert.pem holds no certificate")
	}
	// The server listens on loopback here; the name checked is the one
	// prometheus.yml gives, as for its target 10.0.0.1.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: job.TLSConfig.ServerName}}}
	req, err := http.NewRequest("GET", strings.TrimSuffix(url, "/")+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", job.Authorization.Type+" "+tok.Token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("scrape the server as prometheus.yml does (server_name %q): %v", job.TLSConfig.ServerName, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "braid_") {
		t.Errorf("scrape the server: %s: %.200s", resp.Status, body)
	}
	if code, body := httpGet(t, workerMetrics); code != http.StatusOK || !strings.Contains(string(body), "braid_") {
		t.Errorf("scrape the worker: %d: %.200s", code, body)
	}
}

// scrapeJob is a scrape_configs entry of deploy/prometheus.yml.
type scrapeJob struct {
	JobName       string `yaml:"job_name"`
	Scheme        string `yaml:"scheme"`
	Authorization struct {
		Type            string `yaml:"type"`
		CredentialsFile string `yaml:"credentials_file"`
	} `yaml:"authorization"`
	TLSConfig struct {
		CAFile     string `yaml:"ca_file"`
		ServerName string `yaml:"server_name"`
	} `yaml:"tls_config"`
	StaticConfigs []struct {
		Targets []string `yaml:"targets"`
	} `yaml:"static_configs"`
}

// promConfig is deploy/prometheus.yml and the token command in its
// comment ("braid token create ...", before the pipe).
type promConfig struct {
	path          string
	ScrapeConfigs []scrapeJob `yaml:"scrape_configs"`
	tokenCommand  string
}

func prometheusConfig(t *testing.T) *promConfig {
	t.Helper()
	cfg := &promConfig{path: filepath.Join(deployDir, "prometheus.yml")}
	b, err := os.ReadFile(cfg.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, cfg); err != nil {
		t.Fatalf("%s: %v", cfg.path, err)
	}
	m := regexp.MustCompile(`#\s+(braid token create [^|]*)\|`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no 'braid token create' command in its comment", cfg.path)
	}
	cfg.tokenCommand = strings.TrimSpace(string(m[1]))
	return cfg
}

func (c *promConfig) job(t *testing.T, name string) scrapeJob {
	t.Helper()
	for _, j := range c.ScrapeConfigs {
		if j.JobName == name {
			return j
		}
	}
	t.Fatalf("%s: no job %s", c.path, name)
	return scrapeJob{}
}

// tempRoot returns a directory standing in for /, which the service user
// can traverse (t.TempDir's are 0700), removed at the end.
func tempRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "braid-recipe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// environmentFile reads a systemd EnvironmentFile: VAR=VALUE lines.
func environmentFile(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			env = append(env, l)
		}
	}
	return env
}

// service is a unit's ExecStart run as its user.
type service struct {
	cmd    *exec.Cmd
	exited chan struct{}
	out    syncbuf.Buffer
}

func (s *service) Write(p []byte) (int, error) { return s.out.Write(p) }

func (s *service) output() string { return s.out.String() }

// wait waits for a line of output matching re and returns its submatch.
func (s *service) wait(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	if !testwait.Until(60*time.Second, func() bool {
		m = re.FindStringSubmatch(s.output())
		select {
		case <-s.exited:
			return true
		default:
			return m != nil
		}
	}) || m == nil {
		t.Fatalf("%s: no line matching %s within 60s:\n%s", strings.Join(s.cmd.Args, " "), re, s.output())
	}
	return m[1]
}

// startService does what systemd does for the unit at path under root:
// makes its directory (dirKey, StateDirectory or CacheDirectory, under
// root/base) owned by uid:gid with the unit's mode, reads its
// EnvironmentFile as root, and runs ExecStart as uid:gid with that
// environment and extra, stopped at the end of the test.
func startService(t *testing.T, root, path string, uid, gid int, dirKey, base string, extra ...string) *service {
	t.Helper()
	u := unit(t, path)
	sv := u["Service"]
	if got := sv["User"]; len(got) != 1 || got[0] != "braid" {
		t.Fatalf("%s: User=%v, want braid (the recipe's user)", path, got)
	}
	mode, err := strconv.ParseUint(sv[dirKey+"Mode"][0], 8, 32)
	if err != nil {
		t.Fatalf("%s: %sMode: %v", path, dirKey, err)
	}
	dir := filepath.Join(root, base, sv[dirKey][0])
	if err := os.Mkdir(dir, os.FileMode(mode)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	for _, f := range sv["EnvironmentFile"] {
		env = append(env, environmentFile(t, hostRoot(root, " "+strings.TrimPrefix(f, "-"))[1:])...)
	}
	argv := strings.Fields(hostRoot(root, " "+sv["ExecStart"][0]))
	s := &service{}
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Env = append(env, extra...)
	s.cmd.Dir = "/"
	s.cmd.Stdout, s.cmd.Stderr = s, s
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(gid)}}}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func() { s.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			<-exited
			t.Errorf("%s did not stop within 15s of SIGTERM", argv[1])
		}
		if t.Failed() {
			sc := bufio.NewScanner(strings.NewReader(s.output()))
			for sc.Scan() {
				t.Logf("%s: %s", argv[1], sc.Text())
			}
		}
	})
	return s
}

// deploy/prometheus.yml scrapes the server over HTTPS with a monitor
// token from a file and the server's certificate, checked by a name the
// generated certificate has (its target's address is not in it: the
// server listens on 0.0.0.0); the token command in its comment is one
// this braid takes, with the key from the services' EnvironmentFile; the
// worker job scrapes the one address of worker.yaml's metrics.
// TestDeploySystemdRecipe runs the command and the scrapes.
func TestDeployPrometheus(t *testing.T) {
	cfg := prometheusConfig(t)
	path := cfg.path
	for _, sc := range cfg.ScrapeConfigs {
		if len(sc.StaticConfigs) == 0 || len(sc.StaticConfigs[0].Targets) == 0 {
			t.Errorf("%s: job %s has no targets", path, sc.JobName)
		}
	}
	srv, wrk := cfg.job(t, "braid-server"), cfg.job(t, "braid-worker")
	if srv.Scheme != "https" || srv.Authorization.Type != "Bearer" || srv.Authorization.CredentialsFile == "" || srv.TLSConfig.CAFile == "" {
		t.Errorf("%s: braid-server scrapes %+v; want https with a bearer token file and the server's CA", path, srv)
	}
	// The generated certificate has localhost and the host name, not
	// the target's address (server.yaml listens on 0.0.0.0).
	var serverYAML, workerYAML map[string]any
	readYAML(t, filepath.Join(deployDir, "server.yaml"), &serverYAML)
	readYAML(t, filepath.Join(deployDir, "worker.yaml"), &workerYAML)
	if host, _, _ := strings.Cut(fmt.Sprint(serverYAML["listen"]), ":"); host == "0.0.0.0" && srv.TLSConfig.ServerName == "" {
		t.Errorf("%s: braid-server has no tls_config.server_name, and server.yaml's listen %v puts no address of the target in the certificate", path, serverYAML["listen"])
	}
	metrics, ok := workerYAML["metrics"].(string)
	if !ok {
		t.Errorf("worker.yaml has no metrics: key, which prometheus.yml's braid-worker job scrapes")
	}
	if got := wrk.StaticConfigs[0].Targets; len(got) != 1 || got[0] != metrics {
		t.Errorf("%s: braid-worker targets %v, want worker.yaml's one metrics address %q", path, got, metrics)
	}
	argv := strings.Fields(cfg.tokenCommand)
	fs := flagSetOf(t, "token create")
	if err := fs.Parse(argv[3:]); err != nil || fs.Lookup("role").Value.String() != "monitor" {
		t.Errorf("%s: %s: %v; want a monitor token", path, cfg.tokenCommand, err)
	}
	if fs.Lookup("key-file").Value.String() != "/etc/braid/env" {
		t.Errorf("%s: %s: root has no BRAID_KEY; want --key-file /etc/braid/env", path, cfg.tokenCommand)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
