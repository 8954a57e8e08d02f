"""HTTPS to one braid server with its certificate pinned, as package
client of the Go module does it (client/client.go, api/auth.go).

The server's certificate is its own, not signed by a CA anyone trusts, so
the chain of trust is replaced by a pin: the SHA-256 of the certificate's
DER bytes. A connection is checked right after its TLS handshake, before
a single byte of a request is written; a wrong certificate closes it.

The pin comes from a join token ("TOKEN.HEX", printed by braid token
create), from a fingerprint given on its own, or, for a holder of the
cluster key, from the server itself: a first GET /v1/health without
credential, whose answer must carry Braid-Cert-Proof, the HMAC-SHA256
under the key of a label and the fingerprint of the certificate that
connection saw. A man in the middle has another certificate and cannot
make that proof.

Connections are kept open between requests (a small pool, safe for
threads): waiting for many jobs costs no TLS handshake per poll.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Tuple, Union

from . import errors

#: Label of the cluster key holder's admin credential (api.Token).
_TOKEN_LABEL = b"braid control API v1"
#: Label of the certificate proof (api.CertProof).
_PROOF_LABEL = b"braid control API certificate v1\x00"
#: Response header carrying the proof (api.HeaderCertProof).
HEADER_CERT_PROOF = "Braid-Cert-Proof"
#: Idle connections kept per client.
_POOL_SIZE = 16
#: Block size of uploads and downloads.
BLOCK = 1 << 16


def admin_token(key: bytes) -> str:
    """The cluster key holder's admin credential (api.Token)."""
    return hmac.new(key, _TOKEN_LABEL, hashlib.sha256).hexdigest()


def cert_proof(key: bytes, fp: bytes) -> str:
    """The proof a server holding key gives for its certificate (api.CertProof)."""
    return hmac.new(key, _PROOF_LABEL + fp, hashlib.sha256).hexdigest()


def parse_fingerprint(s: str) -> bytes:
    """Reads a SHA-256 fingerprint: 64 hex digits, optionally after
    ``sha256:`` and with colons (as openssl prints it)."""
    t = s.strip()
    head, sep, rest = t.partition(":")
    if sep and head.lower() == "sha256":
        t = rest
    t = t.replace(":", "")
    try:
        b = bytes.fromhex(t)
    except ValueError:
        b = b""
    if len(b) != 32:
        raise errors.ConfigurationError(
            f"{s!r} is not a sha256 certificate fingerprint (want 64 hex digits, "
            "optionally after sha256: and with colons)"
        )
    return b


def format_fingerprint(fp: bytes) -> str:
    """Writes a fingerprint as ``sha256:`` and 64 lowercase hex digits."""
    return "sha256:" + fp.hex()


def split_join_token(s: str) -> Tuple[str, Optional[bytes]]:
    """Splits a join token "TOKEN.HEX" into its token and fingerprint; a
    plain token comes back with None."""
    s = s.strip()
    tok, dot, hexfp = s.partition(".")
    if not dot:
        return s, None
    try:
        return tok, parse_fingerprint(hexfp)
    except errors.ConfigurationError as e:
        raise errors.ConfigurationError(f"join token: the part after the dot: {e}") from None


class _PinnedConnection(http.client.HTTPSConnection):
    """An HTTPS connection that calls check with the server certificate's
    DER bytes right after the handshake, before any request is sent."""

    def __init__(self, host: str, port: int, timeout: float, context: ssl.SSLContext,
                 check: Callable[[bytes], None]) -> None:
        super().__init__(host, port, timeout=timeout, context=context, blocksize=BLOCK)
        self._check = check

    def connect(self) -> None:
        super().connect()
        assert self.sock is not None
        der = self.sock.getpeercert(binary_form=True)  # type: ignore[union-attr]
        try:
            self._check(der or b"")
        except BaseException:
            self.sock.close()
            self.sock = None
            raise


class Response:
    """A response whose body is still to be read (stream) or already read."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse,
                 release: Callable[[http.client.HTTPConnection, bool], None]) -> None:
        self._conn = conn
        self.raw = resp
        self.status = resp.status
        self._release = release
        self._done = False

    def header(self, name: str) -> Optional[str]:
        return self.raw.getheader(name)

    def read(self, n: int = -1) -> bytes:
        return self.raw.read(n) if n >= 0 else self.raw.read()

    def close(self, reusable: bool = True) -> None:
        """Gives the connection back (if the body was read to its end) or
        closes it."""
        if self._done:
            return
        self._done = True
        self._release(self._conn, reusable and self.raw.isclosed())


class Transport:
    """Sends requests to one server, pinning its certificate."""

    def __init__(self, base: str, *, token: Optional[str], key: Optional[bytes],
                 fingerprint: Optional[bytes], insecure_http: bool, timeout: float) -> None:
        u = urllib.parse.urlsplit(base if "://" in base else "https://" + base)
        if not u.hostname:
            raise errors.ConfigurationError(f"server URL {base!r}: no host; want e.g. https://10.0.0.1:7400")
        self.host = u.hostname
        self.insecure = insecure_http
        try:
            port = u.port
        except ValueError:
            raise errors.ConfigurationError(f"server URL {base!r}: the port is not a number") from None
        self.port = port or (80 if insecure_http else 443)
        hostport = f"[{self.host}]" if ":" in self.host else self.host
        self.url = ("http://" if insecure_http else "https://") + f"{hostport}:{self.port}"
        self.prefix = u.path.rstrip("/")
        self.token = token
        self.key = key
        self.timeout = timeout
        self._fp = fingerprint
        self._learned = False
        self._lock = threading.Lock()
        self._pin_lock = threading.Lock()
        self._idle: List[http.client.HTTPConnection] = []
        if not insecure_http:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            # No chain of trust: the pinned fingerprint is checked instead.
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
            self._ctx: Optional[ssl.SSLContext] = ctx
        else:
            self._ctx = None

    @property
    def fingerprint(self) -> Optional[bytes]:
        with self._lock:
            return self._fp

    def _verify(self, der: bytes) -> None:
        if not der:
            raise errors.CertificateError("the server presented no TLS certificate; no credential was sent")
        got = hashlib.sha256(der).digest()
        with self._lock:
            want = self._fp
        if want is None:
            raise errors.ConfigurationError("no certificate pinned")
        if not hmac.compare_digest(got, want):
            raise errors.CertificateError(
                f"the server's TLS certificate has fingerprint {format_fingerprint(got)}, not the pinned "
                f"{format_fingerprint(want)}; no credential was sent. If the server's certificate was "
                "replaced on purpose, give the new fingerprint or a new join token"
            )

    def _connect(self) -> http.client.HTTPConnection:
        if self._ctx is None:
            return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout, blocksize=BLOCK)
        return _PinnedConnection(self.host, self.port, self.timeout, self._ctx, self._verify)

    def _pin(self) -> None:
        """Makes sure a certificate is pinned: with the cluster key, learns
        it from the server's proof."""
        if self._ctx is None:
            return
        with self._pin_lock:
            with self._lock:
                if self._fp is not None:
                    return
            if self.key is None:
                raise errors.ConfigurationError(
                    "no way to check the server's certificate: give its fingerprint, a join token "
                    "(braid token create) or the cluster key"
                )
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self._ctx)
            try:
                conn.request("GET", self.prefix + "/v1/health", headers={"Connection": "close"})
                der = conn.sock.getpeercert(binary_form=True) if conn.sock else None  # type: ignore[union-attr]
                resp = conn.getresponse()
                resp.read(64 << 10)
                proof = resp.getheader(HEADER_CERT_PROOF) or ""
            except (OSError, http.client.HTTPException) as e:
                raise errors.Unreachable(self.url, e) from e
            finally:
                conn.close()
            if not der:
                raise errors.CertificateError("the server presented no TLS certificate; no credential was sent")
            fp = hashlib.sha256(der).digest()
            if not hmac.compare_digest(proof.encode(), cert_proof(self.key, fp).encode()):
                raise errors.CertificateError(
                    f"the server did not prove that it holds the cluster key for its certificate "
                    f"{format_fingerprint(fp)}: its cluster key differs (check BRAID_KEY or the key file), "
                    "or something between us is not the braid server; no credential was sent"
                )
            with self._lock:
                self._fp, self._learned = fp, True

    def _unpin(self) -> bool:
        with self._lock:
            if not self._learned:
                return False
            self._fp, self._learned = None, False
            return True

    def _get_conn(self) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._connect(), False

    def _release(self, conn: http.client.HTTPConnection, reusable: bool) -> None:
        if reusable:
            with self._lock:
                if len(self._idle) < _POOL_SIZE:
                    self._idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        """Closes the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def request(self, op: str, method: str, path: str, body: Union[None, bytes, BinaryIO] = None,
                content_type: Optional[str] = None, length: Optional[int] = None,
                timeout: Optional[float] = None) -> Response:
        """Sends a request and returns the response, raising an APIError
        for a non-2xx answer and Unreachable when there is no answer.

        A request on a kept-open connection that the server meanwhile
        closed is sent once more on a new one (a file body is rewound)."""
        headers: Dict[str, str] = {}
        if content_type:
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if body is not None and not isinstance(body, (bytes, bytearray)):
            if length is None:
                raise ValueError("a streamed body needs its length")
            headers["Content-Length"] = str(length)
        start = body.tell() if body is not None and hasattr(body, "seek") and not isinstance(body, (bytes, bytearray)) else None
        relearned = False
        for attempt in range(3):
            self._pin()
            conn, reused = self._get_conn()
            conn.timeout = timeout if timeout is not None else self.timeout
            if conn.sock is not None:
                conn.sock.settimeout(conn.timeout)
            try:
                conn.request(method, self.prefix + path, body=body, headers=headers)
                resp = conn.getresponse()
            except errors.CertificateError:
                conn.close()
                # A certificate learned from the key's proof was replaced
                # (a server set up anew): learn the new one once.
                if not relearned and self._unpin() and (body is None or start is not None or isinstance(body, (bytes, bytearray))):
                    relearned = True
                    if start is not None:
                        body.seek(start)  # type: ignore[union-attr]
                    continue
                raise
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                stale = reused and isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError,
                                                  BrokenPipeError, http.client.BadStatusLine))
                if stale and (body is None or isinstance(body, (bytes, bytearray)) or start is not None):
                    if start is not None:
                        body.seek(start)  # type: ignore[union-attr]
                    continue
                if isinstance(e, socket.timeout):
                    raise errors.Unreachable(self.url, TimeoutError(
                        f"no answer within {conn.timeout:g}s to {method} {path}")) from e
                raise errors.Unreachable(self.url, e) from e
            r = Response(conn, resp, self._release)
            if resp.status // 100 != 2:
                raise _decode_error(op, r)
            return r
        raise errors.Unreachable(self.url, ConnectionError("the server closed the connection three times"))

    def json(self, op: str, method: str, path: str, payload: Any = None,
             timeout: Optional[float] = None) -> Any:
        """Sends payload as JSON (if not None) and decodes the JSON answer."""
        body = None if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        r = self.request(op, method, path, body, "application/json" if body is not None else None,
                         timeout=timeout)
        try:
            data = r.read()
        except (OSError, http.client.HTTPException) as e:
            r.close(False)
            raise errors.Unreachable(self.url, e) from e
        r.close()
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise errors.BraidError(f"{op}: the server's answer is not JSON: {e}") from None


def _decode_error(op: str, r: Response) -> errors.APIError:
    try:
        b = r.read(64 << 10)
    except (OSError, http.client.HTTPException):
        b = b""
    r.close(False)
    msg = ""
    try:
        msg = json.loads(b).get("error", "")
    except (ValueError, AttributeError):
        pass
    if not msg:
        s = b.decode("utf-8", "replace").strip()
        msg = s if s and len(s) < 200 else http.client.responses.get(r.status, f"HTTP {r.status}")
    return errors.api_error(op, r.status, msg)

