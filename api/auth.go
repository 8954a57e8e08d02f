package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Token returns the admin credential of the cluster key holder on the
// control API: the hex HMAC-SHA256 of a fixed label under the key. It
// travels as "Authorization: Bearer <token>", only over TLS to a server
// whose certificate the client pinned (see CertProof), so it cannot be
// sniffed; the key itself never travels. A server started with
// --insecure-http accepts it in plain text, where anyone who sees one
// request can replay it.
func Token(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("braid control API v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// HeaderCertProof is the response header in which a server proves that it
// holds the cluster key and that its TLS certificate is the one it meant
// to present: its value is CertProof(key, fingerprint of the certificate).
const HeaderCertProof = "Braid-Cert-Proof"

// CertProof returns the proof a server holding key gives for its TLS
// certificate with the SHA-256 fingerprint fp: the hex HMAC-SHA256 of a
// label and fp under the key. A client that holds the key checks it on an
// answer that carries no credential before it sends one; a man in the
// middle has another certificate, so it can neither make the proof for
// its own certificate nor reuse the server's.
func CertProof(key, fp []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("braid control API certificate v1\x00"))
	m.Write(fp)
	return hex.EncodeToString(m.Sum(nil))
}

// Fingerprint returns the SHA-256 of a certificate's DER bytes.
func Fingerprint(der []byte) []byte {
	s := sha256.Sum256(der)
	return s[:]
}

// FormatFingerprint writes a fingerprint as "sha256:" and 64 lowercase
// hex digits.
func FormatFingerprint(fp []byte) string { return "sha256:" + hex.EncodeToString(fp) }

// ErrFingerprint is returned for text that is not a SHA-256 fingerprint.
var ErrFingerprint = errors.New("api: not a sha256 certificate fingerprint (want 64 hex digits, optionally after sha256: and with colons)")

// ParseFingerprint reads a SHA-256 fingerprint as FormatFingerprint writes
// it, or as openssl prints it (upper case, pairs separated by colons).
func ParseFingerprint(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if p, rest, ok := strings.Cut(s, ":"); ok && strings.EqualFold(p, "sha256") {
		s = rest
	}
	s = strings.ReplaceAll(s, ":", "")
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("%w: %q", ErrFingerprint, s)
	}
	return b, nil
}

// A join token is a token with the fingerprint of the server's
// certificate, "TOKEN.HEX": all a worker or client needs, with the server's
// URL, to pin the server and authenticate. TokenPrefix starts every
// token the server issues.
const TokenPrefix = "braid_"

// JoinToken returns the join token of token for a server whose
// certificate has fingerprint fp.
func JoinToken(token string, fp []byte) string { return token + "." + hex.EncodeToString(fp) }

// SplitJoinToken splits a join token into its token and fingerprint. A
// plain token comes back with a nil fingerprint.
func SplitJoinToken(s string) (token string, fp []byte, err error) {
	s = strings.TrimSpace(s)
	tok, hexfp, ok := strings.Cut(s, ".")
	if !ok {
		return s, nil, nil
	}
	fp, err = ParseFingerprint(hexfp)
	if err != nil {
		return "", nil, fmt.Errorf("join token: the part after the dot: %w", err)
	}
	return tok, fp, nil
}

// OpFigures is the reserved operation of a figures request on the data
// plane: a Unit with Job 0 and this Op asks the worker for its current
// figures. The worker answers on the same stream with a Result for the same
// Job, ID and Attempt whose Output is a JSON-encoded Register. No real
// operation may have this name (operation names are one word without
// a colon).
const OpFigures = "braid:figures"

// OpHeartbeat is the reserved operation of a heartbeat request on the
// data plane: a Unit with Job 0 and this Op asks the worker for its
// heartbeat. Its Params name the worker as the server knows it
// (BeatWorker) and the interval at which the server asks
// (BeatMillis, in milliseconds, as Registration.HeartbeatMillis). The
// worker answers on the same stream with a Result for the same Job, ID
// and Attempt whose Output is a JSON-encoded Heartbeat, and sends no
// heartbeat over HTTP to that server while such requests keep coming. A
// worker that does not know the operation answers with an error and
// keeps beating over HTTP.
const OpHeartbeat = "braid:heartbeat"

// OpDrop is the reserved operation of a drop request on the data plane:
// a Unit with Job 0 and this Op tells the worker that the server ended
// job DropJob (its Param, in decimal): canceled, failed, or done with
// backup copies still out. The worker drops the job's units queued on
// that session and interrupts those running, and answers each with a
// Result whose Err says it was dropped (the server discards results of
// ended jobs), so that its threads go to the next job's units at once.
// It also answers the request itself (Job 0, same ID and Attempt, empty
// Output). A worker that does not know the operation answers with an
// error and runs the units to their end, as before.
const OpDrop = "braid:drop"

// DropJob is the Param of an OpDrop request: the ended job's ID.
const DropJob = "job"

// OpPreempt is the reserved operation of a preemption request on the
// data plane: a Unit with Job 0 and this Op, sent on the stream that
// carried the copy it names (after it), tells the worker that the
// server gave the copy's thread to another tenant's unit (the
// scheduler's Preempt). Its Params name the copy: DropJob, PreemptUnit
// and PreemptAttempt, in decimal. The worker drops the copy if it is
// queued, or interrupts it if it runs, and answers it with a Result
// whose Err begins "preempted:"; a copy that already ended is left
// alone. The server runs the unit again later and counts no failed try
// (a result that arrives anyway still counts). The worker answers the
// request itself as it answers OpDrop. The server sends it only to
// workers that registered Register.Preempt.
const OpPreempt = "braid:preempt"

// Params of an OpPreempt request, with DropJob.
const (
	PreemptUnit    = "unit"
	PreemptAttempt = "attempt"
)

// Params of an OpHeartbeat request.
const (
	BeatWorker = "worker"
	BeatMillis = "heartbeat_ms"
)
