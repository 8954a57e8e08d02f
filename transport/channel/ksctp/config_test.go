package ksctp

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for valid; else a substring of the error
	}{
		{"zero", Config{}, ""},
		{"paper 002", Config{SACKDelay: 40 * ms, SACKFreq: 7, MaxBurst: 16, MaxSeg: 8192}, ""},
		{"no burst limit", Config{MaxBurst: -1}, ""},
		{"no delayed SACK", Config{SACKFreq: 1}, ""},
		{"rto", Config{RTOInitial: 300 * ms, RTOMin: 20 * ms, RTOMax: 900 * ms}, ""},
		{"rto min only", Config{RTOMin: 10 * ms}, ""},
		{"buffers", Config{SendBuffer: 4 << 20, ReceiveBuffer: 4 << 20}, ""},
		{"sack delay too long", Config{SACKDelay: 600 * ms}, "SACKDelay 600ms out of range [1ms, 500ms]"},
		{"sack delay negative", Config{SACKDelay: -ms}, "SACKDelay -1ms out of range"},
		{"sack delay not ms", Config{SACKDelay: 1500 * time.Microsecond}, "SACKDelay 1.5ms is not a whole number of milliseconds"},
		{"sack freq negative", Config{SACKFreq: -1}, "SACKFreq -1 out of range [0, 65535]"},
		{"sack freq large", Config{SACKFreq: 70000}, "SACKFreq 70000"},
		{"max burst large", Config{MaxBurst: 65536}, "MaxBurst 65536 out of range"},
		{"maxseg small", Config{MaxSeg: 100}, "MaxSeg 100 out of range [512, 65516]"},
		{"maxseg large", Config{MaxSeg: 65517}, "MaxSeg 65517"},
		{"rto min above max", Config{RTOMin: 2 * time.Second, RTOMax: time.Second}, "RTOMin 2s above RTOMax 1s"},
		{"rto max below default min", Config{RTOMax: 500 * ms}, "RTOMin 1s above RTOMax 500ms (an unset one is the kernel's default)"},
		{"rto initial outside", Config{RTOInitial: 100 * ms}, "RTOInitial 100ms outside [RTOMin 1s, RTOMax 1m0s]"},
		{"rto too long", Config{RTOMax: 25 * time.Hour}, "RTOMax 25h0m0s out of range"},
		{"rto not ms", Config{RTOMin: 1500 * time.Microsecond}, "RTOMin 1.5ms is not a whole number"},
		{"sndbuf negative", Config{SendBuffer: -1}, "SendBuffer -1 out of range [0, 1 GiB]"},
		{"rcvbuf large", Config{ReceiveBuffer: 1<<31 - 1}, "ReceiveBuffer 2147483647 out of range"},
		{"fast failover", Config{HeartbeatInterval: time.Second, PathMaxRetrans: 2, RTOMin: 100 * ms, RTOMax: time.Second, RTOInitial: 200 * ms}, ""},
		{"heartbeat not ms", Config{HeartbeatInterval: 1500 * time.Microsecond}, "HeartbeatInterval 1.5ms is not a whole number"},
		{"heartbeat negative", Config{HeartbeatInterval: -ms}, "HeartbeatInterval -1ms out of range"},
		{"path max retrans large", Config{PathMaxRetrans: 65536}, "PathMaxRetrans 65536 out of range [0, 65535]"},
		{"path max retrans negative", Config{PathMaxRetrans: -1}, "PathMaxRetrans -1 out of range"},
		{"pf threshold", Config{PathMaxRetrans: 4, PFThreshold: 1}, ""},
		{"pf threshold zero", Config{PFThreshold: -1}, ""},
		{"pf threshold large", Config{PFThreshold: 65536}, "PFThreshold 65536 out of range [-1, 65535]"},
		{"pf threshold negative", Config{PFThreshold: -2}, "PFThreshold -2 out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("Validate accepted %+v", tc.cfg)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Validate: %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// A knob out of range fails Dial and Listen before any socket is made,
// wherever the kernel lacks SCTP too.
func TestKindValidates(t *testing.T) {
	k := Kind{Config: Config{MaxSeg: 100}}
	if _, err := k.Listen(t.Context(), "127.0.0.1:0"); err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "MaxSeg") {
		t.Errorf("Listen: %v, want the MaxSeg range error", err)
	}
	if _, err := k.Dial(t.Context(), "", "127.0.0.1:9"); err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "MaxSeg") {
		t.Errorf("Dial: %v, want the MaxSeg range error", err)
	}
}
