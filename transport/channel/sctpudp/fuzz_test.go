package sctpudp

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// FuzzStripInitParams feeds the INIT rewriter, which sees every datagram a
// peer sends, arbitrary packets: it must not panic, never grow a packet,
// and leave only valid INITs behind when it rewrites.
func FuzzStripInitParams(f *testing.F) {
	usr, _ := hex.DecodeString(usrsctpInit)
	f.Add(usr)
	f.Add(makeInit(1))
	f.Add([]byte("not sctp"))
	f.Add(usr[:40])
	f.Fuzz(func(t *testing.T, in []byte) {
		b := bytes.Clone(in)
		n := stripInitParams(b)
		if n > len(in) || n < 0 {
			t.Fatalf("length %d from %d", n, len(in))
		}
		if n == len(in) && !bytes.Equal(b, in) {
			if !checksumOK(b[:n]) {
				t.Fatalf("rewritten in place without a valid checksum: %x -> %x", in, b)
			}
		}
		if n != len(in) && (!checksumOK(b[:n]) || b[12] != ctInit) {
			t.Fatalf("rewrote %x into an invalid packet %x", in, b[:n])
		}
		isInit(in) // must not panic either
	})
}
