package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/ops"
)

// TestSample: braid sample writes the sample PNG of the size asked, or
// the paper's GIF, and refuses bad flags with a message.
func TestSample(t *testing.T) {
	dir := t.TempDir()
	png := filepath.Join(dir, "in.png")
	if code, _, stderr := runBraid(t, 30*time.Second, "sample", "--size", "64", "-o", png); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got, _ := os.ReadFile(png); !bytes.Equal(got, ops.SamplePNG(64, 64)) {
		t.Error("the PNG is not the 64x64 sample image")
	}
	gif := filepath.Join(dir, "in.gif")
	if code, _, stderr := runBraid(t, 30*time.Second, "sample", "-o", gif); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got, _ := os.ReadFile(gif); !bytes.Equal(got, ops.SampleGIF()) {
		t.Error("the GIF is not the sample GIF")
	}
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"sample"}, "give the output file with -o FILE"},
		{[]string{"sample", "--size", "0", "-o", png}, "--size 0: want 1 to 16384"},
		{[]string{"sample", "-o", png, "extra"}, `unexpected argument "extra"`},
	} {
		code, _, stderr := runBraid(t, 10*time.Second, tt.args...)
		if code != 2 || !strings.Contains(stderr, tt.msg) {
			t.Errorf("braid %s: exit %d, stderr %q; want 2 with %q", strings.Join(tt.args, " "), code, stderr, tt.msg)
		}
	}
}
