package metrics

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestLoopback(t *testing.T) {
	for in, want := range map[string]string{
		"6060":           "127.0.0.1:6060",
		":6060":          "127.0.0.1:6060",
		"0.0.0.0:6060":   "0.0.0.0:6060",
		"10.0.0.5:9101":  "10.0.0.5:9101",
		"[::1]:9101":     "[::1]:9101",
		"localhost:9101": "localhost:9101",
	} {
		if got := Loopback(in); got != want {
			t.Errorf("Loopback(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestListenPprof serves the profiles on a port alone: it binds loopback
// and answers the index.
func TestListenPprof(t *testing.T) {
	l, err := Listen("pprof", "0", PprofHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !strings.HasPrefix(l.Addr(), "127.0.0.1:") {
		t.Errorf("listening on %s, want loopback", l.Addr())
	}
	resp, err := http.Get("http://" + l.Addr() + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Errorf("pprof index: %d %.200s", resp.StatusCode, body)
	}
	if _, err := Listen("pprof", l.Addr(), PprofHandler(), nil); err == nil || !strings.Contains(err.Error(), "pprof: listen on") {
		t.Errorf("a second listener on the same address: %v", err)
	}
}
