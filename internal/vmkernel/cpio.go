package vmkernel

import (
	"fmt"
	"io"
)

// cpioWriter writes a cpio archive in the "newc" format the kernel
// unpacks as an initramfs. Errors stick: close returns the first.
type cpioWriter struct {
	w   io.Writer
	ino int
	n   int64
	err error
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	var n int
	n, c.err = c.w.Write(b)
	c.n += int64(n)
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// entry writes one header, name and data; mode holds the file type.
func (c *cpioWriter) entry(name string, mode uint32, data []byte) {
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	c.write(fmt.Appendf(nil, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

func (c *cpioWriter) dir(name string) { c.entry(name, 0o040755, nil) }

func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.entry(name, 0o100000|perm, data)
}

func (c *cpioWriter) symlink(name, target string) { c.entry(name, 0o120777, []byte(target)) }

// close writes the trailer.
func (c *cpioWriter) close() error {
	c.ino = -1 // the trailer's inode is 0
	c.entry("TRAILER!!!", 0, nil)
	return c.err
}
