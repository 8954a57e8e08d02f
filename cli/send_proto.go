package cli

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
//	sender                                   receiver
//	fileHeader {name, size, mode}    ──▶     checks the name, creates DIR/.NAME.*.part
//	content: messages of ≤ 4 MiB     ──▶     writes and hashes
//	fileTrailer {sha256}             ──▶     compares, fsyncs, renames to DIR/NAME
//	close                            ◀──     fileVerdict {ok | error}
//
// The receiver may send an error verdict at any point (bad name, disk
// error); the sender then stops and closes the stream, and the receiver
// discards what is still in flight. Content is exactly size bytes in any
// number of messages; the message after them is the trailer.

// copyVersion is the version of the file copy protocol.
const copyVersion = 1

// copyPort is the port of send/recv addresses given without one.
const copyPort = 7202

// copyChunk is the size of the content messages.
const copyChunk = 4 << 20

// fileHeader opens a file's stream.
type fileHeader struct {
	Version int    `json:"version"`
	Name    string `json:"name"` // base name only
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // permission bits
}

// fileTrailer follows the content.
type fileTrailer struct {
	SHA256 string `json:"sha256"` // hex
}

// fileVerdict is the receiver's answer.
type fileVerdict struct {
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	SHA256 string `json:"sha256,omitempty"` // what the receiver computed
}

// errBadName is wrapped by checkName's errors.
var errBadName = errors.New("refusing file name")

// checkName accepts a plain file name: no directory part, nothing that
// could escape the receiver's directory.
func checkName(name string) error {
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
	return fmt.Errorf("%w %q: %s", errBadName, name, why)
}
