package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runBraid runs braid with args to completion within d and returns the
// exit code and outputs.
func runBraid(t testing.TB, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb syncBuffer
	code := Run(ctx, args, &out, &errb)
	if ctx.Err() != nil {
		t.Fatalf("braid %s: still running after %v\nstderr:\n%s", strings.Join(args, " "), d, errb.String())
	}
	return code, out.String(), errb.String()
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
// TestLocal runs 'braid local' in-process: an embedded cluster blurs a
// sample image and checks the output against the single-unit blur.
func TestLocal(t *testing.T) {
	t.Setenv("BRAID_KEY", "") // braid local makes up a key
	out := filepath.Join(t.TempDir(), "out.png")
	code, stdout, stderr := runBraid(t, 60*time.Second, "local", "--size", "384", "--tile", "96x96", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"worker w1", "worker w2", "units       16 over 2 streams", "per worker  w1 ", "of its lent time)",
		"throughput", "identical to the single-unit blur"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "random cluster key") {
		t.Errorf("stderr does not say the key was made up:\n%s", stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width != 384 || cfg.Height != 384 {
		t.Errorf("output image: %+v, %v", cfg, err)
	}
}

func TestLocalJSON(t *testing.T) {
	t.Setenv("BRAID_KEY", "local-json-test-key-0123456789")
	dir := t.TempDir()
	code, stdout, stderr := runBraid(t, 60*time.Second, "local", "--size", "256", "--tile", "64x64", "--policy", "equal",
		"--data", filepath.Join(dir, "data"), "-o", filepath.Join(dir, "out.png"), "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		State    string `json:"state"`
		Units    int    `json:"units"`
		Streams  int    `json:"streams"`
		Verified bool   `json:"verified"`
		Policy   string `json:"policy"`
		Workers  []struct {
			Units     int     `json:"units"`
			Computing float64 `json:"computing"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, stdout)
	}
	if rep.State != "done" || rep.Units != 16 || !rep.Verified || rep.Policy != "equal" || len(rep.Workers) != 2 ||
		rep.Workers[0].Units+rep.Workers[1].Units != 16 || rep.Workers[0].Units != 8 {
		t.Errorf("report %+v", rep)
	}
	for i, w := range rep.Workers {
		if w.Computing <= 0 || w.Computing > 1 {
			t.Errorf("worker %d computing %.3f of its lent time, want within (0, 1]", i, w.Computing)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "server", "jobs.db")); err != nil {
		t.Errorf("--data not used: %v", err)
	}
}

// TestLocalIdleWorkerShowsZero runs one unit on three workers: the
// workers that computed nothing show 0 units, 0 tries and 0% computing,
// and a worker credited no unit that computed anyway (a backup copy whose
// result came second) shows that try, so that "0 units" beside a
// computing share is explained in the text too.
func TestLocalIdleWorkerShowsZero(t *testing.T) {
	t.Setenv("BRAID_KEY", "local-idle-test-key-0123456789ab")
	for _, policy := range []string{"equal", "dynamic"} {
		t.Run(policy, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"local", "--size", "64", "--tile", "64x64", "--workers", "3", "--threads", "1", "--policy", policy,
				"-o", filepath.Join(dir, "out.png")}
			code, stdout, stderr := runBraid(t, 60*time.Second, append(args, "--json")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var rep localReport
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("not one JSON object: %v\n%s", err, stdout)
			}
			if rep.Units != 1 || len(rep.Workers) != 3 {
				t.Fatalf("want 1 unit on 3 workers: %+v", rep)
			}
			var units, idle uint64
			for _, w := range rep.Workers {
				units += w.Units
				switch {
				case w.Tries < w.Units:
					t.Errorf("worker %s: %d units but %d tries computed", w.ID, w.Units, w.Tries)
				case w.Tries == 0 && w.Computing != 0:
					t.Errorf("worker %s computed no try, yet shows computing %.0f%%", w.ID, 100*w.Computing)
				case w.Tries > 0 && w.Computing <= 0:
					t.Errorf("worker %s computed %d tries, yet shows computing 0%%", w.ID, w.Tries)
				}
				if w.Tries == 0 {
					idle++
				}
			}
			if units != 1 {
				t.Errorf("the workers are credited %d units, want the 1", units)
			}
			if policy == "equal" && idle != 2 {
				t.Errorf("%d workers computed nothing, want 2 (equal sends no backup copies): %+v", idle, rep.Workers)
			}
			// The text says the same: an idle worker "0 units (computing
			// 0%", one with a copy that came second "+ 1 other try".
			var b strings.Builder
			rep.print(&b)
			text := b.String()
			for _, w := range rep.Workers {
				want := fmt.Sprintf("%s %s", w.ID, plural(int(w.Units), "unit", "units"))
				if w.Tries > w.Units {
					want += fmt.Sprintf(" + %s", plural(int(w.Tries-w.Units), "other try", "other tries"))
				}
				want += fmt.Sprintf(" (computing %.0f%% of its lent time)", 100*w.Computing)
				if !strings.Contains(text, want) {
					t.Errorf("the report lacks %q:\n%s", want, text)
				}
				if w.Tries == 0 && !strings.Contains(text, w.ID+" 0 units (computing 0% of its lent time)") {
					t.Errorf("idle worker %s is not shown at 0:\n%s", w.ID, text)
				}
			}
			t.Logf("%s", text)
		})
	}
}

func TestLocalUsage(t *testing.T) {
	if code, _, stderr := runBraid(t, 10*time.Second, "local", "--size", "0"); code != 2 || !strings.Contains(stderr, "--size 0") {
		t.Errorf("--size 0: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runBraid(t, 10*time.Second, "local", "--tile", "0x0"); code != 2 || !strings.Contains(stderr, "at least 1 pixel") {
		t.Errorf("--tile 0x0: exit %d, %s", code, stderr)
	}
}
