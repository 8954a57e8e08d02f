package wasm

import (
	"bytes"
	"fmt"
	"strings"
)

// A Go program (GOOS=wasip1) that crashes, out of memory or on a panic,
// prints a line or two of message and then every goroutine's stack:
//
//	runtime: out of memory: cannot allocate 1048576-byte block (66584576 in use)
//	fatal error: out of memory
//
//	goroutine 1 gp=0x... m=0 mp=0x... [running]:
//	runtime.throw({0x..., 0xd})
//	...
//
// Kept as stderr's last 2 KiB, that is the end of the stack dump, without
// the message, and it floods every listing that shows the unit's error.
// goCrash watches stderr line by line and keeps the message instead; the
// run's error then shows the message and how much dump was left out.

// Bounds of what goCrash keeps.
const (
	crashLine = 512  // bytes of one line looked at
	crashMsg  = 1024 // bytes of message kept
)

// goCrash finds a Go runtime crash in what a module writes to stderr.
type goCrash struct {
	line  []byte // the line being written, at most crashLine bytes
	msg   []byte // the crash's message lines
	state int    // crashNone, crashMessage, crashDump
	dump  int64  // bytes of the stack dump
}

const (
	crashNone    = iota
	crashMessage // a "fatal error:" or "panic:" line was seen
	crashDump    // then a "goroutine N [...]:" or "runtime stack:" line
)

// crashStarts are the first lines of a Go runtime crash message.
var crashStarts = []string{"fatal error: ", "panic: ", "runtime: out of memory", "runtime: program exceeds "}

func (c *goCrash) reset() {
	c.line, c.msg, c.state, c.dump = c.line[:0], c.msg[:0], crashNone, 0
}

// write looks at p, the next bytes of stderr.
func (c *goCrash) write(p []byte) {
	if c.state == crashDump {
		c.dump += int64(len(p))
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := crashLine - len(c.line); room > 0 {
			c.line = append(c.line, chunk[:min(len(chunk), room)]...)
		}
		if i < 0 {
			return
		}
		p = p[i+1:]
		c.endLine()
		c.line = c.line[:0]
		if c.state == crashDump {
			c.dump += int64(len(p))
			return
		}
	}
}

// endLine moves the state on at the end of c.line.
func (c *goCrash) endLine() {
	line := string(c.line)
	switch c.state {
	case crashNone:
		for _, s := range crashStarts {
			if strings.HasPrefix(line, s) {
				c.state = crashMessage
				c.addMsg(line)
				return
			}
		}
	case crashMessage:
		switch {
		case strings.HasPrefix(line, "goroutine ") || strings.HasPrefix(line, "runtime stack:"):
			c.state = crashDump
			c.dump = int64(len(c.line)) + 1
		case line != "":
			c.addMsg(line)
		}
	}
}

func (c *goCrash) addMsg(line string) {
	if len(c.msg) > 0 && len(c.msg) < crashMsg {
		c.msg = append(c.msg, '\n')
	}
	c.msg = append(c.msg, line[:min(len(line), crashMsg-len(c.msg))]...)
}

// summary returns the crash's message and a note of the dump left out,
// and false when stderr held no Go crash with a stack dump.
func (c *goCrash) summary() (string, bool) {
	if c.state != crashDump {
		return "", false
	}
	return fmt.Sprintf("%s\n[Go runtime: %d bytes of goroutine stacks left out]", strings.ToValidUTF8(string(c.msg), "\uFFFD"), c.dump), true
}
