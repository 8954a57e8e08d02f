package server_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"html"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/worker"
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
// progress, both workers with their threads, the live paths, and on the
// timeline one bar per try of a unit, on the thread that ran it (as the
// workers logged it), the bars of a thread never overlapping. It keeps a
// screenshot.
func TestDashboard(t *testing.T) {
	bin := chromium(t)
	c := newCluster(t, nil)
	mon, err := c.c.CreateToken(t.Context(), api.RoleMonitor, "dashboard")
	if err != nil {
		t.Fatal(err)
	}
	url := c.srv.URL() + api.PathUI + "#token=" + mon.Token

	// A new cluster: the tables say that they are empty, and why.
	emptyDom := headless(t, bin, url, "--dump-dom")
	if !strings.Contains(emptyDom, `data-loaded="1"`) {
		t.Fatalf("the page did not load its data; DOM:\n%s", emptyDom)
	}
	for table, want := range map[string]string{"jobs": "no jobs yet", "workers": "no workers registered", "paths": "no live sessions"} {
		body := regexp.MustCompile(`(?s)<table id="` + table + `">.*?<tbody>(.*?)</tbody>`).FindStringSubmatch(emptyDom)
		if body == nil || !regexp.MustCompile(`<tr class="empty"><td colspan="\d+">`+want).MatchString(body[1]) {
			t.Errorf("the empty %s table does not say %q: %v", table, want, body)
		}
	}

	w1, log1 := c.loggedWorker(2)
	w2, log2 := c.loggedWorker(1)
	c.waitWorkers(2)
	st := c.run(api.JobRequest{Op: "sleep", Input: c.put(nil), Params: map[string]string{"ms": "10"}, Units: 11})
	if st.State != api.JobDone {
		t.Fatalf("job is %s: %s", st.State, st.Error)
	}
	tl := c.settledUnits(st.Job)
	id1, id2 := workerID(w1), workerID(w2)
	checkTimeline(t, tl, st, map[string]*lockedBuffer{id1: log1, id2: log2}, map[string]int{id1: 2, id2: 1})
	threadOf := map[string]int{} // by worker/unit/attempt
	for _, u := range tl.Units {
		threadOf[fmt.Sprintf("%s/%d/%d", u.Worker, u.Unit, u.Attempt)] = u.Thread
	}
	dom := headless(t, bin, url, "--dump-dom")
	if !strings.Contains(dom, `data-loaded="1"`) {
		t.Fatalf("the page did not load its data; DOM:\n%s", dom)
	}
	if strings.Contains(dom, mon.Token) {
		t.Error("the token is in the page's DOM")
	}
	if strings.Contains(dom, `class="empty"`) {
		t.Errorf("a table with rows still says it is empty; DOM:\n%s", dom)
	}
	// The job's row: its ID, state and progress.
	row := regexp.MustCompile(`(?s)<tr data-job="` + fmt.Sprint(st.Job) + `" data-state="done"[^>]*>(.*?)</tr>`).FindStringSubmatch(dom)
	if row == nil {
		t.Fatalf("no row for job %d in state done; DOM:\n%s", st.Job, dom)
	}
	for _, want := range []string{">" + fmt.Sprint(st.Job) + "<", ">sleep<", ">done<", fmt.Sprintf("%d/%d (100%%)", st.Units.Total, st.Units.Total)} {
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
		wrow := regexp.MustCompile(`(?s)<tr data-worker="` + regexp.QuoteMeta(id) + `" class="live">(.*?)</tr>`).FindStringSubmatch(dom)
		if wrow == nil {
			t.Errorf("no row for worker %s", id)
			continue
		}
		if !strings.Contains(wrow[1], ">live<") || !strings.Contains(wrow[1], fmt.Sprintf(`<td class="num threads">%d</td>`, x.threads)) {
			t.Errorf("worker %s row does not show it live with %d threads: %s", id, x.threads, wrow[1])
		}
		var done, tries int
		if m := regexp.MustCompile(`<td class="num done">(\d+)</td><td class="num tries"[^>]*>(\d+)</td>`).FindStringSubmatch(wrow[1]); m != nil {
			fmt.Sscan(m[1], &done)
			fmt.Sscan(m[2], &tries)
		}
		if tries < done || tries == 0 {
			t.Errorf("worker %s row shows %d tries computed for %d units done: %s", id, tries, done, wrow[1])
		}
		if !regexp.MustCompile(`<tr data-worker="` + regexp.QuoteMeta(id) + `" data-path="0">.*?>up<`).MatchString(dom) {
			t.Errorf("no live path of worker %s", id)
		}
		// The timeline has one lane per thread of the worker, placed from
		// the worker's measurements.
		if n := strings.Count(dom, `class="lane" data-worker="`+id+`"`); n != x.threads {
			t.Errorf("the timeline has %d lanes for worker %s, want its %d threads", n, id, x.threads)
		}
		if n := strings.Count(dom, `data-worker="`+id+`" data-thread="0" data-placed="measured"`); n != 1 {
			t.Errorf("worker %s's first lane is not placed from measured times (%d)", id, n)
		}
	}
	// The timeline: one bar per unit try, for this job.
	if !strings.Contains(dom, `id="timeline" xmlns="http://www.w3.org/2000/svg" width="900" height=`) ||
		!strings.Contains(dom, `data-job="`+fmt.Sprint(st.Job)+`"`) {
		t.Errorf("the timeline is not of job %d", st.Job)
	}
	bars := regexp.MustCompile(`<rect class="unit"[^>]* data-unit="(\d+)" data-attempt="(\d+)" data-worker="([^"]+)" data-thread="(\d+)" data-start="([-0-9.]+)" data-end="([-0-9.]+)"`).FindAllStringSubmatch(dom, -1)
	units := map[string]bool{}
	type bar struct {
		unit       string
		start, end float64
	}
	lanes := map[string][]bar{} // by worker/thread
	for _, b := range bars {
		units[b[1]] = true
		key := b[3] + "/" + b[1] + "/" + b[2]
		if want, ok := threadOf[key]; !ok || fmt.Sprint(want) != b[4] {
			t.Errorf("unit %s try %s is drawn on thread %s of %s; it ran on thread %d (known: %v)", b[1], b[2], b[4], b[3], want, ok)
		}
		var start, end float64
		fmt.Sscan(b[5], &start)
		fmt.Sscan(b[6], &end)
		if end < start {
			t.Errorf("unit %s's bar ends (%v ms) before it starts (%v ms)", b[1], end, start)
		}
		lanes[b[3]+"/"+b[4]] = append(lanes[b[3]+"/"+b[4]], bar{b[1], start, end})
	}
	if len(units) != st.Units.Total || len(bars) != len(tl.Units) {
		t.Errorf("the timeline shows %d distinct units in %d bars, want %d in %d", len(units), len(bars), st.Units.Total, len(tl.Units))
	}
	for lane, l := range lanes {
		slices.SortFunc(l, func(a, b bar) int { return cmp.Compare(a.start, b.start) })
		for k := 1; k < len(l); k++ {
			if l[k].start < l[k-1].end {
				t.Errorf("thread %s: the bar of unit %s (%v to %v ms) overlaps that of unit %s (%v to %v ms)",
					lane, l[k].unit, l[k].start, l[k].end, l[k-1].unit, l[k-1].start, l[k-1].end)
			}
		}
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

	// The figures of a busy cluster: a job whose 8 long units fill the 3
	// threads (the rest wait in the workers' queues), and a failed job.
	// "Running" is the units computing (3), not those sent (In flight),
	// "Busy" the share of each worker's threads computing (100%), and the
	// failed job's error is in its row, not only in a tooltip.
	failed := c.run(api.JobRequest{Op: "sleep", Input: c.put(nil), Params: map[string]string{"ms": "1", "fail": "0"}, Units: 2, MaxTries: 1})
	if failed.State != api.JobFailed || failed.Error == "" {
		t.Fatalf("the failing job is %s (%q)", failed.State, failed.Error)
	}
	long := c.submit(api.JobRequest{Op: "sleep", Input: c.put(nil), Params: map[string]string{"ms": "120000"}, Units: 8})
	t.Cleanup(func() { c.c.Cancel(context.Background(), long.Job) })
	var ls api.JobStatus
	if !testwait.Until(30*time.Second, func() bool {
		ls, err = c.c.Status(t.Context(), long.Job)
		return err == nil && ls.Units.Computing == 3
	}) {
		t.Fatalf("job %d: %d units computing after 30s, want 3 (the threads): %+v, %v", long.Job, ls.Units.Computing, ls.Units, err)
	}
	if ls.Units.Running < 3 {
		t.Errorf("job %d: %d units in flight, want at least the 3 computing", long.Job, ls.Units.Running)
	}
	busyDom := headless(t, bin, url, "--dump-dom")
	lrow := regexp.MustCompile(`(?s)<tr data-job="` + fmt.Sprint(long.Job) + `" data-state="running"[^>]*>(.*?)</tr>`).FindStringSubmatch(busyDom)
	if lrow == nil {
		t.Fatalf("no row for running job %d; DOM:\n%s", long.Job, busyDom)
	}
	for _, want := range []string{`<td class="num running">3</td>`, fmt.Sprintf(`<td class="num inflight">%d</td>`, ls.Units.Running)} {
		if !strings.Contains(lrow[1], want) {
			t.Errorf("running job's row lacks %s: %s", want, lrow[1])
		}
	}
	frow := regexp.MustCompile(`(?s)<tr data-job="` + fmt.Sprint(failed.Job) + `" data-state="failed"[^>]*>(.*?)</tr>`).FindStringSubmatch(busyDom)
	if frow == nil || !strings.Contains(frow[1], `<td class="error"`) || !strings.Contains(frow[1], ">"+html.EscapeString(failed.Error[:min(40, len(failed.Error))])) {
		t.Errorf("failed job %d's row does not show its error %q: %v", failed.Job, failed.Error, frow)
	}
	for _, tw := range []*testWorker{w1, w2} {
		id := workerID(tw)
		wrow := regexp.MustCompile(`(?s)<tr data-worker="` + regexp.QuoteMeta(id) + `" class="live">(.*?)</tr>`).FindStringSubmatch(busyDom)
		if wrow == nil || !strings.Contains(wrow[1], `<td class="num busy">100%</td>`) {
			t.Errorf("worker %s, all of whose threads compute, is not shown 100%% busy: %v", id, wrow)
		}
	}

	// A worker killed while it holds units (its relay closes, as for
	// kill -9: the server's redial is refused) shows dead, with nothing
	// running or queued (its units run elsewhere), and keeps the units
	// and compute time it delivered.
	// The long job is canceled first, lest the new worker get a backup
	// copy of one of its units and deliver nothing.
	if _, err := c.c.Cancel(t.Context(), long.Job); err != nil {
		t.Fatal(err)
	}
	r := c.addRelayedWorker(1, func(*worker.Config) {})
	c.waitWorkers(3)
	short := c.submit(api.JobRequest{Op: "sleep", Input: c.put(nil), Params: map[string]string{"ms": "50"}, Units: 400})
	t.Cleanup(func() { c.c.Cancel(context.Background(), short.Job) })
	doomed := c.waitHolding(r)
	c.kill(r, doomed.ID)
	deadDom := headless(t, bin, url, "--dump-dom")
	dead, err := c.c.Worker(t.Context(), doomed.ID, false)
	if err != nil || dead.Alive || dead.DiedOf == "" {
		t.Fatalf("the killed worker is %+v, %v: want dead with a cause", dead, err)
	}
	// Its row stays, greyed (class dead), and says in a cell of its own,
	// not only in a tooltip, when and why it died.
	drow := regexp.MustCompile(`(?s)<tr data-worker="` + regexp.QuoteMeta(doomed.ID) + `" class="dead">(.*?)</tr>`).FindStringSubmatch(deadDom)
	if drow == nil {
		t.Fatalf("no greyed row for the killed worker %s; DOM:\n%s", doomed.ID, deadDom)
	}
	died := regexp.MustCompile(`<td class="died" title="[^"]*">([^<]*)</td>`).FindStringSubmatch(drow[1])
	if died == nil || !strings.HasPrefix(died[1], "dead since ") ||
		!strings.Contains(died[1], html.EscapeString(dead.DiedOf[:min(40, len(dead.DiedOf))])) {
		t.Errorf("the killed worker's row does not show when and why it died (%q): %s", dead.DiedOf, drow[1])
	}
	for _, want := range []string{">dead<", `title="dead since `, `<td class="num running">0</td>`, `<td class="num queued">0</td>`, `<td class="num load"></td>`} {
		if !strings.Contains(drow[1], want) {
			t.Errorf("the killed worker's row lacks %s: %s", want, drow[1])
		}
	}
	var done uint64
	if m := regexp.MustCompile(`<td class="num done">(\d+)</td>`).FindStringSubmatch(drow[1]); m != nil {
		fmt.Sscan(m[1], &done)
	}
	if done < doomed.Done {
		t.Errorf("the killed worker's row shows %d units done, want at least the %d it had delivered: %s", done, doomed.Done, drow[1])
	}
	if regexp.MustCompile(`<td class="num compute">0 ms</td>`).MatchString(drow[1]) {
		t.Errorf("the killed worker's row lost its compute time: %s", drow[1])
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
