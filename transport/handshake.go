package transport

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/braid-hpc/braid/transport/internal/wire"
)

func mac(key []byte, label string, parts ...[]byte) [wire.MACLen]byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(label))
	for _, p := range parts {
		h.Write(p)
	}
	var out [wire.MACLen]byte
	copy(out[:], h.Sum(nil))
	return out
}

func joinMAC(key []byte, nc, ns [wire.NonceLen]byte, j *wire.Join) [wire.MACLen]byte {
	var tail [8]byte
	tail[0], tail[1] = byte(j.Path>>8), byte(j.Path)
	return mac(key, "braid client\x00", nc[:], ns[:], j.Session[:], tail[:2],
		[]byte{byte(j.Window >> 24), byte(j.Window >> 16), byte(j.Window >> 8), byte(j.Window)},
		[]byte{byte(j.Segment >> 24), byte(j.Segment >> 16), byte(j.Segment >> 8), byte(j.Segment)})
}

// clientHandshake proves the key on a fresh channel and joins it to the
// session as path. It returns the server's verdict.
func clientHandshake(c net.Conn, cfg *Config, session [wire.SessionIDLen]byte, path int) (wire.Verdict, error) {
	_ = c.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
	defer c.SetDeadline(time.Time{})
	var hello wire.Hello
	if _, err := rand.Read(hello.Nonce[:]); err != nil {
		return wire.Verdict{}, err
	}
	if _, err := c.Write(hello.Append(nil)); err != nil {
		return wire.Verdict{}, err
	}
	buf := make([]byte, wire.ChallengeLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return wire.Verdict{}, fmt.Errorf("read challenge (is the peer a braid listener?): %w", err)
	}
	ch, err := wire.ParseChallenge(buf)
	if err != nil {
		return wire.Verdict{}, err
	}
	want := mac(cfg.Key, "braid server\x00", hello.Nonce[:], ch.Nonce[:])
	if !hmac.Equal(want[:], ch.MAC[:]) {
		return wire.Verdict{}, fmt.Errorf("%w: the listener failed to prove it", ErrAuth)
	}
	j := wire.Join{Session: session, Path: uint16(path), Window: uint32(cfg.StreamWindow), Segment: uint32(cfg.SegmentSize)}
	j.MAC = joinMAC(cfg.Key, hello.Nonce, ch.Nonce, &j)
	if _, err := c.Write(j.Append(nil)); err != nil {
		return wire.Verdict{}, err
	}
	buf = make([]byte, wire.VerdictLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return wire.Verdict{}, fmt.Errorf("read verdict: %w", err)
	}
	v, err := wire.ParseVerdict(buf)
	if err != nil {
		return v, err
	}
	if !v.OK {
		if v.Reason == authRefusal {
			return v, fmt.Errorf("%w: the listener refused our proof", ErrAuth)
		}
		return v, fmt.Errorf("refused by peer: %s", v.Reason)
	}
	return v, nil
}

const authRefusal = "authentication failed: this host does not hold the cluster key of the listener"

// serverHandshake checks a fresh channel's proof of the key. It reads only
// the fixed-size Hello and Join messages before the proof is checked.
func serverHandshake(c net.Conn, cfg *Config) (wire.Join, error) {
	_ = c.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
	defer c.SetDeadline(time.Time{})
	buf := make([]byte, wire.HelloLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return wire.Join{}, fmt.Errorf("read hello: %w", err)
	}
	hello, err := wire.ParseHello(buf)
	if err != nil {
		return wire.Join{}, err
	}
	var ch wire.Challenge
	if _, err := rand.Read(ch.Nonce[:]); err != nil {
		return wire.Join{}, err
	}
	ch.MAC = mac(cfg.Key, "braid server\x00", hello.Nonce[:], ch.Nonce[:])
	if _, err := c.Write(ch.Append(nil)); err != nil {
		return wire.Join{}, err
	}
	buf = make([]byte, wire.JoinLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return wire.Join{}, fmt.Errorf("read join: %w", err)
	}
	j, perr := wire.ParseJoin(buf)
	want := joinMAC(cfg.Key, hello.Nonce, ch.Nonce, &j)
	if !hmac.Equal(want[:], j.MAC[:]) {
		_, _ = c.Write(wire.Verdict{Reason: authRefusal}.Append(nil))
		return j, fmt.Errorf("%w: the dialer's proof does not match our key", ErrAuth)
	}
	if perr != nil {
		_, _ = c.Write(wire.Verdict{Reason: perr.Error()}.Append(nil))
		return j, perr
	}
	v := wire.Verdict{OK: true, Window: uint32(cfg.StreamWindow), Segment: uint32(cfg.SegmentSize)}
	if _, err := c.Write(v.Append(nil)); err != nil {
		return j, err
	}
	return j, nil
}
