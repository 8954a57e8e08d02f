package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
)

// FilesDir is where RunFiles shows its files to the module: a read-only
// directory preopened at this path.
const FilesDir = "/in"

// File is a read-only file a module finds in FilesDir.
type File struct {
	// Name is one path element: not empty, no '/' or NUL, not "." or "..".
	Name string
	Data []byte
}

// ErrBadFile is returned by RunFiles for a file name that is not one
// path element, or a name given twice.
var ErrBadFile = errors.New("wasm: invalid file name")

// RunFiles is Run with files: besides stdin, the module finds each of
// files, read-only, in the directory FilesDir (its only preopen). The
// files usually slice stdin: they cost no copy.
func (m *Module) RunFiles(ctx context.Context, name string, stdin []byte, files []File, env map[string]string, lim Limits) ([]byte, error) {
	if len(files) == 0 {
		return m.Run(ctx, name, stdin, env, lim)
	}
	fsys, err := newMemFS(files)
	if err != nil {
		return nil, fmt.Errorf("wasm: run %s: %w", name, err)
	}
	return m.run(ctx, name, stdin, fsys, env, lim)
}

// withFiles returns cfg with fsys mounted read-only at FilesDir, or cfg
// itself for no fsys.
func withFiles(cfg wazero.ModuleConfig, fsys fs.FS) wazero.ModuleConfig {
	if fsys == nil {
		return cfg
	}
	return cfg.WithFSConfig(wazero.NewFSConfig().WithFSMount(fsys, FilesDir))
}

// memFS is an fs.FS of files in memory in one directory.
type memFS struct {
	files  []File
	byName map[string]int
	guard  *hostGuard // the run's, set by run
}

func newMemFS(files []File) (*memFS, error) {
	m := &memFS{files: files, byName: make(map[string]int, len(files))}
	for i, f := range files {
		if f.Name == "" || f.Name == "." || f.Name == ".." || strings.ContainsAny(f.Name, "/\x00") {
			return nil, fmt.Errorf("%w: %q: want one path element", ErrBadFile, f.Name)
		}
		if _, dup := m.byName[f.Name]; dup {
			return nil, fmt.Errorf("%w: %q given twice", ErrBadFile, f.Name)
		}
		m.byName[f.Name] = i
	}
	return m, nil
}

func (m *memFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return &memDir{fs: m}, nil
	}
	i, ok := m.byName[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	f := m.files[i]
	return &memFile{Reader: bytes.NewReader(f.Data), info: memInfo{name: f.Name, size: int64(len(f.Data))}, guard: m.guard}, nil
}

// memInfo is the fs.FileInfo of a memFS file or of its directory.
type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (i memInfo) ModTime() time.Time         { return time.Time{} }
func (i memInfo) IsDir() bool                { return i.dir }
func (i memInfo) Sys() any                   { return nil }
func (i memInfo) Type() fs.FileMode          { return i.Mode().Type() }
func (i memInfo) Info() (fs.FileInfo, error) { return i, nil }

// memFile is an open memFS file.
type memFile struct {
	*bytes.Reader
	info  memInfo
	guard *hostGuard
}

// Read and ReadAt copy hostChunk bytes at a time, checking the run's
// context before each: fd_read and fd_pread of many large iovecs would
// copy a large file many times.
func (f *memFile) Read(p []byte) (int, error) {
	return f.chunks("fd_read", p, func(b []byte, done int) (int, error) { return f.Reader.Read(b) })
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	return f.chunks("fd_pread", p, func(b []byte, done int) (int, error) { return f.Reader.ReadAt(b, off+int64(done)) })
}

// chunks fills p by calls of read on hostChunk bytes at a time (done is
// what the earlier calls read), until p is full, an error, or a short read.
func (f *memFile) chunks(fn string, p []byte, read func(b []byte, done int) (int, error)) (int, error) {
	n := 0
	for {
		f.guard.check(fn)
		want := min(len(p)-n, hostChunk)
		m, err := read(p[n:n+want], n)
		n += m
		if err != nil || m < want || n == len(p) {
			return n, err
		}
	}
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Close() error               { return nil }

// memDir is the open directory of a memFS.
type memDir struct {
	fs   *memFS
	next int // the entry ReadDir returns next
}

func (d *memDir) Stat() (fs.FileInfo, error) { return memInfo{name: ".", dir: true}, nil }
func (d *memDir) Close() error               { return nil }
func (d *memDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: errors.New("is a directory")}
}

func (d *memDir) ReadDir(n int) ([]fs.DirEntry, error) {
	left := len(d.fs.files) - d.next
	if n > 0 && left == 0 {
		return nil, io.EOF
	}
	if n <= 0 || n > left {
		n = left
	}
	out := make([]fs.DirEntry, n)
	for i := range out {
		f := d.fs.files[d.next+i]
		out[i] = memInfo{name: f.Name, size: int64(len(f.Data))}
	}
	d.next += n
	return out, nil
}
