package xfer

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "data.bin", ".hidden", "..x", "x..", "名前.txt", "a b"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", "/abs", `a\b`, "a\x00b", "\xff", strings.Repeat("x", 256)} {
		if err := CheckName(bad); !errors.Is(err, ErrBadName) {
			t.Errorf("CheckName(%q) = %v, want ErrBadName", bad, err)
		}
	}
}
