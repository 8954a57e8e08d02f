package server_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
)

// chromium returns the path of a Chromium (Debian package chromium) or
// Chrome binary. Without one the test skips, unless
// BRAID_REQUIRE_CHROMIUM=1 (CI) makes that a failure.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("BRAID_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("BRAID_REQUIRE_CHROMIUM=1 but no chromium on PATH (Debian: apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (Debian: apt-get install chromium); set BRAID_REQUIRE_CHROMIUM=1 to make this a failure")
	return ""
}

// headless runs Chromium headless on url with the extra flags and returns
// its standard output. The page gets a few seconds of virtual time, in
// which its fetches complete and it renders.
func headless(t *testing.T, bin, url string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--disable-extensions", "--disable-background-networking", "--disable-sync", "--mute-audio",
		// The test server's certificate is self-signed, made on its first
		// start; a user would accept it once, or pass --tls-cert.
		"--ignore-certificate-errors",
		"--user-data-dir=" + t.TempDir(),
		"--window-size=1280,1100",
		"--virtual-time-budget=8000",
	}
	args = append(append(args, extra...), url)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, errOut.Bytes())
	}
	return out.String()
}

// artifacts returns the directory to keep test artifacts in:
// $BRAID_ARTIFACTS, else a temporary directory.
func artifacts(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("BRAID_ARTIFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// TestDashboard loads the dashboard in headless Chromium against a server
// with two workers that ran a job, with a monitor token in the URL
// fragment, and checks what the page shows: the job with its state and
// progress, both workers with their threads, the live paths and one bar
// on the timeline per unit. It keeps a screenshot.
func TestDashboard(t *testing.T) {
	bin := chromium(t)
	c := newCluster(t, nil)
	w1 := c.addWorker(2, nil)
	w2 := c.addWorker(1, nil)
	c.waitWorkers(2)
	data := bytes.Repeat([]byte("braid dashboard "), 50_000)
	st := c.run(api.JobRequest{Op: "checksum", Input: c.put(data), Params: map[string]string{"block": "4096"}, Units: 11})
	if st.State != api.JobDone {
		t.Fatalf("job is %s: %s", st.State, st.Error)
	}
	mon, err := c.c.CreateToken(t.Context(), api.RoleMonitor, "dashboard")
	if err != nil {
		t.Fatal(err)
	}
	url := c.srv.URL() + api.PathUI + "#token=" + mon.Token

	dom := headless(t, bin, url, "--dump-dom")
	if !strings.Contains(dom, `data-loaded="1"`) {
		t.Fatalf("the page did not load its data; DOM:\n%s", dom)
	}
	if strings.Contains(dom, mon.Token) {
		t.Error("the token is in the page's DOM")
	}
	// The job's row: its ID, state and progress.
	row := regexp.MustCompile(`(?s)<tr data-job="` + fmt.Sprint(st.Job) + `" data-state="done"[^>]*>(.*?)</tr>`).FindStringSubmatch(dom)
	if row == nil {
		t.Fatalf("no row for job %d in state done; DOM:\n%s", st.Job, dom)
	}
	for _, want := range []string{">" + fmt.Sprint(st.Job) + "<", ">checksum<", ">done<", fmt.Sprintf("%d/%d (100%%)", st.Units.Total, st.Units.Total)} {
		if !strings.Contains(row[1], want) {
			t.Errorf("job row lacks %q: %s", want, row[1])
		}
	}
	// Each worker's row, with its threads, and its live path.
	for _, x := range []struct {
		tw      *testWorker
		threads int
	}{{w1, 2}, {w2, 1}} {
		var id string
		for _, v := range x.tw.w.IDs() {
			id = v
		}
		wrow := regexp.MustCompile(`(?s)<tr data-worker="` + regexp.QuoteMeta(id) + `">(.*?)</tr>`).FindStringSubmatch(dom)
		if wrow == nil {
			t.Errorf("no row for worker %s", id)
			continue
		}
		if !strings.Contains(wrow[1], ">live<") || !strings.Contains(wrow[1], fmt.Sprintf(`<td class="num threads">%d</td>`, x.threads)) {
			t.Errorf("worker %s row does not show it live with %d threads: %s", id, x.threads, wrow[1])
		}
		if !regexp.MustCompile(`<tr data-worker="` + regexp.QuoteMeta(id) + `" data-path="0">.*?>up<`).MatchString(dom) {
			t.Errorf("no live path of worker %s", id)
		}
		// The timeline has one lane per thread of the worker.
		if n := strings.Count(dom, `class="lane" data-worker="`+id+`"`); n != x.threads {
			t.Errorf("the timeline has %d lanes for worker %s, want its %d threads", n, id, x.threads)
		}
	}
	// The timeline: one bar per unit try, for this job.
	if !strings.Contains(dom, `id="timeline" xmlns="http://www.w3.org/2000/svg" width="900" height=`) ||
		!strings.Contains(dom, `data-job="`+fmt.Sprint(st.Job)+`"`) {
		t.Errorf("the timeline is not of job %d", st.Job)
	}
	bars := regexp.MustCompile(`<rect class="unit"[^>]* data-unit="(\d+)"`).FindAllStringSubmatch(dom, -1)
	units := map[string]bool{}
	for _, b := range bars {
		units[b[1]] = true
	}
	if len(units) != st.Units.Total {
		t.Errorf("the timeline shows %d distinct units in %d bars, want %d", len(units), len(bars), st.Units.Total)
	}

	// A credential that may not read jobs gets the sign-in form and the
	// server's refusal, and no data.
	wk, err := c.c.CreateToken(t.Context(), api.RoleWorker, "not-a-viewer")
	if err != nil {
		t.Fatal(err)
	}
	denied := headless(t, bin, c.srv.URL()+api.PathUI+"#token="+wk.Token, "--dump-dom")
	if !strings.Contains(denied, `<section id="login">`) || !strings.Contains(denied, `<main id="main" hidden="">`) ||
		!strings.Contains(denied, "a worker credential may not GET") || strings.Contains(denied, `data-job="`+fmt.Sprint(st.Job)+`"`) {
		t.Errorf("with a worker token the page does not show the sign-in form and the refusal alone; DOM:\n%s", denied)
	}

	shot := filepath.Join(artifacts(t), "dashboard.png")
	headless(t, bin, url, "--screenshot="+shot, "--hide-scrollbars")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 600 {
		t.Errorf("screenshot is %v", b)
	}
	t.Logf("dashboard screenshot: %s", shot)
}
