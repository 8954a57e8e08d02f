package store

import (
	"bytes"
	"errors"
	"testing"
)

// TestCopyBlobs moves a disk's blobs into every kind of store: sound
// blobs are copied once, those there already skipped, a corrupt one
// reported and not copied.
func TestCopyBlobs(t *testing.T) {
	forEachStore(t, storeOpts{}, func(t *testing.T, dst BlobStore, _ behind) {
		ctx := t.Context()
		src, _ := newDisk(t)
		good := [][]byte{[]byte("one"), pattern(6 << 20), {}}
		for _, b := range good {
			if _, _, err := src.Put(ctx, bytes.NewReader(b)); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := dst.Put(ctx, bytes.NewReader(good[0])); err != nil {
			t.Fatal(err)
		}
		bad := pattern(100_000)
		badID, _, err := src.Put(ctx, bytes.NewReader(bad))
		if err != nil {
			t.Fatal(err)
		}
		corrupt(t, src, badID, flipFirst)

		var seen int
		rep, err := CopyBlobs(ctx, dst, src, func(BlobInfo, bool, error) { seen++ })
		if err != nil {
			t.Fatal(err)
		}
		if rep.Copied != 2 || rep.Skipped != 1 || len(rep.Failed) != 1 || rep.Bytes != 6<<20 || seen != 4 {
			t.Errorf("CopyBlobs = %+v after %d blobs; want 2 copied (6 MiB), 1 skipped, 1 failed", rep, seen)
		}
		if len(rep.Failed) == 1 && !errors.Is(rep.Failed[0], ErrCorrupt) {
			t.Errorf("the corrupt blob failed with %v, want ErrCorrupt", rep.Failed[0])
		}
		for _, b := range good {
			if got, err := readAll(t, dst, sha(b)); err != nil || !bytes.Equal(got, b) {
				t.Errorf("blob %s in dst: %d bytes, %v", sha(b)[:8], len(got), err)
			}
		}
		if _, err := dst.Stat(badID); !errors.Is(err, ErrNotFound) {
			t.Errorf("the corrupt blob reached dst: %v", err)
		}
		if dst.Used() != int64(3+6<<20) {
			t.Errorf("dst counts %d bytes", dst.Used())
		}
		// Again: nothing left to copy.
		rep, err = CopyBlobs(ctx, dst, src, nil)
		if err != nil || rep.Copied != 0 || rep.Skipped != 3 || len(rep.Failed) != 1 {
			t.Errorf("second CopyBlobs = %+v, %v", rep, err)
		}
	})
}
