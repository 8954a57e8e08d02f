package ops

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestSplitWholeImageReadsHeaderOnly: an untiled image job sends the file
// as is, so Split reads only the header; a file with a sound header and
// corrupt pixels fails in its unit, naming the cause.
func TestSplitWholeImageReadsHeaderOnly(t *testing.T) {
	in := encodePNG(t, SampleImage(64, 64))
	bad := in[:len(in)/2]
	specs, err := Blur().Split(bytes.NewReader(bad), int64(len(bad)), nil, Hint{Repeat: 3})
	if err != nil {
		t.Fatalf("Split of a truncated PNG, untiled: %v", err)
	}
	if len(specs) != 3 || !specs[0].FromInput || specs[0].Len != int64(len(bad)) {
		t.Fatalf("specs = %+v, want 3 copies of the whole input", specs)
	}
	_, err = Blur().Run(t.Context(), nil, [][]byte{bad})
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "corrupt png image") {
		t.Errorf("Run on the truncated PNG: %v", err)
	}
	// Tiled, Split decodes and fails at once.
	_, err = Blur().Split(bytes.NewReader(bad), int64(len(bad)), nil, Hint{TileW: 16, TileH: 16})
	if !errors.Is(err, ErrBadInput) {
		t.Errorf("tiled Split of a truncated PNG: %v", err)
	}
	// Not an image at all fails in Split either way.
	_, err = Blur().Split(strings.NewReader("hello"), 5, nil, Hint{})
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "not a PNG") {
		t.Errorf("Split of text: %v", err)
	}
}

func TestRegisterRejectsReservedNames(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(named{name: "braid:figures"}); err == nil {
		t.Error("registered a name with ':'")
	}
}

type named struct {
	noop
	name string
}

func (n named) Name() string { return n.name }

func TestMessage(t *testing.T) {
	_, err := Blur().Split(strings.NewReader("hello"), 5, nil, Hint{})
	if got := Message(err); got != "blur: input is not a PNG, JPEG or GIF image" {
		t.Errorf("Message = %q", got)
	}
}
