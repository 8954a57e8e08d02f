// Package outfile writes the files braid makes for its user (outputs of
// get, local, sample, op run and recv) the way cp and the shell's > would:
// with the usual permissions less the umask, and atomically, through a
// temporary file renamed into place.
package outfile

import (
	"bytes"
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
// new file has Perm filtered by the umask.
func WriteAtomic(name string, b []byte) error {
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
	return os.Rename(tmp.Name(), name)
}
