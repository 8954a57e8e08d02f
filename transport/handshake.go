package transport

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/flynn/noise"

	"github.com/braid-hpc/braid/transport/internal/wire"
)

// Handshake
//
// Each channel runs Noise_NNpsk0_25519_AESGCM_SHA256 with a pre-shared key
// derived from the cluster key, then one encrypted record each way:
//
//	dialer                                   listener
//	HELLO   magic, version, -> psk, e   ──►  checks the PSK tag, else REPLY refused
//	        ◄── REPLY  magic, version, ok, <- e, ee
//	JOIN    (record 0 of lane 0)        ──►  session, path, window, segment, flags
//	        ◄── VERDICT (record 0 of lane 0): accepted with parameters, or why not
//
// Both sides prove the key (the tags of HELLO and REPLY only verify under
// it); the ephemeral-ephemeral Diffie-Hellman gives every channel fresh
// keys with forward secrecy: a key stolen later decrypts no recorded
// traffic. JOIN is the first message under the new keys, so a recorded
// HELLO replayed by a sniffer cannot attach anything to a session. The
// listener reads only fixed-size messages before the proof is checked.

var (
	noiseSuite    = noise.NewCipherSuite(noise.DH25519, noise.CipherAESGCM, noise.HashSHA256)
	noisePrologue = []byte("braid transport v2")
)

// presharedKey derives the 32-byte Noise PSK from the cluster key.
func presharedKey(key []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("braid noise psk v2"))
	return h.Sum(nil)
}

func newHandshake(cfg *Config, initiator bool) (*noise.HandshakeState, error) {
	return noise.NewHandshakeState(noise.Config{
		CipherSuite:           noiseSuite,
		Pattern:               noise.HandshakeNN,
		Initiator:             initiator,
		Prologue:              noisePrologue,
		PresharedKey:          presharedKey(cfg.Key),
		PresharedKeyPlacement: 0,
	})
}

// sealOne and openOne carry the handshake's one record each way (record 0
// of lane 0), read to its exact size so that nothing after it is consumed.
func sealOne(c noise.Cipher, plain []byte) []byte {
	b := make([]byte, recordHeader, recordHeader+len(plain)+wire.TagLen)
	binary.BigEndian.PutUint32(b, uint32(len(plain)+wire.TagLen))
	return c.Encrypt(b, 0, b[:recordHeader], plain)
}

func openOne(c net.Conn, ciph noise.Cipher, n int, what string) ([]byte, error) {
	b := make([]byte, recordHeader+n+wire.TagLen)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if binary.BigEndian.Uint32(b) != uint32(n+wire.TagLen) {
		return nil, &IntegrityError{Record: 0, Reason: what + " of the wrong length"}
	}
	out, err := ciph.Decrypt(nil, 0, b[:recordHeader], b[recordHeader:])
	if err != nil {
		return nil, &IntegrityError{Record: 0, Reason: what + " does not authenticate"}
	}
	return out, nil
}

// errSessionGone refuses a channel that would rejoin a session the
// listener does not know: it closed the session, or restarted since.
var errSessionGone = errors.New("the listener no longer knows this session (it closed it, or restarted)")

// clientHandshake proves the key on a fresh channel and joins it to the
// session as path. It returns the channel to use from now on (encrypted
// unless both sides chose plaintext) and the listener's verdict.
//
// rejoin marks a channel that replaces a lost one of an established
// session; the error wraps errSessionGone if the listener no longer knows
// the session.
func clientHandshake(c net.Conn, cfg *Config, session [wire.SessionIDLen]byte, path int, rejoin bool) (net.Conn, wire.Verdict, error) {
	_ = c.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
	defer c.SetDeadline(time.Time{})
	hs, err := newHandshake(cfg, true)
	if err != nil {
		return nil, wire.Verdict{}, err
	}
	var hello wire.Hello
	msg, _, _, err := hs.WriteMessage(nil, nil)
	if err != nil {
		return nil, wire.Verdict{}, err
	}
	copy(hello.Noise[:], msg)
	if _, err := c.Write(hello.Append(nil)); err != nil {
		return nil, wire.Verdict{}, err
	}
	buf := make([]byte, wire.ReplyLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, wire.Verdict{}, fmt.Errorf("read reply (is the peer a braid listener of the same version?): %w", err)
	}
	reply, err := wire.ParseReply(buf)
	if err != nil {
		return nil, wire.Verdict{}, err
	}
	if reply.Refused {
		return nil, wire.Verdict{}, fmt.Errorf("%w: the listener refused our proof", ErrAuth)
	}
	_, send, recv, err := hs.ReadMessage(nil, reply.Noise[:])
	if err != nil || send == nil {
		return nil, wire.Verdict{}, fmt.Errorf("%w: the listener failed to prove it", ErrAuth)
	}
	j := wire.Join{Session: session, Path: uint16(path), Window: uint32(cfg.StreamWindow), Segment: uint32(cfg.SegmentSize)}
	if cfg.InsecurePlaintext {
		j.Flags |= wire.JoinPlaintext
	}
	if rejoin {
		j.Flags |= wire.JoinRejoin
	}
	if _, err := c.Write(sealOne(send.Cipher(), j.Append(nil))); err != nil {
		return nil, wire.Verdict{}, err
	}
	b, err := openOne(c, recv.Cipher(), wire.VerdictLen, "verdict")
	if err != nil {
		return nil, wire.Verdict{}, err
	}
	v, err := wire.ParseVerdict(b)
	if err != nil {
		return nil, v, err
	}
	if v.Gone {
		return nil, v, errSessionGone
	}
	if !v.OK {
		return nil, v, fmt.Errorf("refused by peer: %s", v.Reason)
	}
	if cfg.InsecurePlaintext {
		return c, v, nil
	}
	return secure(c, send.Cipher(), recv.Cipher()), v, nil
}

// serverHandshake checks a fresh channel's proof of the key. It reads only
// the fixed-size Hello and Join messages, and Join only after the Hello
// proved the key. check, if set, vets the Join before the verdict: an
// error wrapping errSessionGone answers Verdict.Gone, any other refuses.
// It returns the channel to use from now on.
func serverHandshake(c net.Conn, cfg *Config, check func(wire.Join) error) (net.Conn, wire.Join, error) {
	_ = c.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
	defer c.SetDeadline(time.Time{})
	buf := make([]byte, wire.HelloLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, wire.Join{}, fmt.Errorf("read hello: %w", err)
	}
	hello, err := wire.ParseHello(buf)
	if err != nil {
		return nil, wire.Join{}, err
	}
	hs, err := newHandshake(cfg, false)
	if err != nil {
		return nil, wire.Join{}, err
	}
	if _, _, _, err := hs.ReadMessage(nil, hello.Noise[:]); err != nil {
		_, _ = c.Write(wire.Reply{Refused: true}.Append(nil))
		return nil, wire.Join{}, fmt.Errorf("%w: the dialer's proof does not match our key", ErrAuth)
	}
	msg, recv, send, err := hs.WriteMessage(nil, nil)
	if err != nil || send == nil {
		return nil, wire.Join{}, fmt.Errorf("noise reply: %v", err)
	}
	var reply wire.Reply
	copy(reply.Noise[:], msg)
	if _, err := c.Write(reply.Append(nil)); err != nil {
		return nil, wire.Join{}, err
	}
	b, err := openOne(c, recv.Cipher(), wire.JoinLen, "join")
	if err != nil {
		if errors.Is(err, ErrIntegrity) {
			err = fmt.Errorf("%w (a replayed handshake?)", err)
		}
		return nil, wire.Join{}, err
	}
	refuse := func(reason string) {
		_, _ = c.Write(sealOne(send.Cipher(), wire.Verdict{Reason: reason}.Append(nil)))
	}
	j, err := wire.ParseJoin(b)
	if err != nil {
		refuse(err.Error())
		return nil, j, err
	}
	plain := j.Flags&wire.JoinPlaintext != 0
	if plain != cfg.InsecurePlaintext {
		err := errors.New("the dialer encrypts the data plane and this host was started with --insecure-plaintext; start both with it, or neither")
		if plain {
			err = errors.New("the dialer asks for a plaintext data plane (--insecure-plaintext) and this host encrypts; start both with it, or neither")
		}
		refuse(err.Error())
		return nil, j, err
	}
	if check != nil {
		if err := check(j); errors.Is(err, errSessionGone) {
			_, _ = c.Write(sealOne(send.Cipher(), wire.Verdict{Gone: true, Reason: err.Error()}.Append(nil)))
			return nil, j, err
		} else if err != nil {
			refuse(err.Error())
			return nil, j, err
		}
	}
	v := wire.Verdict{OK: true, Window: uint32(cfg.StreamWindow), Segment: uint32(cfg.SegmentSize)}
	if _, err := c.Write(sealOne(send.Cipher(), v.Append(nil))); err != nil {
		return nil, j, err
	}
	if plain {
		return c, j, nil
	}
	return secure(c, send.Cipher(), recv.Cipher()), j, nil
}
