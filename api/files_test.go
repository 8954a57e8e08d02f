package api

import (
	"strings"
	"testing"
)

// FuzzParseFiles: ParseFiles never panics, and what it accepts encodes
// back to the same parts and adds up to the size.
func FuzzParseFiles(f *testing.F) {
	f.Add(EncodeFiles([]FilePart{{"a", 3}, {"job-42", 0}, {"b c", 7}}), int64(10))
	f.Add("3 a\n", int64(3))
	f.Add("x a\n", int64(0))
	f.Add("-1 a\n", int64(-1))
	f.Add("", int64(0))
	f.Fuzz(func(t *testing.T, s string, size int64) {
		parts, err := ParseFiles(s, size)
		if err != nil {
			if !strings.Contains(err.Error(), ParamFiles) {
				t.Errorf("error %q does not name %s", err, ParamFiles)
			}
			return
		}
		var sum int64
		for _, p := range parts {
			if p.Len < 0 || p.Name == "" {
				t.Fatalf("accepted part %+v", p)
			}
			sum += p.Len
		}
		if sum != size {
			t.Fatalf("parts add up to %d, size %d", sum, size)
		}
		again, err := ParseFiles(EncodeFiles(parts), size)
		if err != nil || len(again) != len(parts) {
			t.Fatalf("round trip: %v, %d parts of %d", err, len(again), len(parts))
		}
		for i := range parts {
			if again[i] != parts[i] {
				t.Fatalf("round trip: part %d %+v, was %+v", i, again[i], parts[i])
			}
		}
	})
}

// TestDatasetCheck: a manifest's members must be sorted, unique, named
// as files, with blob ids and sizes.
func TestDatasetCheck(t *testing.T) {
	id := strings.Repeat("0a", 32)
	m := func(name string) DatasetMember { return DatasetMember{Name: name, Size: 1, Blob: id} }
	good := Dataset{Format: DatasetFormat, Members: []DatasetMember{m("a"), m("b"), m("é")}}
	if err := good.Check(); err != nil {
		t.Fatalf("good manifest: %v", err)
	}
	for _, c := range []struct {
		members []DatasetMember
		want    string
	}{
		{nil, "no members"},
		{[]DatasetMember{m("b"), m("a")}, "sorted by name"},
		{[]DatasetMember{m("a"), m("a")}, "appears twice"},
		{[]DatasetMember{m("a\nb")}, "newline"},
		{[]DatasetMember{m(strings.Repeat("x", 256))}, "longer than 255"},
		{[]DatasetMember{{Name: "a", Size: 1, Blob: "nope"}}, "not a blob id"},
		{[]DatasetMember{{Name: "a", Size: -1, Blob: id}}, "size -1"},
	} {
		d := Dataset{Format: DatasetFormat, Members: c.members}
		if err := d.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want %q", c.members, err, c.want)
		}
	}
}
