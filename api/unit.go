package api

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// DefaultMaxMessage is the size limit UnmarshalBinary applies. Use Decode
// to choose another.
const DefaultMaxMessage = 256 << 20

// Message kinds: the first byte of every encoded Unit or Result.
const (
	kindUnit   = 'U'
	kindResult = 'R'
	version    = 1
	// unitVersion 2 sends long parameter values through a stream's
	// ParamCache (see AppendCached); version 1 units still decode.
	unitVersion = 2
	// resultVersion 2 adds the worker's timing of the unit (see Timing);
	// results of version 1, from older workers, still decode, untimed.
	resultVersion = 2
)

// Unit is one computation unit as it travels to a worker: everything the
// worker needs to run it.
type Unit struct {
	// Job and ID identify the unit; the Result carries them back.
	Job uint64
	ID  uint64
	// Attempt numbers the dispatches of this unit, from 1.
	Attempt uint32
	// Op names the operation to run.
	Op string
	// Params are the operation's parameters for this unit.
	Params map[string]string
	// Inputs are the unit's data: its own data first, then the results of
	// the units it depends on, in dependency order.
	Inputs [][]byte
}

// Result is a worker's answer for one unit.
type Result struct {
	Job     uint64
	ID      uint64
	Attempt uint32
	// Output is the operation's result; empty when Err is set.
	Output []byte
	// Err is the operation's error message; empty on success.
	Err string
	// ComputeNanos is how long the operation ran on the worker.
	ComputeNanos int64
	// Timing is when the worker received, ran and answered the unit, and
	// on which of its threads; zero from a worker that does not say.
	Timing Timing
}

// Timing is a worker's account of one unit: instants in nanoseconds of
// the worker's monotonic clock since it opened the session the unit came
// on, and the thread that ran it.
//
// The instants are offsets from a per-session origin rather than wall
// clock times because the worker's and the server's clocks are not
// synchronised: an offset only has to be placed once per session. The
// server places the session's origin on its own clock from causality
// alone: a unit is received after the server sent it and answered before
// the server read the answer, so each result bounds where the origin
// lies, the bounds narrow with every result, and all units of a session
// move together: their order and gaps on the worker are kept exactly
// (two units of one thread never overlap), whatever the clocks say.
type Timing struct {
	// Received is when the worker read the unit, Started and Ended when
	// the operation began and ended, Sent when the worker wrote the
	// result. Received is zero when the worker gave no timing.
	Received, Started, Ended, Sent int64
	// Thread numbers the worker's threads (its processors) in the
	// session from 0: the one that ran the unit.
	Thread uint32
}

// Timed reports whether the worker gave its timing.
func (t Timing) Timed() bool { return t.Received != 0 }

// Encoding (all integers are minimal unsigned varints unless noted):
//
//	unit:   'U' version job id attempt op nparams {key value}* ninputs {input}*
//	        (version 2: each value is a tag byte, then: 0 or 1, the value;
//	        2, the 32-byte SHA-256 of a value the stream's cache holds)
//	result: 'R' version job id attempt compute(zigzag varint) [timing] err output
//	timing: received started ended sent thread  (version 2 only)
//
// Strings and byte slices are a length followed by the bytes. Parameter
// keys are sorted and unique, so every value has exactly one encoding.

// AppendBinary appends the encoding of u to b. It implements
// encoding.BinaryAppender and never fails.
func (u *Unit) AppendBinary(b []byte) ([]byte, error) { return u.AppendCached(b, nil), nil }

// AppendCached appends the encoding of u to b, sending long parameter
// values through the stream's cache c (encoding version 2, which only a
// worker that registered ParamCache decodes). With c nil it appends
// encoding version 1, every value whole.
func (u *Unit) AppendCached(b []byte, c *ParamCache) []byte {
	b = slices.Grow(b, u.size())
	if c == nil {
		b = append(b, kindUnit, version)
	} else {
		b = append(b, kindUnit, unitVersion)
	}
	b = binary.AppendUvarint(b, u.Job)
	b = binary.AppendUvarint(b, u.ID)
	b = binary.AppendUvarint(b, uint64(u.Attempt))
	b = appendString(b, u.Op)
	keys := make([]string, 0, len(u.Params))
	for k := range u.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		if c == nil {
			b = appendString(b, u.Params[k])
		} else {
			b = c.appendParam(b, u.Params[k])
		}
	}
	b = binary.AppendUvarint(b, uint64(len(u.Inputs)))
	for _, in := range u.Inputs {
		b = binary.AppendUvarint(b, uint64(len(in)))
		b = append(b, in...)
	}
	return b
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (u *Unit) MarshalBinary() ([]byte, error) { return u.AppendBinary(nil) }

// UnmarshalBinary implements encoding.BinaryUnmarshaler with the limit
// DefaultMaxMessage. The decoded Inputs alias b.
func (u *Unit) UnmarshalBinary(b []byte) error { return u.Decode(b, DefaultMaxMessage) }

// Decode sets u from the encoding in b, which must not be longer than max
// bytes. The decoded Inputs alias b: keep b unchanged while they are in
// use. On error u is left in an unspecified state.
func (u *Unit) Decode(b []byte, max int) error { return u.DecodeCached(b, max, nil) }

// DecodeCached is Decode for a unit read from a stream whose cache is c:
// it resolves the parameter values of encoding version 2 through c, and
// updates c as the sender updated its own. With c nil, a unit that
// refers to cached values fails to decode.
func (u *Unit) DecodeCached(b []byte, max int, c *ParamCache) error {
	d := decoder{b: b, what: "unit"}
	if err := d.header(kindUnit, max); err != nil {
		return err
	}
	*u = Unit{}
	u.Job = d.uvarint("job")
	u.ID = d.uvarint("id")
	u.Attempt = d.uint32("attempt")
	u.Op = d.string("op")
	if n := d.count("params", 2); n > 0 {
		u.Params = make(map[string]string, n)
		prev := ""
		for i := range n {
			k := d.string("param key")
			var v string
			if d.b[1] >= 2 {
				v = d.param(c)
			} else {
				v = d.string("param value")
			}
			if d.err == nil && i > 0 && k <= prev {
				d.fail("param keys not sorted and unique")
			}
			prev = k
			u.Params[k] = v
		}
	}
	if n := d.count("inputs", 1); n > 0 {
		u.Inputs = make([][]byte, n)
		for i := range u.Inputs {
			u.Inputs[i] = d.bytes("input")
		}
	}
	return d.finish()
}

func (u *Unit) size() int {
	n := 2 + 3*binary.MaxVarintLen64 + binary.MaxVarintLen32 + len(u.Op) + 2*binary.MaxVarintLen64
	for k, v := range u.Params {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	for _, in := range u.Inputs {
		n += binary.MaxVarintLen64 + len(in)
	}
	return n
}

// AppendBinary appends the encoding of r to b. It implements
// encoding.BinaryAppender and never fails.
func (r *Result) AppendBinary(b []byte) ([]byte, error) {
	b = slices.Grow(b, 2+11*binary.MaxVarintLen64+len(r.Err)+len(r.Output))
	b = append(b, kindResult, resultVersion)
	b = binary.AppendUvarint(b, r.Job)
	b = binary.AppendUvarint(b, r.ID)
	b = binary.AppendUvarint(b, uint64(r.Attempt))
	b = binary.AppendVarint(b, r.ComputeNanos)
	t := &r.Timing
	b = binary.AppendVarint(b, t.Received)
	b = binary.AppendVarint(b, t.Started)
	b = binary.AppendVarint(b, t.Ended)
	b = binary.AppendVarint(b, t.Sent)
	b = binary.AppendUvarint(b, uint64(t.Thread))
	b = appendString(b, r.Err)
	b = binary.AppendUvarint(b, uint64(len(r.Output)))
	return append(b, r.Output...), nil
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (r *Result) MarshalBinary() ([]byte, error) { return r.AppendBinary(nil) }

// UnmarshalBinary implements encoding.BinaryUnmarshaler with the limit
// DefaultMaxMessage. The decoded Output aliases b.
func (r *Result) UnmarshalBinary(b []byte) error { return r.Decode(b, DefaultMaxMessage) }

// Decode sets r from the encoding in b, which must not be longer than max
// bytes. The decoded Output aliases b. On error r is left in an
// unspecified state.
func (r *Result) Decode(b []byte, max int) error {
	d := decoder{b: b, what: "result"}
	if err := d.header(kindResult, max); err != nil {
		return err
	}
	*r = Result{}
	r.Job = d.uvarint("job")
	r.ID = d.uvarint("id")
	r.Attempt = d.uint32("attempt")
	r.ComputeNanos = d.varint("compute time")
	if d.b[1] >= 2 {
		t := &r.Timing
		t.Received = d.varint("received")
		t.Started = d.varint("started")
		t.Ended = d.varint("ended")
		t.Sent = d.varint("sent")
		t.Thread = d.uint32("thread")
	}
	r.Err = d.string("error")
	r.Output = d.bytes("output")
	return d.finish()
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads one message; the first error sticks and later reads
// return zero values.
type decoder struct {
	b    []byte
	off  int
	what string
	err  error
}

func (d *decoder) header(kind byte, max int) error {
	if len(d.b) > max {
		return fmt.Errorf("api: decode %s: %d bytes, limit %d: %w", d.what, len(d.b), max, ErrTooLarge)
	}
	if len(d.b) < 2 {
		return fmt.Errorf("api: decode %s: %d bytes, too short for a header: %w", d.what, len(d.b), ErrMalformed)
	}
	if d.b[0] != kind {
		name := fmt.Sprintf("kind byte 0x%02x", d.b[0])
		switch d.b[0] {
		case kindUnit:
			name = "a unit"
		case kindResult:
			name = "a result"
		}
		return fmt.Errorf("api: decode %s: message is %s: %w", d.what, name, ErrMalformed)
	}
	latest := byte(unitVersion)
	if kind == kindResult {
		latest = resultVersion
	}
	if d.b[1] < version || d.b[1] > latest {
		return fmt.Errorf("api: decode %s: encoding version %d, this build speaks %d to %d: %w", d.what, d.b[1], version, latest, ErrMalformed)
	}
	d.off = 2
	return nil
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("api: decode %s at byte %d: %s: %w", d.what, d.off, fmt.Sprintf(format, args...), ErrMalformed)
	}
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n == 0:
		d.fail("%s: truncated", field)
		return 0
	case n < 0:
		d.fail("%s: varint overflows 64 bits", field)
		return 0
	case n > 1 && d.b[d.off+n-1] == 0:
		d.fail("%s: varint not minimally encoded", field)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint(field string) int64 {
	u := d.uvarint(field)
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) uint32(field string) uint32 {
	v := d.uvarint(field)
	if v > 1<<32-1 {
		d.fail("%s: %d does not fit 32 bits", field, v)
		return 0
	}
	return uint32(v)
}

// count reads an element count and checks that the rest of the message
// could hold that many elements of at least min bytes each.
func (d *decoder) count(field string, min int) int {
	v := d.uvarint(field)
	if d.err != nil {
		return 0
	}
	if v > uint64(len(d.b)-d.off)/uint64(min) {
		d.fail("%s: count %d exceeds the %d bytes left", field, v, len(d.b)-d.off)
		return 0
	}
	return int(v)
}

func (d *decoder) bytes(field string) []byte {
	v := d.uvarint(field + " length")
	if d.err != nil {
		return nil
	}
	if v > uint64(len(d.b)-d.off) {
		d.fail("%s: length %d exceeds the %d bytes left", field, v, len(d.b)-d.off)
		return nil
	}
	if v == 0 {
		return nil
	}
	p := d.b[d.off : d.off+int(v) : d.off+int(v)]
	d.off += int(v)
	return p
}

func (d *decoder) string(field string) string { return string(d.bytes(field)) }

func (d *decoder) finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d trailing bytes", len(d.b)-d.off)
	}
	return d.err
}
