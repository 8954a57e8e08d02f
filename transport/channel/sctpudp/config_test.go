package sctpudp

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// inits counts the datagrams a silent peer receives while k dials it for
// d: the INIT and its retransmissions, one per retransmission timeout.
func inits(t *testing.T, k Kind, d time.Duration) int {
	t.Helper()
	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		c, err := k.Dial(ctx, "127.0.0.1:0", silent.LocalAddr().String())
		if c != nil {
			_ = c.Close()
		}
		done <- err
	}()
	n := 0
	buf := make([]byte, 2048)
	_ = silent.SetReadDeadline(time.Now().Add(d))
	for {
		if _, _, err := silent.ReadFrom(buf); err != nil {
			break
		}
		n++
	}
	if err := <-done; err == nil {
		t.Fatal("dial to a silent peer succeeded")
	}
	return n
}

// RTOMax reaches pion: under a 20 ms cap the INIT is resent every 20 ms
// instead of after pion's fixed 1 s initial timeout.
func TestRTOMax(t *testing.T) {
	const d = 300 * time.Millisecond
	capped, def := inits(t, Kind{Config: Config{RTOMax: 20 * time.Millisecond}}, d), inits(t, Kind{}, d)
	t.Logf("INITs in %v: %d with RTOMax 20ms, %d by default", d, capped, def)
	if capped < 4 {
		t.Errorf("RTOMax 20ms: %d INITs in %v, want 4 or more", capped, d)
	}
	if def > 2 {
		t.Errorf("default RTO: %d INITs in %v, want 1 (pion's RTO.Initial is 1 s)", def, d)
	}
}

func TestValidate(t *testing.T) {
	if err := (Config{RTOMax: 5 * time.Millisecond}).Validate(); err == nil || !strings.Contains(err.Error(), "RTOMax 5ms out of range [10ms, 24h0m0s]") {
		t.Errorf("Validate: %v", err)
	}
	if err := (Config{MTU: 9000}).Validate(); err == nil || !strings.Contains(err.Error(), "MTU 9000 out of range [256, 8192]") {
		t.Errorf("Validate: %v", err)
	}
	if err := (Config{MTU: 1200, ZeroChecksum: true, RTOMax: time.Second}).Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}
