package api

import (
	"errors"
	"strings"
	"testing"
)

// TestParamCache: over one stream, a long value travels whole once and
// then as a reference; both caches agree through evictions; a decoder
// without the value, or without a cache, refuses the unit.
func TestParamCache(t *testing.T) {
	long := func(c byte, n int) string { return strings.Repeat(string(c), n) }
	big := long('a', 900<<10)
	send, recv := NewParamCache(), NewParamCache()
	var sent int
	for i := range 200 {
		u := Unit{Job: 7, ID: uint64(i), Attempt: 1, Op: "up", Params: map[string]string{"BIG": big, "N": "1", "MID": long('m', ParamCacheMin)}}
		b := u.AppendCached(nil, send)
		sent += len(b)
		var got Unit
		if err := got.DecodeCached(b, DefaultMaxMessage, recv); err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
		if got.Params["BIG"] != big || got.Params["N"] != "1" || got.Params["MID"] != u.Params["MID"] || got.ID != uint64(i) {
			t.Fatalf("unit %d decoded with other params", i)
		}
	}
	if sent > len(big)+ParamCacheMin+200*200 {
		t.Errorf("200 units sent %d bytes: the %d-byte value travelled more than once", sent, len(big))
	}
	// Many values: the caches evict the same ones and stay bounded.
	for i := range 3 * ParamCacheEntries {
		v := long(byte('A'+i%50), ParamCacheMin+i) // distinct by length
		for _, p := range []string{v, big} {
			u := Unit{Job: 8, ID: uint64(i), Params: map[string]string{"P": p}}
			var got Unit
			if err := got.DecodeCached(u.AppendCached(nil, send), DefaultMaxMessage, recv); err != nil || got.Params["P"] != p {
				t.Fatalf("value %d: %v", i, err)
			}
		}
	}
	sv, sb := send.Len()
	rv, rb := recv.Len()
	if sv != rv || sb != rb || sv > ParamCacheEntries || sb > ParamCacheBytes {
		t.Errorf("caches: sender %s, receiver %s; limits %d values, %d bytes", send, recv, ParamCacheEntries, ParamCacheBytes)
	}
	// A reference the receiver does not hold (a fresh stream), or a
	// cached unit read without a cache, fails with a reason.
	b := (&Unit{Job: 9, Params: map[string]string{"BIG": big}}).AppendCached(nil, send)
	if err := new(Unit).DecodeCached(b, DefaultMaxMessage, NewParamCache()); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "does not hold") {
		t.Errorf("reference on a fresh stream: %v", err)
	}
	if err := new(Unit).Decode(b, DefaultMaxMessage); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "no cache") {
		t.Errorf("cached unit without a cache: %v", err)
	}
	// A value longer than the cache travels whole every time.
	huge := long('h', ParamCacheBytes+1)
	c := NewParamCache()
	for range 2 {
		b := (&Unit{Params: map[string]string{"H": huge}}).AppendCached(nil, c)
		if len(b) < len(huge) {
			t.Fatalf("a value beyond the cache was sent as a reference")
		}
	}
}

// FuzzUnitCached: a unit of encoding version 2 read on a stream never
// panics, fails only with the sentinels, and leaves the stream's cache
// within its limits.
func FuzzUnitCached(f *testing.F) {
	c := NewParamCache()
	long := strings.Repeat("v", ParamCacheMin)
	for _, u := range append(sampleUnits(), Unit{Job: 1, Params: map[string]string{"A": long, "B": long, "C": "x"}}) {
		f.Add(u.AppendCached(nil, c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		recv := NewParamCache()
		for range 2 { // the second read sees the first's cache
			var u Unit
			if err := u.DecodeCached(b, 1<<20, recv); err != nil {
				if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
					t.Fatalf("error %v wraps neither sentinel", err)
				}
				return
			}
			if n, size := recv.Len(); n > ParamCacheEntries || size > ParamCacheBytes {
				t.Fatalf("cache beyond its limits: %s", recv)
			}
		}
	})
}
