package stripe

import (
	"slices"
	"testing"
)

// FuzzSegment plays a sequence of Claim, Remove and Join calls read from
// the input, then lets the surviving workers drain the segment, and checks
// that every fragment was claimed exactly once and that receivers decode
// every path's stream.
//
// Input: byte 0 and 1 give n (0..1023), byte 2 the mode and the planned
// workers (1..6, ids 0..5, with or without rates); every further byte is
// one operation: its low 3 bits choose Claim (0-4), Claim eight times
// (5), Remove (6) or Join (7), the next 3 bits the worker id 0..7 (6 and
// 7 are not in the plan).
func FuzzSegment(f *testing.F) {
	f.Add([]byte{0, 40, 3})
	f.Add([]byte{0, 40, 3, 0x00, 0x08, 0x10, 0x18, 0x0d, 0x15, 0x1d, 0x0e, 0x05})
	f.Add([]byte{4, 0, 0x25, 0x05, 0x0d, 0x15, 0x1d, 0x25, 0x06, 0x0e, 0x16, 0x30, 0x07, 0x05})
	f.Add([]byte{0, 1, 5, 0x38, 0x30, 0x00})
	f.Add([]byte{0, 7, 0x80, 0x00, 0x08, 0x06, 0x0e, 0x07, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		n := (int(data[0])<<8 | int(data[1])) % 1024
		mode := Mode(data[2] >> 7)
		k := 1 + int(data[2]&7)%6
		var ws []Worker
		for i := range k {
			w := Worker{ID: i}
			if data[2]&0x40 != 0 {
				w.Rate = float64(1 + i*int(data[2]>>3&7))
			}
			ws = append(ws, w)
		}
		s := NewSegment(n, mode, ws)
		r := newRecorder(s, n, mode)
		known := map[int]bool{}
		for _, w := range ws {
			known[w.ID] = true
		}
		removed := map[int]bool{}
		for _, b := range data[3:] {
			id := int(b>>3) & 7
			switch op := b & 7; {
			case op <= 4:
				r.claim(id)
				known[id] = true
			case op == 5:
				for range 8 {
					r.claim(id)
				}
				known[id] = true
			case op == 6:
				s.Remove(id) // an id the segment never saw stays unknown
				removed[id] = known[id]
			default:
				known[id] = true
				s.Join(Worker{ID: id, Rate: float64(b >> 6)})
				delete(removed, id)
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
		}
		var live []int
		for id := range 8 {
			if !removed[id] {
				live = append(live, id)
			}
		}
		if len(live) == 0 {
			s.Join(Worker{ID: 99})
			live = []int{99}
		}
		drainAll(r, live)
		r.check(t, slices.Concat(live, []int{0, 1, 2, 3, 4, 5, 6, 7}))
		st := s.Stats()
		sum := 0
		for _, c := range st.Claimed {
			sum += c
		}
		if sum != n {
			t.Fatalf("contributions sum to %d, want %d", sum, n)
		}
		if mode == Basic && (st.Starts != 0 || st.Ends != 0) {
			t.Fatalf("basic mode issued control messages: %+v", st)
		}
	})
}
