package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Blobs stores immutable, content-addressed byte strings.
type Blobs interface {
	// Put stores everything r yields and returns the content's ID and
	// size. It streams: memory use does not grow with the size. Putting
	// bytes that are already stored is cheap and returns the same ID.
	Put(ctx context.Context, r io.Reader) (id string, size int64, err error)
	// Open returns a reader of the blob and its size.
	Open(id string) (Reader, int64, error)
	// Stat returns the blob's info.
	Stat(id string) (BlobInfo, error)
	// List returns every blob, sorted by ID.
	List(ctx context.Context) ([]BlobInfo, error)
	// Delete removes the blob. Readers already open keep working.
	Delete(id string) error
}

// Reader reads a blob, sequentially or at offsets.
type Reader interface {
	io.ReadSeekCloser
	io.ReaderAt
}

// BlobInfo describes one blob.
type BlobInfo struct {
	ID      string
	Size    int64
	ModTime time.Time
}

// ValidID reports whether id has the form of a blob ID.
func ValidID(id string) bool {
	if len(id) != 2*sha256.Size {
		return false
	}
	for i := range len(id) {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// DiskConfig configures a Disk. The zero value is ready to use.
type DiskConfig struct {
	// NoSync skips fsync of new blobs and their directories. Zero means
	// every Put is on stable storage before it returns, so a crash of the
	// machine loses no blob an accepted job refers to.
	NoSync bool
}

// Disk is Blobs in a directory: blob ID ab12... lives at dir/ab/ab12...,
// and uploads in progress in dir/tmp. It is safe for concurrent use.
type Disk struct {
	dir  string
	sync bool
}

var _ Blobs = (*Disk)(nil)

// OpenDisk opens, creating if needed, the blob directory dir. Leftovers of
// uploads interrupted by a crash are removed. cfg may be nil.
func OpenDisk(dir string, cfg *DiskConfig) (*Disk, error) {
	if cfg == nil {
		cfg = &DiskConfig{}
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("store: clear %s: %w", tmp, err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("store: open blob directory: %w", err)
	}
	return &Disk{dir: dir, sync: !cfg.NoSync}, nil
}

func (d *Disk) path(id string) string { return filepath.Join(d.dir, id[:2], id) }

// Put implements Blobs.
func (d *Disk) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	f, err := os.CreateTemp(filepath.Join(d.dir, "tmp"), "put-*")
	if err != nil {
		return "", 0, fmt.Errorf("store: put: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename this fails harmlessly
	h := sha256.New()
	size, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx, r})
	if err == nil && d.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("store: put: %w", err)
	}
	id := hex.EncodeToString(h.Sum(nil))
	dst := d.path(id)
	if _, err := os.Stat(dst); err == nil {
		return id, size, nil // already stored
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", 0, fmt.Errorf("store: put: %w", err)
	}
	if err := os.Chmod(tmp, 0o444); err != nil {
		return "", 0, fmt.Errorf("store: put: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", 0, fmt.Errorf("store: put: %w", err)
	}
	if d.sync {
		if err := syncDir(filepath.Dir(dst)); err != nil {
			return "", 0, fmt.Errorf("store: put: %w", err)
		}
	}
	return id, size, nil
}

// ctxReader stops a copy when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Open implements Blobs. The reader is an *os.File.
func (d *Disk) Open(id string) (Reader, int64, error) {
	if !ValidID(id) {
		return nil, 0, fmt.Errorf("store: open %q: %w", id, ErrInvalidID)
	}
	f, err := os.Open(d.path(id))
	if err != nil {
		return nil, 0, d.wrap("open", id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, d.wrap("open", id, err)
	}
	return f, fi.Size(), nil
}

// Stat implements Blobs.
func (d *Disk) Stat(id string) (BlobInfo, error) {
	if !ValidID(id) {
		return BlobInfo{}, fmt.Errorf("store: stat %q: %w", id, ErrInvalidID)
	}
	fi, err := os.Stat(d.path(id))
	if err != nil {
		return BlobInfo{}, d.wrap("stat", id, err)
	}
	return BlobInfo{ID: id, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// List implements Blobs.
func (d *Disk) List(ctx context.Context) ([]BlobInfo, error) {
	var out []BlobInfo
	err := filepath.WalkDir(d.dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if path != d.dir && e.Name() == "tmp" {
				return fs.SkipDir
			}
			return ctx.Err()
		}
		if !ValidID(e.Name()) {
			return nil
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return err
		}
		out = append(out, BlobInfo{ID: e.Name(), Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list blobs: %w", err)
	}
	slices.SortFunc(out, func(a, b BlobInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Delete implements Blobs.
func (d *Disk) Delete(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("store: delete %q: %w", id, ErrInvalidID)
	}
	if err := os.Remove(d.path(id)); err != nil {
		return d.wrap("delete", id, err)
	}
	return nil
}

func (d *Disk) wrap(op, id string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: %s blob %s: %w", op, id, ErrNotFound)
	}
	return fmt.Errorf("store: %s blob %s: %w", op, id, err)
}
