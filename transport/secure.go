package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"

	"github.com/flynn/noise"

	"github.com/braid-hpc/braid/transport/channel"
	"github.com/braid-hpc/braid/transport/internal/wire"
)

// Records
//
// After the handshake (handshake.go) every byte of a channel, on every
// lane, travels in records:
//
//	+----------------+------------------------------------------+
//	| length (u32 BE)| AES-256-GCM ciphertext of up to 64 KiB   |
//	|  = len(ct)+16  | of frame bytes, then a 16-byte tag        |
//	+----------------+------------------------------------------+
//
// The keys come from the channel's Noise handshake (one per direction);
// the nonce of a record is lane<<48 | its sequence number on that lane,
// and the length header is the additional data. A record that was altered,
// replayed, dropped, moved to another lane or taken from another channel
// fails to authenticate; a record cut short never yields its bytes. The
// receiver hands frame bytes on only after their whole record
// authenticated, so nothing an attacker touched is ever parsed as a frame.

const (
	// maxRecord is the largest plaintext of one record.
	maxRecord = 64 << 10
	// recordHeader is the length prefix of a record.
	recordHeader = 4
	// maxSeq bounds the records of one lane of one channel; the nonce
	// space above it belongs to the lane id. The channel fails before a
	// nonce could repeat (2^48 records: 16 EiB).
	maxSeq = 1 << 48
	// flushAt is how many sealed bytes a writer gathers before a write.
	flushAt = 1 << 20
)

// ErrIntegrity means bytes received on a channel failed authentication:
// something between the hosts altered, replayed, reordered, dropped or cut
// them. The channel is closed and what it carried after the last good
// record is discarded and sent again on the session's other paths.
var ErrIntegrity = errors.New("transport: integrity check failed: bytes on the channel were altered, replayed, reordered or cut between the hosts")

// IntegrityError locates an integrity failure.
type IntegrityError struct {
	Lane   uint16
	Record uint64 // sequence number of the record on its lane
	Reason string
}

func (e *IntegrityError) Error() string {
	return fmt.Sprintf("%v (lane %d, record %d: %s)", ErrIntegrity, e.Lane, e.Record, e.Reason)
}

// Unwrap makes errors.Is(err, ErrIntegrity) hold.
func (e *IntegrityError) Unwrap() error { return ErrIntegrity }

// secureConn carries records over one lane of a channel (lane 0: the
// channel itself). One goroutine may write and another read at once.
type secureConn struct {
	net.Conn
	lane uint64

	// Write side, used by the lane's one writer.
	send noise.Cipher
	wseq uint64
	wbuf []byte

	// Read side, used by the lane's one reader.
	recv   noise.Cipher
	rseq   uint64
	raw    rawReader
	plain  []byte // decrypted bytes not yet read: plain[pos:]
	pos    int
	pbuf   []byte // plain's buffer when borrowed from the pool, else nil
	psmall []byte // plain's buffer for small records
}

// smallRecord is the largest record plaintext decrypted into the
// channel's own buffer; a larger one borrows a pooled buffer until it is
// read.
const smallRecord = 2 << 10

func newSecureConn(c net.Conn, lane uint16, send, recv noise.Cipher, seq uint64) *secureConn {
	return &secureConn{
		Conn: c, lane: uint64(lane), send: send, recv: recv, wseq: seq, rseq: seq,
		raw:    rawReader{r: c, small: make([]byte, rawSmall)},
		psmall: make([]byte, 0, smallRecord+wire.TagLen),
	}
}

func (c *secureConn) nonce(seq uint64) uint64 { return c.lane<<48 | seq }

// Write seals p into records and writes them.
func (c *secureConn) Write(p []byte) (int, error) {
	if err := c.writeBuffers([][]byte{p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeBuffers seals the concatenation of bufs into records, gathered
// into large writes. Small buffers (frame headers) share records; a large
// one (a payload) gets records of its own, sealed straight from where it
// lies, so the reader can open them straight into the stream's buffer
// (Read) and neither side copies payload bytes.
func (c *secureConn) writeBuffers(bufs [][]byte) error {
	w := c.wbuf[:0]
	rec := -1 // offset in w of the open record's header
	var err error
	for _, b := range bufs {
		if len(b) >= directMin {
			if rec >= 0 {
				if w, err = c.seal(w, rec); err != nil {
					return err
				}
				rec = -1
			}
			for len(b) > 0 {
				n := min(len(b), maxRecord)
				if w, err = c.sealFrom(w, b[:n]); err != nil {
					return err
				}
				b = b[n:]
				if len(w) >= flushAt {
					if _, err := c.Conn.Write(w); err != nil {
						return err
					}
					w = w[:0]
				}
			}
			continue
		}
		for len(b) > 0 {
			if rec < 0 {
				rec = len(w)
				w = append(w, 0, 0, 0, 0)
			}
			n := min(maxRecord-(len(w)-rec-recordHeader), len(b))
			w = append(w, b[:n]...)
			b = b[n:]
			if len(w)-rec-recordHeader == maxRecord {
				if w, err = c.seal(w, rec); err != nil {
					return err
				}
				rec = -1
			}
		}
	}
	if rec >= 0 {
		if w, err = c.seal(w, rec); err != nil {
			return err
		}
	}
	if len(w) > 0 {
		_, err = c.Conn.Write(w)
	}
	if cap(w) <= 2*flushAt {
		c.wbuf = w[:0]
	}
	return err
}

// directMin is the smallest buffer writeBuffers seals into records of its
// own: frame payloads, not headers.
const directMin = 1024

// sealFrom appends to w one record whose plaintext is p (at most
// maxRecord bytes), encrypting from p directly.
func (c *secureConn) sealFrom(w, p []byte) ([]byte, error) {
	if c.wseq >= maxSeq {
		return w, fmt.Errorf("transport: lane %d sent %d records; reconnect for fresh keys", c.lane, c.wseq)
	}
	rec := len(w)
	w = binary.BigEndian.AppendUint32(w, uint32(len(p)+wire.TagLen))
	w = slices.Grow(w, len(p)+wire.TagLen)
	out := c.send.Encrypt(w[rec+recordHeader:rec+recordHeader], c.nonce(c.wseq), w[rec:rec+recordHeader], p)
	c.wseq++
	return w[:rec+recordHeader+len(out)], nil
}

// seal encrypts in place the record that starts at w[rec:] and appends its
// tag.
func (c *secureConn) seal(w []byte, rec int) ([]byte, error) {
	if c.wseq >= maxSeq {
		return w, fmt.Errorf("transport: lane %d sent %d records; reconnect for fresh keys", c.lane, c.wseq)
	}
	n := len(w) - rec - recordHeader
	binary.BigEndian.PutUint32(w[rec:], uint32(n+wire.TagLen))
	w = slices.Grow(w, wire.TagLen)
	plain := w[rec+recordHeader : rec+recordHeader+n]
	out := c.send.Encrypt(plain[:0], c.nonce(c.wseq), w[rec:rec+recordHeader], plain)
	c.wseq++
	return w[:rec+recordHeader+len(out)], nil
}

// Read returns decrypted bytes of authenticated records. When p can hold
// the whole next record, it is opened straight into p.
func (c *secureConn) Read(p []byte) (int, error) {
	for c.pos == len(c.plain) {
		if len(p) >= directMin {
			if hdr, err := c.raw.Peek(recordHeader); err == nil {
				if n := int(binary.BigEndian.Uint32(hdr)) - wire.TagLen; n >= 0 && n <= len(p) {
					out, err := c.open(p[:0])
					return len(out), err
				}
			}
		}
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.plain[c.pos:])
	c.pos += n
	c.drained()
	return n, nil
}

// drained returns a borrowed plaintext buffer once every byte of it was
// read.
func (c *secureConn) drained() {
	if c.pos == len(c.plain) && c.pbuf != nil {
		putBuf(c.pbuf)
		c.pbuf, c.plain, c.pos = nil, nil, 0
	}
}

// Discard skips n decrypted bytes.
func (c *secureConn) Discard(n int) (int, error) {
	done := 0
	for done < n {
		if c.pos == len(c.plain) {
			if err := c.fill(); err != nil {
				return done, err
			}
			continue
		}
		k := min(n-done, len(c.plain)-c.pos)
		c.pos += k
		done += k
		c.drained()
	}
	return done, nil
}

// Buffered reports how many bytes are at hand without reading the
// channel (decrypted or not).
func (c *secureConn) Buffered() int { return len(c.plain) - c.pos + c.raw.Buffered() }

// fill reads, authenticates and decrypts the next record into plain: a
// small one into the channel's own buffer, a larger one into a buffer
// borrowed until it is read.
func (c *secureConn) fill() error {
	hdr, err := c.raw.Peek(recordHeader)
	if err != nil {
		if len(hdr) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	dst := c.psmall[:0]
	if n := int(binary.BigEndian.Uint32(hdr)); n > cap(dst) {
		c.pbuf = getBuf(maxRecord + wire.TagLen)
		dst = c.pbuf[:0]
	}
	out, err := c.open(dst)
	if err != nil {
		if c.pbuf != nil {
			putBuf(c.pbuf)
			c.pbuf = nil
		}
		return err
	}
	c.plain, c.pos = out, 0
	return nil
}

// open reads, authenticates and decrypts the next record, appending its
// plaintext to dst (which must have room for it).
func (c *secureConn) open(dst []byte) ([]byte, error) {
	hdr, err := c.raw.Peek(recordHeader)
	if err != nil {
		if len(hdr) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr))
	if n < wire.TagLen || n > maxRecord+wire.TagLen {
		return nil, &IntegrityError{Lane: uint16(c.lane), Record: c.rseq, Reason: fmt.Sprintf("record length %d out of range", n)}
	}
	rec, err := c.raw.Peek(recordHeader + n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("channel ended inside record %d: %w", c.rseq, io.ErrUnexpectedEOF)
		}
		return nil, err
	}
	out, err := c.recv.Decrypt(dst, c.nonce(c.rseq), rec[:recordHeader], rec[recordHeader:])
	if err != nil {
		return nil, &IntegrityError{Lane: uint16(c.lane), Record: c.rseq, Reason: "authentication tag does not match"}
	}
	c.rseq++
	if c.rseq >= maxSeq {
		return nil, fmt.Errorf("transport: lane %d received %d records; reconnect for fresh keys", c.lane, c.rseq)
	}
	c.raw.Discard(recordHeader + n)
	return out, nil
}

// secureLanes is a secured channel whose kind has lanes: each lane gets
// its own records, keyed by the channel's keys and numbered in their own
// nonce space.
type secureLanes struct {
	*secureConn
	lanes channel.Lanes

	mu    sync.Mutex
	conns map[uint16]*secureConn
}

func (s *secureLanes) wrap(id uint16, c net.Conn) *secureConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.conns[id]
	if !ok || sc.Conn != c {
		sc = newSecureConn(c, id, s.send, s.recv, 0)
		s.conns[id] = sc
	}
	return sc
}

// OpenLane implements channel.Lanes.
func (s *secureLanes) OpenLane(id uint16) (net.Conn, error) {
	if id == 0 || id >= MaxLanes {
		return nil, fmt.Errorf("transport: lane %d out of range [1, %d]", id, MaxLanes-1)
	}
	c, err := s.lanes.OpenLane(id)
	if err != nil {
		return nil, err
	}
	return s.wrap(id, c), nil
}

// AcceptLane implements channel.Lanes.
func (s *secureLanes) AcceptLane(ctx context.Context) (uint16, net.Conn, error) {
	id, c, err := s.lanes.AcceptLane(ctx)
	if err != nil {
		return id, nil, err
	}
	if id == 0 || id >= MaxLanes {
		// The session refuses the lane; keep the nonce space intact.
		return id, c, nil
	}
	return id, s.wrap(id, c), nil
}

// secure wraps a channel whose handshake gave the ciphers send and recv;
// records on lane 0 continue after the handshake's first record.
func secure(c net.Conn, send, recv noise.Cipher) net.Conn {
	sc := newSecureConn(c, 0, send, recv, 1)
	if l, ok := c.(channel.Lanes); ok {
		return &secureLanes{secureConn: sc, lanes: l, conns: make(map[uint16]*secureConn)}
	}
	return sc
}

// frameSource is what a frame reader reads from: a bufio.Reader over a
// plaintext channel, or a secureConn.
type frameSource interface {
	io.Reader
	Discard(n int) (int, error)
	Buffered() int
}
