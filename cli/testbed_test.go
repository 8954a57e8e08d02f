package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/testbed"
)

// braid runs braid in-process and returns its exit code and output.
func braid(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := Run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// readBedFile reads a bed's state file.
func readBedFile(t *testing.T, path string) bedFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var bf bedFile
	if err := json.Unmarshal(data, &bf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return bf
}

func TestTestbedCommand(t *testing.T) {
	testbed.Skip(t)
	dir := t.TempDir()
	flags := []string{"--name", "clitest", "--state-dir", dir}
	state := filepath.Join(dir, "clitest.json")
	// Whatever happens, take the bed down.
	t.Cleanup(func() {
		data, err := os.ReadFile(state)
		if err != nil {
			return
		}
		var bf bedFile
		if json.Unmarshal(data, &bf) == nil {
			if b, err := testbed.Attach(bf.State); err == nil {
				b.Down()
			}
		}
	})

	code, out, errs := braid(t, append(append([]string{"testbed", "up"}, flags...), "--hosts", "a,b", "--nets", "100M,25M")...)
	if code != 0 {
		t.Fatalf("up: exit %d: %s", code, errs)
	}
	for _, want := range []string{"100Mbit/s", "25Mbit/s", "10.1.0.1", "10.2.0.2"} {
		if !strings.Contains(out, want) {
			t.Errorf("up output lacks %q:\n%s", want, out)
		}
	}
	if code, _, errs := braid(t, append(append([]string{"testbed", "up"}, flags...), "--hosts", "a,b")...); code != 1 || !strings.Contains(errs, "exists") {
		t.Errorf("second up: exit %d: %s", code, errs)
	}

	code, out, errs = braid(t, append([]string{"testbed", "show"}, flags...)...)
	if code != 0 || !strings.Contains(out, "10.2.0.1") {
		t.Fatalf("show: exit %d: %s%s", code, out, errs)
	}
	code, out, errs = braid(t, append([]string{"testbed", "show", "--json"}, flags...)...)
	var shown bedJSON
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil {
		t.Fatalf("show --json: exit %d, %v: %s%s", code, err, out, errs)
	}
	if shown.Name != "clitest" || len(shown.Networks) != 2 || shown.Networks[1].RateBps != 25e6 || shown.Networks[1].Duplex != "half" || len(shown.Hosts) != 2 ||
		shown.Hosts[0].Interfaces[1].Address != "10.2.0.1" {
		t.Errorf("show --json: %+v", shown)
	}

	// exec runs inside the host: it sees its addresses and reaches b.
	code, out, errs = braid(t, append(append([]string{"testbed", "exec"}, flags...), "a", "--", "ip", "-4", "-o", "addr", "show")...)
	if code != 0 || !strings.Contains(out, "10.1.0.1/24") || !strings.Contains(out, "10.2.0.1/24") {
		t.Fatalf("exec ip addr: exit %d: %s%s", code, out, errs)
	}
	if code, _, _ := braid(t, append(append([]string{"testbed", "exec"}, flags...), "a", "--", "false")...); code != 1 {
		t.Errorf("exec false: exit %d, want 1", code)
	}

	for _, action := range []string{"down", "up", "blackhole", "restore"} {
		if code, _, errs := braid(t, append(append([]string{"testbed", "link"}, flags...), "b", "1", action)...); code != 0 {
			t.Fatalf("link b 1 %s: exit %d: %s", action, code, errs)
		}
	}
	if code, _, errs := braid(t, append(append([]string{"testbed", "link"}, flags...), "b", "net0", "sideways")...); code != 2 {
		t.Errorf("link with a bad action: exit %d: %s", code, errs)
	}
	if code, _, errs := braid(t, append(append([]string{"testbed", "rate"}, flags...), "net1", "10M")...); code != 0 {
		t.Fatalf("rate: exit %d: %s", code, errs)
	}
	if _, out, _ := braid(t, append([]string{"testbed", "show"}, flags...)...); !strings.Contains(out, "10Mbit/s") {
		t.Errorf("show after rate:\n%s", out)
	}
	if _, err := exec.LookPath("nft"); err == nil {
		if code, _, errs := braid(t, append(append([]string{"testbed", "loss"}, flags...), "a", "net1", "2.5")...); code != 0 {
			t.Fatalf("loss: exit %d: %s", code, errs)
		}
		if code, out, errs := braid(t, append(append([]string{"testbed", "loss"}, flags...), "a", "1")...); code != 0 || !strings.Contains(out, "loss 2.5%") {
			t.Errorf("loss query: exit %d: %s%s", code, out, errs)
		}
		if code, _, errs := braid(t, append(append([]string{"testbed", "loss"}, flags...), "a", "1", "101")...); code != 1 || !strings.Contains(errs, "out of range") {
			t.Errorf("loss 101: exit %d: %s", code, errs)
		}
		if code, _, errs := braid(t, append(append([]string{"testbed", "loss"}, flags...), "a", "1", "lots")...); code != 2 {
			t.Errorf("loss lots: exit %d: %s", code, errs)
		}
		if code, _, errs := braid(t, append(append([]string{"testbed", "loss"}, flags...), "a", "1", "0")...); code != 0 {
			t.Errorf("loss 0: exit %d: %s", code, errs)
		}
	}
	if _, out, _ := braid(t, "testbed", "list", "--state-dir", dir); strings.TrimSpace(out) != "clitest" {
		t.Errorf("list: %q", out)
	}

	bf := readBedFile(t, state)
	ns := "bt" + bf.State.ID + "-a"
	if _, err := os.Stat("/run/netns/" + ns); err != nil {
		t.Fatalf("namespace %s missing while up: %v", ns, err)
	}
	if code, _, errs := braid(t, append([]string{"testbed", "down"}, flags...)...); code != 0 {
		t.Fatalf("down: exit %d: %s", code, errs)
	}
	if _, err := os.Stat("/run/netns/" + ns); err == nil {
		t.Errorf("namespace %s left after down", ns)
	}
	if _, err := os.Stat(state); err == nil {
		t.Errorf("state file left after down")
	}
	if code, _, errs := braid(t, append([]string{"testbed", "down"}, flags...)...); code != 1 || !strings.Contains(errs, "no testbed") {
		t.Errorf("second down: exit %d: %s", code, errs)
	}
}

// testbed up makes half-duplex networks by default, whose links share
// their rate between both directions, so that a 1 KB ping-pong over a
// 100 Mbit/s link measures at most 100 Mbit/s of effective bandwidth (on
// full-duplex links it measures up to twice that). --half-duplex is still
// accepted; --full-duplex gives each direction its own bucket.
func TestTestbedDuplex(t *testing.T) {
	testbed.Skip(t)
	dir := t.TempDir()
	up := func(name string, extra ...string) (bedJSON, *testbed.Bed) {
		t.Helper()
		flags := []string{"--name", name, "--state-dir", dir}
		t.Cleanup(func() { braid(t, append([]string{"testbed", "down"}, flags...)...) })
		code, out, errs := braid(t, append(append([]string{"testbed", "up"}, flags...), append([]string{"--hosts", "a,b", "--nets", "100M"}, extra...)...)...)
		if code != 0 {
			t.Fatalf("up %v: exit %d: %s", extra, code, errs)
		}
		want := "half"
		if slices.Contains(extra, "--full-duplex") {
			want = "full"
		}
		if !regexp.MustCompile(`(?m)^0 +net0 +100Mbit/s +` + want + ` `).MatchString(out) {
			t.Errorf("up %v: no %s-duplex network 0 in:\n%s", extra, want, out)
		}
		code, out, errs = braid(t, append([]string{"testbed", "show", "--json"}, flags...)...)
		var shown bedJSON
		if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil {
			t.Fatalf("show --json: exit %d, %v: %s%s", code, err, out, errs)
		}
		if len(shown.Networks) != 1 || shown.Networks[0].Duplex != want {
			t.Errorf("up %v: show --json: networks %+v, want one %s duplex", extra, shown.Networks, want)
		}
		b, err := testbed.Attach(readBedFile(t, filepath.Join(dir, name+".json")).State)
		if err != nil {
			t.Fatal(err)
		}
		return shown, b
	}

	shown, b := up("dflt")
	// Both directions go through host a's one shaper.
	code, out, errs := braid(t, "testbed", "exec", "--name", "dflt", "--state-dir", dir, "a", "--", "tc", "filter", "show", "dev", shown.Hosts[0].Interfaces[0].Dev, "ingress")
	if code != 0 || !strings.Contains(out, "mirred") {
		t.Errorf("a's ingress: exit %d, no redirect to its shaper: %s%s", code, out, errs)
	}
	// An upper bound: load only adds time, so it cannot fail by load.
	const size, rounds = 1 << 10, 1000
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	got, err := b.PingPong(ctx, "a", "b", 0, size, rounds)
	if err != nil {
		t.Fatal(err)
	}
	if got > 100e6 {
		t.Errorf("1 KB ping-pong on the default bed's 100 Mbit/s link: %.1f Mbit/s effective, above the rate", got/1e6)
	} else {
		t.Logf("1 KB ping-pong on the default bed's 100 Mbit/s link: %.1f Mbit/s effective", got/1e6)
	}
	braid(t, "testbed", "down", "--name", "dflt", "--state-dir", dir)

	up("half", "--half-duplex")
	up("full", "--full-duplex")
	if code, _, errs := braid(t, "testbed", "up", "--name", "both", "--state-dir", dir, "--full-duplex", "--half-duplex"); code != 2 || !strings.Contains(errs, "contradict") {
		t.Errorf("up --full-duplex --half-duplex: exit %d: %s", code, errs)
	}
	if code, out, _ := braid(t, "testbed", "up", "--help"); code != 0 || !strings.Contains(out, "half duplex by default") || !strings.Contains(out, "twice the rate") {
		t.Errorf("up --help does not say what each duplex does to a ping-pong:\n%s", out)
	}
}

// testbed down ends the processes testbed exec started inside the bed,
// says how many, and only then removes the namespaces.
func TestTestbedDownEndsExec(t *testing.T) {
	testbed.Skip(t)
	dir := t.TempDir()
	flags := []string{"--name", "procs", "--state-dir", dir}
	t.Cleanup(func() { braid(t, append([]string{"testbed", "down"}, flags...)...) })
	if code, _, errs := braid(t, append(append([]string{"testbed", "up"}, flags...), "--hosts", "a,b", "--nets", "10M")...); code != 0 {
		t.Fatalf("up: exit %d: %s", code, errs)
	}
	ns := "bt" + readBedFile(t, filepath.Join(dir, "procs.json")).State.ID + "-a"
	done := make(chan int, 1)
	go func() {
		code, _, _ := braid(t, append(append([]string{"testbed", "exec"}, flags...), "a", "--", "sleep", "600")...)
		done <- code
	}()
	pid := 0
	testwait.For(t, "sleep 600 inside host a", 10*time.Second, func() bool {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		if f := strings.Fields(string(out)); len(f) == 1 {
			pid, _ = strconv.Atoi(f[0])
		}
		return pid > 0
	})
	code, out, errs := braid(t, append([]string{"testbed", "down"}, flags...)...)
	if code != 0 || !strings.Contains(out, "ended 1 process inside testbed procs") {
		t.Errorf("down: exit %d, want it to say it ended 1 process: %s%s", code, out, errs)
	}
	select {
	case code := <-done:
		if code == 0 {
			t.Errorf("testbed exec of sleep 600 exited 0 after down")
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("testbed exec still waits for its sleep 600 (pid %d) after down", pid)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("sleep 600 (pid %d) still exists after down: %v", pid, err)
	}
}

// testbed list --json lists the beds of a state directory.
func TestTestbedListJSON(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"lab", "other"} {
		if err := os.WriteFile(filepath.Join(dir, n+".json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := braid(t, "testbed", "list", "--state-dir", dir, "--json")
	var got []struct{ Name, StateFile string }
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 2 || got[0].Name != "lab" || got[1].Name != "other" {
		t.Errorf("exit %d, %v: %s%s", code, err, out, errs)
	}
	if code, out, _ := braid(t, "testbed", "list", "--state-dir", t.TempDir(), "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("no beds: exit %d, %q", code, out)
	}
}

func TestTestbedUsage(t *testing.T) {
	if code, out, _ := braid(t, "testbed", "--help"); code != 0 || !strings.Contains(out, "blackhole") {
		t.Errorf("testbed --help: exit %d:\n%s", code, out)
	}
	if code, out, _ := braid(t, "testbed", "link", "--help"); code != 0 || !strings.Contains(out, "restore") {
		t.Errorf("testbed link --help: exit %d:\n%s", code, out)
	}
	if code, _, _ := braid(t, "testbed", "up", "--nets", "fast", "--state-dir", t.TempDir()); code != 2 {
		t.Errorf("up --nets fast: exit %d, want 2", code)
	}
	if code, _, _ := braid(t, "testbed", "frobnicate"); code != 2 {
		t.Errorf("unknown subcommand: exit %d, want 2", code)
	}
}

// testbed exec HOST -- braid ... runs the braid on PATH, or else this
// very binary when it is braid; other commands are left to PATH.
func TestSelfPath(t *testing.T) {
	if os.Getenv("BRAID_SELFPATH_CHILD") != "" {
		fmt.Print(selfPath("braid"))
		os.Exit(0)
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "braid")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if got := selfPath("braid"); got != fake {
		t.Errorf("braid on PATH: %q, want %q", got, fake)
	}
	if got := selfPath("ping"); got != "ping" {
		t.Errorf("ping: %q", got)
	}
	t.Setenv("PATH", t.TempDir())
	// This test binary is not named braid: nothing to fall back on.
	if got := selfPath("braid"); got != "braid" {
		t.Errorf("no braid on PATH, running %s: %q", os.Args[0], got)
	}
	// This test binary copied to a file named braid falls back on itself.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(t.TempDir(), "braid")
	if err := os.WriteFile(copied, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), copied, "-test.run", "^TestSelfPath$")
	cmd.Env = append(os.Environ(), "BRAID_SELFPATH_CHILD=1")
	out, err := cmd.Output()
	if err != nil || string(out) != copied {
		t.Errorf("no braid on PATH, running %s: %q, %v", copied, out, err)
	}
}
