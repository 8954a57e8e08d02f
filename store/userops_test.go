package store

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestIsModule: a module stays a module after its operation is removed;
// other hashes are not.
func TestIsModule(t *testing.T) {
	ctx := t.Context()
	s := openDB(t, filepath.Join(t.TempDir(), "ops.db"))
	mod, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	if _, err := s.AddOp(ctx, UserOp{Name: "cat", Hash: mod, Size: 10}); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveOp(ctx, "cat"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.IsModule(ctx, mod); !ok || err != nil {
		t.Errorf("IsModule(module of a removed op) = %v, %v", ok, err)
	}
	if ok, err := s.IsModule(ctx, other); ok || err != nil {
		t.Errorf("IsModule(other) = %v, %v", ok, err)
	}
}
