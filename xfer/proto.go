package xfer

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// The file copy protocol of send and recv. Each file travels on its own
// stream of one session:
//
//	sender                               receiver
//	Header {name, size, mode}    ──▶     checks the name, creates DIR/.braid-recv-*.part
//	content: messages of ≤ 4 MiB ──▶     writes and hashes
//	Trailer {sha256}             ──▶     compares, fsyncs, renames to DIR/NAME
//	close                        ◀──     Verdict {ok | error}
//
// The receiver may send an error verdict at any point (bad name, disk
// error); the sender then stops and closes the stream, and the receiver
// discards what is still in flight. Content is exactly size bytes in any
// number of messages; the message after them is the trailer.

// Version is the version of the file copy protocol.
const Version = 1

// Port is the port of send/recv addresses given without one.
const Port = 7202

// chunk is the size of the content messages.
const chunk = 4 << 20

// Header opens a file's stream.
type Header struct {
	Version int    `json:"version"`
	Name    string `json:"name"` // base name only
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // permission bits
}

// Trailer follows the content.
type Trailer struct {
	SHA256 string `json:"sha256"` // hex
}

// Verdict is the receiver's answer.
type Verdict struct {
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	SHA256 string `json:"sha256,omitempty"` // what the receiver computed
}

// ErrBadName is wrapped by CheckName's errors.
var ErrBadName = errors.New("refusing file name")

// CheckName accepts a plain file name: no directory part, nothing that
// could escape the receiver's directory.
func CheckName(name string) error {
	var why string
	switch {
	case name == "":
		why = "it is empty"
	case name == "." || name == "..":
		why = "it names a directory"
	case strings.ContainsAny(name, `/\`):
		why = "it contains a path separator; only base names are accepted"
	case strings.ContainsRune(name, 0):
		why = "it contains a NUL byte"
	case !utf8.ValidString(name):
		why = "it is not valid UTF-8"
	case len(name) > 255:
		why = "it is longer than 255 bytes"
	case filepath.Base(name) != name || filepath.IsAbs(name):
		why = "it is not a base name"
	default:
		return nil
	}
	return fmt.Errorf("%w %q: %s", ErrBadName, name, why)
}
