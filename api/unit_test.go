package api

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

func sampleUnits() []Unit {
	return []Unit{
		{},
		{Job: 1, ID: 2, Attempt: 1, Op: "noop"},
		{Job: 1<<64 - 1, ID: 1<<63 + 5, Attempt: 1<<32 - 1, Op: "blur",
			Params: map[string]string{"radius": "5", "sigma": "1.5", "": "empty key"},
			Inputs: [][]byte{[]byte("GIF89a..."), nil, bytes.Repeat([]byte{0xff}, 300)}},
		{Job: 7, ID: 0, Op: "checksum", Params: map[string]string{"step": "reduce"},
			Inputs: [][]byte{nil, make([]byte, 32), make([]byte, 32)}},
	}
}

func sampleResults() []Result {
	return []Result{
		{},
		{Job: 1, ID: 2, Attempt: 3, Output: []byte("out"), ComputeNanos: 12345},
		{Job: 1<<64 - 1, ID: 9, Err: "blur: tile 3: corrupt header", ComputeNanos: -1},
		{Job: 4, ID: 5, Output: bytes.Repeat([]byte("x"), 1000), ComputeNanos: 1 << 62},
		{Job: 6, ID: 7, Attempt: 1, Output: []byte("timed"), ComputeNanos: 900,
			Timing: Timing{Received: 1_000, Started: 1_500, Ended: 2_400, Sent: 2_600, Thread: 3}},
		{Job: 8, ID: 9, Err: "x", Timing: Timing{Received: -5, Started: 1 << 62, Ended: -1 << 63, Sent: 1<<63 - 1, Thread: 1<<32 - 1}},
	}
}

// sameBytes treats nil and empty as equal.
func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) }

func sameUnit(a, b *Unit) bool {
	return a.Job == b.Job && a.ID == b.ID && a.Attempt == b.Attempt && a.Op == b.Op &&
		len(a.Params) == len(b.Params) && (len(a.Params) == 0 || maps.Equal(a.Params, b.Params)) &&
		slices.EqualFunc(a.Inputs, b.Inputs, sameBytes)
}

func sameResult(a, b *Result) bool {
	return a.Job == b.Job && a.ID == b.ID && a.Attempt == b.Attempt && a.Err == b.Err &&
		a.ComputeNanos == b.ComputeNanos && bytes.Equal(a.Output, b.Output) && a.Timing == b.Timing
}

func TestUnitRoundTrip(t *testing.T) {
	for i, u := range sampleUnits() {
		b, err := u.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Unit
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
		if !sameUnit(&u, &got) {
			t.Errorf("unit %d: got %+v, want %+v", i, got, u)
		}
		// Encoding is canonical: the same value encodes the same way.
		b2, _ := got.MarshalBinary()
		if !bytes.Equal(b, b2) {
			t.Errorf("unit %d: re-encoding differs", i)
		}
		// Appending keeps the prefix.
		b3, _ := u.AppendBinary([]byte("prefix"))
		if !bytes.HasPrefix(b3, []byte("prefix")) || !bytes.Equal(b3[6:], b) {
			t.Errorf("unit %d: AppendBinary mangled the prefix", i)
		}
	}
}

func TestResultRoundTrip(t *testing.T) {
	for i, r := range sampleResults() {
		b, _ := r.MarshalBinary()
		var got Result
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("result %d: %v", i, err)
		}
		if !sameResult(&r, &got) {
			t.Errorf("result %d: got %+v, want %+v", i, got, r)
		}
	}
}

// TestResultVersion1 decodes a result as a worker of encoding version 1
// (before timing) writes it: it decodes, untimed, and re-encodes as
// version 2 with the same content.
func TestResultVersion1(t *testing.T) {
	// 'R' 1 job=5 id=6 attempt=2 compute=zigzag(300) err="" output="ok"
	v1 := []byte{'R', 1, 5, 6, 2, 0xd8, 0x04, 0, 2, 'o', 'k'}
	var r Result
	if err := r.Decode(v1, 100); err != nil {
		t.Fatal(err)
	}
	want := Result{Job: 5, ID: 6, Attempt: 2, ComputeNanos: 300, Output: []byte("ok")}
	if !sameResult(&r, &want) || r.Timing.Timed() {
		t.Fatalf("got %+v, want %+v, untimed", r, want)
	}
	enc, _ := r.MarshalBinary()
	if enc[1] != 2 {
		t.Errorf("re-encoded as version %d, want 2", enc[1])
	}
	var again Result
	if err := again.Decode(enc, 100); err != nil || !sameResult(&again, &want) {
		t.Errorf("version 2 re-encoding: %v, %+v", err, again)
	}
	if err := r.Decode([]byte{'R', 3}, 100); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "version 3, this build speaks 1 to 2") {
		t.Errorf("result version 3: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	unit, _ := (&Unit{Job: 1, ID: 2, Op: "blur", Params: map[string]string{"a": "1", "b": "2"}, Inputs: [][]byte{[]byte("data")}}).MarshalBinary()
	result, _ := (&Result{Job: 1, ID: 2, Output: []byte("out")}).MarshalBinary()
	// Swap the two params to make keys unsorted: U 1 job id attempt op(5) n=2 [1 a 1 1] [1 b 1 2]
	unsorted := bytes.Clone(unit)
	i := bytes.Index(unsorted, []byte{1, 'a', 1, '1', 1, 'b', 1, '2'})
	copy(unsorted[i:], []byte{1, 'b', 1, '2', 1, 'a', 1, '1'})

	tests := []struct {
		name string
		b    []byte
		max  int
		want error
		msg  string
	}{
		{"empty", nil, 100, ErrMalformed, "too short"},
		{"too large", unit, 5, ErrTooLarge, "limit 5"},
		{"result as unit", result, 100, ErrMalformed, "message is a result"},
		{"bad kind", []byte{'Z', 1}, 100, ErrMalformed, "kind byte 0x5a"},
		{"bad version", []byte{'U', 9}, 100, ErrMalformed, "version 9"},
		{"truncated", unit[:len(unit)-2], 100, ErrMalformed, "exceeds"},
		{"trailing", append(bytes.Clone(unit), 0), 100, ErrMalformed, "trailing"},
		{"unsorted params", unsorted, 100, ErrMalformed, "sorted"},
		{"non-minimal varint", []byte{'U', 1, 0x80, 0x00}, 100, ErrMalformed, "minimally"},
		{"varint overflow", []byte{'U', 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 100, ErrMalformed, "overflows"},
		{"attempt too big", []byte{'U', 1, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x10}, 100, ErrMalformed, "32 bits"},
		{"huge count", []byte{'U', 1, 0, 0, 0, 0, 0xff, 0xff, 0x03}, 100, ErrMalformed, "count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u Unit
			err := u.Decode(tt.b, tt.max)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %q, want it to mention %q", err, tt.msg)
			}
		})
	}
	var r Result
	if err := r.Decode(unit, 100); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "message is a unit") {
		t.Errorf("unit decoded as result: %v", err)
	}
}

func TestDecodeAliases(t *testing.T) {
	b, _ := (&Unit{Inputs: [][]byte{[]byte("abc")}}).MarshalBinary()
	var u Unit
	if err := u.Decode(b, len(b)); err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] = 'X'
	if string(u.Inputs[0]) != "abX" {
		t.Errorf("input %q does not alias the message", u.Inputs[0])
	}
	// Appending to an input must not overwrite the message.
	_ = append(u.Inputs[0], 'Y')
	if b[len(b)-1] != 'X' {
		t.Error("append to an input overwrote the message")
	}
}

func FuzzUnit(f *testing.F) {
	for _, u := range sampleUnits() {
		b, _ := u.MarshalBinary()
		f.Add(b)
	}
	for _, r := range sampleResults() {
		b, _ := r.MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var u Unit
		if err := u.Decode(b, 1<<20); err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			return
		}
		enc, _ := u.MarshalBinary()
		if !bytes.Equal(enc, b) {
			t.Fatalf("decode then encode changed the bytes:\n got %x\nwant %x", enc, b)
		}
		var again Unit
		if err := again.Decode(enc, len(enc)); err != nil || !sameUnit(&u, &again) {
			t.Fatalf("round trip: %v, %+v != %+v", err, again, u)
		}
	})
}

func FuzzResult(f *testing.F) {
	for _, r := range sampleResults() {
		b, _ := r.MarshalBinary()
		f.Add(b)
	}
	for _, u := range sampleUnits() {
		b, _ := u.MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Result
		if err := r.Decode(b, 1<<20); err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			return
		}
		enc, _ := r.MarshalBinary()
		if b[1] == 1 {
			// Version 1 re-encodes as version 2: same content.
			var again Result
			if err := again.Decode(enc, len(enc)); err != nil || !sameResult(&r, &again) {
				t.Fatalf("version 1 round trip: %v, %+v != %+v", err, again, r)
			}
			return
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("decode then encode changed the bytes:\n got %x\nwant %x", enc, b)
		}
	})
}

func BenchmarkUnitEncode(b *testing.B) {
	u := Unit{Job: 1, ID: 2, Op: "blur", Params: map[string]string{"radius": "5"}, Inputs: [][]byte{make([]byte, 1<<20)}}
	buf := make([]byte, 0, 2<<20)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = u.AppendBinary(buf[:0])
	}
}

func BenchmarkUnitDecode(b *testing.B) {
	u := Unit{Job: 1, ID: 2, Op: "blur", Params: map[string]string{"radius": "5"}, Inputs: [][]byte{make([]byte, 1<<20)}}
	enc, _ := u.MarshalBinary()
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		var v Unit
		if err := v.Decode(enc, len(enc)); err != nil {
			b.Fatal(err)
		}
	}
}
