package store

import (
	"context"
	"errors"
	"fmt"
)

// CopyReport says what CopyBlobs did.
type CopyReport struct {
	// Copied and Skipped count the blobs copied and those dst held
	// already; Bytes counts the bytes copied.
	Copied, Skipped int
	Bytes           int64
	// Failed lists the blobs that could not be copied, with why: a
	// corrupt source blob is not copied (its *CorruptError says so).
	Failed []error
}

// CopyBlobs copies every blob of src that dst does not hold into dst,
// streamed, one at a time: to move a server's blobs from its disk into an
// object store, or back. Every blob is verified on the way (read whole
// from src, which checks it, and hashed again by dst's Put), so a corrupt
// source blob is reported in Failed, never copied. A blob that fails does
// not stop the others; an error of src's listing, or ctx ending, does.
// progress, if not nil, is called after each blob with err nil, or why it
// failed.
func CopyBlobs(ctx context.Context, dst, src BlobStore, progress func(b BlobInfo, copied bool, err error)) (CopyReport, error) {
	var rep CopyReport
	list, err := src.List(ctx)
	if err != nil {
		return rep, err
	}
	for _, b := range list {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		copied, err := copyBlob(ctx, dst, src, b)
		switch {
		case err != nil:
			rep.Failed = append(rep.Failed, err)
		case copied:
			rep.Copied++
			rep.Bytes += b.Size
		default:
			rep.Skipped++
		}
		if progress != nil {
			progress(b, copied, err)
		}
	}
	return rep, nil
}

// copyBlob copies blob b from src to dst unless dst has it already.
func copyBlob(ctx context.Context, dst, src BlobStore, b BlobInfo) (bool, error) {
	if info, err := dst.Stat(b.ID); err == nil && info.Size == b.Size {
		return false, nil
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return false, fmt.Errorf("store: copy blob %s: %w", b.ID, err)
	}
	r, _, err := src.Open(b.ID)
	if err != nil {
		return false, fmt.Errorf("store: copy blob %s: %w", b.ID, err)
	}
	defer r.Close()
	// Stage, then Commit only if the bytes are the blob's: src's reader
	// fails a corrupt blob at its end, and the ID checks the rest.
	st, err := dst.Stage(ctx, r)
	if err != nil {
		return false, fmt.Errorf("store: copy blob %s: %w", b.ID, err)
	}
	defer st.Discard()
	if st.ID != b.ID {
		return false, fmt.Errorf("store: copy blob %s: %w", b.ID, &CorruptError{ID: b.ID, Path: src.String(), Sum: st.ID})
	}
	if err := st.Commit(ctx); err != nil {
		return false, fmt.Errorf("store: copy blob %s: %w", b.ID, err)
	}
	return true, nil
}
