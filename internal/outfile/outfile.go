// Package outfile writes the files braid makes for its user (outputs of
// get, local, sample, op run and recv) the way cp and the shell's > would:
// with the usual permissions less the umask, and atomically, through a
// temporary file renamed into place.
package outfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Perm is the permission of the files braid writes for the user
// (get -o, local -o, sample -o, op run -o), before the umask: 0644 with the
// usual umask of 022, as cp, curl -o and the shell's > would make them.
const Perm fs.FileMode = 0o666

// CreateTemp is os.CreateTemp with the permission perm, filtered by the
// umask as os.Create filters it, instead of a fixed 0600: the file is
// renamed into place as the user's output. The last "*" of pattern is
// replaced by a random string.
func CreateTemp(dir, pattern string, perm fs.FileMode) (*os.File, error) {
	prefix, suffix := pattern, ""
	if i := strings.LastIndex(pattern, "*"); i >= 0 {
		prefix, suffix = pattern[:i], pattern[i+1:]
	}
	for range 10000 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64()%1e10, 10)+suffix)
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if os.IsExist(err) {
			continue
		}
		return f, err
	}
	return nil, &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, pattern), Err: fs.ErrExist}
}

// WriteAtomic writes b to name through a temporary file renamed into
// place, so that name is either the old file or the whole new one. The
// new file has Perm filtered by the umask. Unless replace is set, an
// existing name is left alone and the error is an *ExistsError.
func WriteAtomic(name string, b []byte, replace bool) error {
	if f, ok, err := OpenSpecial(name); ok || err != nil {
		if err != nil {
			return err
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	if !replace {
		if err := CheckFree(name); err != nil {
			return err
		}
	}
	tmp, err := CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".part-*", Perm)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, bytes.NewReader(b)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return Place(tmp.Name(), name, replace)
}

// ExistsError is the error of a write that would have replaced an
// existing file without being asked to.
type ExistsError struct{ Name string }

func (e *ExistsError) Error() string { return fmt.Sprintf("%s exists; nothing was replaced", e.Name) }

// Is makes errors.Is(err, fs.ErrExist) true.
func (e *ExistsError) Is(target error) bool { return target == fs.ErrExist }

// CheckFree returns an *ExistsError if name exists (as anything, a
// dangling link included): a command checks it before it spends time on
// the output, and Place checks again as it puts the file in place.
func CheckFree(name string) error {
	if special(name) {
		return nil // written into, not replaced: see OpenSpecial
	}
	if _, err := os.Lstat(name); err == nil {
		return &ExistsError{Name: name}
	}
	return nil
}

// special reports whether name is, or links to, something that is
// neither a regular file nor a directory: a device such as /dev/null, a
// named pipe, a socket.
func special(name string) bool {
	fi, err := os.Stat(name)
	return err == nil && !fi.Mode().IsRegular() && !fi.IsDir()
}

// OpenSpecial opens name for writing if it is a device (/dev/null,
// /dev/stdout), a named pipe or a socket, and reports whether it is one:
// output goes into those as the shell's > would send it, since renaming
// a file over them would replace the device itself (as root, /dev/null
// would become a regular file).
func OpenSpecial(name string) (*os.File, bool, error) {
	if !special(name) {
		return nil, false, nil
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	return f, true, err
}

// Place moves the finished temporary file tmp to name. With replace it
// renames it, replacing whatever is there; without, it links it to name,
// which fails if name exists, so a file made meanwhile is not replaced
// either (where the file system has no hard links, it checks, then
// renames). tmp stays for the caller to remove.
func Place(tmp, name string, replace bool) error {
	if replace {
		return os.Rename(tmp, name)
	}
	err := os.Link(tmp, name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrExist):
		return &ExistsError{Name: name}
	}
	if err := CheckFree(name); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
