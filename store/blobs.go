package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
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
//
// Every blob is verified against its ID as it is read: a Reader that
// reads a blob to its end returns a *CorruptError instead of its last
// bytes and io.EOF if the content does not hash to the ID. Putting bytes
// that are stored already checks the stored copy and replaces it if it is
// corrupt.
type Disk struct {
	dir  string
	sync bool
	// used is shared by the views of one directory (Unsynced).
	used *atomic.Int64
}

var _ Blobs = (*Disk)(nil)

// OpenDisk opens, creating if needed, the blob directory dir. Leftovers of
// uploads interrupted by a crash are removed, and the stored bytes are
// counted (see Used). cfg may be nil.
func OpenDisk(dir string, cfg *DiskConfig) (*Disk, error) {
	if cfg == nil {
		cfg = &DiskConfig{}
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("store: clear %s: %w", tmp, err)
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("store: open blob directory: %w", err)
	}
	d := &Disk{dir: dir, sync: !cfg.NoSync, used: new(atomic.Int64)}
	if _, err := d.Recount(context.Background()); err != nil {
		return nil, err
	}
	return d, nil
}

// Unsynced returns a view of the same directory whose Puts are not
// synced (as DiskConfig.NoSync), for data that can be made again. Both
// count the same stored bytes.
func (d *Disk) Unsynced() Blobs { return &Disk{dir: d.dir, used: d.used} }

// String names the directory, for logs and errors.
func (d *Disk) String() string { return d.dir }

// Close implements BlobStore; a Disk holds nothing open.
func (d *Disk) Close() error { return nil }

// Used returns the bytes of every blob stored in the directory, as
// counted at open and kept up to date by Put and Delete.
func (d *Disk) Used() int64 { return d.used.Load() }

// Recount counts the stored bytes again, for files changed behind the
// store's back, and returns them.
func (d *Disk) Recount(ctx context.Context) (int64, error) { return recount(ctx, d, d.used) }

// recount sums the sizes of b's blobs into used and returns the sum.
func recount(ctx context.Context, b Blobs, used *atomic.Int64) (int64, error) {
	list, err := b.List(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, bi := range list {
		n += bi.Size
	}
	used.Store(n)
	return n, nil
}

// Path returns the file that holds blob id (which need not exist).
func (d *Disk) Path(id string) string {
	if !ValidID(id) {
		return ""
	}
	return d.path(id)
}

func (d *Disk) path(id string) string { return filepath.Join(d.dir, id[:2], id) }

// Put implements Blobs.
func (d *Disk) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	st, err := d.Stage(ctx, r)
	if err != nil {
		return "", 0, err
	}
	defer st.Discard()
	if err := st.Commit(ctx); err != nil {
		return "", 0, err
	}
	return st.ID, st.Size, nil
}

// Staged is content written to a temporary place (a file, an object)
// and hashed, but not yet a blob: Commit makes it one, Discard drops it.
// A caller that must record the blob elsewhere in step with its arrival
// (and not during the whole upload) does so around Commit.
type Staged struct {
	// ID and Size are the content's sha256 and length.
	ID   string
	Size int64
	s    stager
}

// stager is what a BlobStore does to commit or discard staged content.
type stager interface {
	commit(ctx context.Context, id string, size int64) error
	discard()
}

// Commit puts the staged content in place as blob st.ID. If the blob is
// stored already, the staged bytes heal a corrupt copy: uploading the same
// bytes again repairs a blob.
func (st *Staged) Commit(ctx context.Context) error { return st.s.commit(ctx, st.ID, st.Size) }

// Discard drops the staged content if Commit did not use it. It is safe
// to call after Commit, and more than once.
func (st *Staged) Discard() { st.s.discard() }

// diskStage is a Disk's staged content: a temporary file.
type diskStage struct {
	d   *Disk
	tmp string
}

// Stage writes everything r yields to a temporary file and hashes it. It
// streams: memory use does not grow with the size.
func (d *Disk) Stage(ctx context.Context, r io.Reader) (*Staged, error) {
	f, err := os.CreateTemp(filepath.Join(d.dir, "tmp"), "put-*")
	if err != nil {
		return nil, fmt.Errorf("store: put: %w", err)
	}
	tmp := f.Name()
	h := sha256.New()
	size, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx, r})
	if err == nil && d.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("store: put: %w", err)
	}
	return &Staged{ID: hex.EncodeToString(h.Sum(nil)), Size: size, s: &diskStage{d: d, tmp: tmp}}, nil
}

func (st *diskStage) discard() {
	if st.tmp != "" {
		os.Remove(st.tmp)
		st.tmp = ""
	}
}

// commit links or renames the temporary file into place. If the blob is
// stored already, its copy is verified (streamed) and, if corrupt,
// replaced atomically by the staged one.
func (st *diskStage) commit(ctx context.Context, id string, size int64) error {
	if st.tmp == "" {
		return errors.New("store: commit: the staged content was discarded or committed")
	}
	d := st.d
	dst := d.path(id)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("store: put: %w", err)
	}
	if err := os.Chmod(st.tmp, 0o444); err != nil {
		return fmt.Errorf("store: put: %w", err)
	}
	// A link puts a new blob in place only if none is there, so two
	// Puts of the same bytes count them once.
	err := os.Link(st.tmp, dst)
	if err == nil {
		st.discard()
		d.used.Add(size)
		return d.syncNew(dst)
	}
	if !errors.Is(err, fs.ErrExist) {
		// A file system without hard links: a rename does it too.
		if err := os.Rename(st.tmp, dst); err != nil {
			return fmt.Errorf("store: put: %w", err)
		}
		st.tmp = ""
		d.used.Add(size)
		return d.syncNew(dst)
	}
	old, err := os.Stat(dst)
	switch {
	case err == nil:
		verr := d.verify(ctx, id)
		if verr == nil {
			st.discard()
			return nil // already stored, and sound
		}
		if !errors.Is(verr, ErrCorrupt) && !errors.Is(verr, ErrNotFound) {
			return fmt.Errorf("store: put: check the stored copy: %w", verr)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("store: put: %w", err)
	default:
		old = nil // deleted meanwhile
	}
	// A rename replaces a corrupt copy atomically: readers see the old
	// file or the new one, never a mix.
	if err := os.Rename(st.tmp, dst); err != nil {
		return fmt.Errorf("store: put: %w", err)
	}
	st.tmp = ""
	delta := size
	if old != nil {
		delta -= old.Size()
	}
	d.used.Add(delta)
	return d.syncNew(dst)
}

// syncNew makes the directory entry of a new blob durable.
func (d *Disk) syncNew(dst string) error {
	if !d.sync {
		return nil
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("store: put: %w", err)
	}
	return nil
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

// Open implements Blobs. Reading the blob sequentially from its start
// verifies it: the read that reaches the end returns a *CorruptError
// instead of the last bytes if the content does not hash to id. Reads at
// offsets (ReadAt, or after a Seek away from where the verified bytes
// end) are not verified; Verify checks a whole blob first.
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
	return &blobFile{f: f, id: id, path: d.path(id), size: fi.Size(), h: sha256.New()}, fi.Size(), nil
}

// verifyBuf is the buffer size of Verify: large enough that a read costs
// little next to hashing it, small enough to be nothing next to a blob.
const verifyBuf = 256 << 10

// Verify reads blob id from start to end, hashing it as it goes (it does
// not hold the blob in memory), and returns a *CorruptError if the
// content does not hash to id.
func (d *Disk) Verify(ctx context.Context, id string) error {
	return d.verify(ctx, id)
}

func (d *Disk) verify(ctx context.Context, id string) error {
	r, size, err := d.Open(id)
	if err != nil {
		return err
	}
	defer r.Close()
	// A small blob (a dataset's member) gets a small buffer: one read
	// to its end and one to see EOF.
	buf := make([]byte, min(verifyBuf, size+1))
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := r.Read(buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// blobFile is a Disk blob open for reading; see Disk.Open.
type blobFile struct {
	f        *os.File
	id, path string
	size     int64
	pos      int64
	h        hash.Hash // has seen bytes [0, hashed)
	hashed   int64
	checked  bool
	err      error // sticky: the content is corrupt
}

func (b *blobFile) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.pos >= b.size {
		if err := b.check(); err != nil {
			return 0, err
		}
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), b.size-b.pos)]
	n, err := b.f.ReadAt(p, b.pos)
	if n < len(p) && err == io.EOF && b.hashed == b.pos {
		// The file is shorter than when it was opened.
		b.err = &CorruptError{ID: b.id, Path: b.path}
		return 0, b.err
	}
	if b.hashed == b.pos {
		b.h.Write(p[:n])
		b.hashed += int64(n)
	}
	b.pos += int64(n)
	if b.pos >= b.size {
		// Withhold the last bytes of a corrupt blob: the reader gets an
		// error, never the whole of what is on disk and io.EOF.
		if cerr := b.check(); cerr != nil {
			return 0, cerr
		}
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}

// check compares the hash with the ID once every byte was hashed.
func (b *blobFile) check() error {
	if b.checked || b.hashed != b.size {
		return b.err
	}
	b.checked = true
	if sum := hex.EncodeToString(b.h.Sum(nil)); sum != b.id {
		b.err = &CorruptError{ID: b.id, Path: b.path, Sum: sum}
	}
	return b.err
}

// seekTo returns where a Seek of a blob reader at pos of a blob of size
// goes.
func seekTo(id string, pos, size, off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += pos
	case io.SeekEnd:
		off += size
	default:
		return 0, fmt.Errorf("store: seek blob %s: bad whence %d", id, whence)
	}
	if off < 0 {
		return 0, fmt.Errorf("store: seek blob %s: negative position %d", id, off)
	}
	return off, nil
}

func (b *blobFile) Seek(off int64, whence int) (int64, error) {
	off, err := seekTo(b.id, b.pos, b.size, off, whence)
	if err != nil {
		return 0, err
	}
	if off == 0 && b.hashed != 0 && !b.checked {
		b.h.Reset()
		b.hashed = 0
	}
	b.pos = off
	return off, nil
}

// ReadAt reads at an offset, without verifying.
func (b *blobFile) ReadAt(p []byte, off int64) (int, error) { return b.f.ReadAt(p, off) }

func (b *blobFile) Close() error { return b.f.Close() }

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
	p := d.path(id)
	fi, err := os.Stat(p)
	if err != nil {
		return d.wrap("delete", id, err)
	}
	if err := os.Remove(p); err != nil {
		return d.wrap("delete", id, err)
	}
	d.used.Add(-fi.Size())
	return nil
}

func (d *Disk) wrap(op, id string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: %s blob %s: %w", op, id, ErrNotFound)
	}
	if IsNoSpace(err) {
		return fmt.Errorf("store: %s blob %s: %w: %w", op, id, ErrNoSpace, err)
	}
	return fmt.Errorf("store: %s blob %s: %w", op, id, err)
}
