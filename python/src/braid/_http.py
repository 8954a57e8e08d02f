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
import http
import io
import json
import socket
import ssl
import threading
import urllib.parse
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Tuple, Union, cast

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


class ProtocolError(OSError):
    """The server's answer is not the HTTP/1.1 this client reads."""


class _DialError(OSError):
    """No connection could be made: nothing was sent."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Conn:
    """One HTTP/1.1 connection, over TLS unless ctx is None. With TLS,
    check sees the server certificate's DER bytes right after the
    handshake, before any request is written.

    http.client is not used: it parses headers with the email package and
    writes a request's headers and body in two writes, which together cost
    more per small request than the rest of the client (see
    python/benchmarks/submit.py)."""

    def __init__(self, host: str, port: int, timeout: float, ctx: Optional[ssl.SSLContext],
                 check: Optional[Callable[[bytes], None]]) -> None:
        try:
            sock = socket.create_connection((host, port), timeout)
        except OSError as e:
            raise _DialError(e) from e
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ctx is not None:
                try:
                    sock = ctx.wrap_socket(sock, server_hostname=host)
                except OSError as e:
                    # The TLS handshake comes before any of a request:
                    # a server that did not finish it (stopped, stalled)
                    # never saw one.
                    raise _DialError(e) from e
                self.der = sock.getpeercert(binary_form=True) or b""
                if check is not None:
                    check(self.der)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.rfile = cast(io.BufferedReader, sock.makefile("rb", buffering=BLOCK))
        self.host = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def close(self) -> None:
        try:
            self.rfile.close()
        finally:
            self.sock.close()

    def send(self, method: str, path: str, headers: Dict[str, str],
             body: Union[None, bytes, BinaryIO], length: int) -> None:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", "User-Agent: braid-python",
                 "Accept-Encoding: identity"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None or method in ("POST", "PUT"):
            lines.append(f"Content-Length: {length}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if body is None or isinstance(body, (bytes, bytearray)):
            # One write: no delayed-ACK wait between headers and body.
            self.sock.sendall(head + bytes(body or b""))
            return
        self.sock.sendall(head)
        left = length
        while left > 0:
            b = body.read(min(BLOCK, left))
            if not b:
                raise errors.BraidError(f"the upload's source ended {left} bytes short of its size")
            self.sock.sendall(b)
            left -= len(b)

    def _line(self) -> bytes:
        line = self.rfile.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise ProtocolError("an answer's header line is longer than 64 KiB")
        return line

    def receive(self, method: str) -> Tuple[int, Dict[str, str]]:
        """Reads a status line and headers (skipping 1xx answers)."""
        for _ in range(10):
            line = self._line()
            if not line:
                raise ConnectionResetError("the server closed the connection without answering")
            parts = line.split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
                raise ProtocolError(f"not an HTTP/1.1 status line: {line[:80]!r}")
            try:
                status = int(parts[1])
            except ValueError:
                raise ProtocolError(f"not an HTTP status: {line[:80]!r}") from None
            headers: Dict[str, str] = {}
            for _ in range(_MAX_HEADERS + 1):
                h = self._line()
                if h in (b"\r\n", b"\n", b""):
                    break
                k, sep, v = h.decode("latin-1").partition(":")
                if not sep:
                    raise ProtocolError(f"not a header line: {h[:80]!r}")
                headers[k.strip().lower()] = v.strip()
            else:
                raise ProtocolError(f"an answer with more than {_MAX_HEADERS} headers")
            if 100 <= status < 200:
                continue
            return status, headers
        raise ProtocolError("too many informational answers")


_MAX_LINE = 64 << 10
_MAX_HEADERS = 200


class Response:
    """An answer whose body is read as it comes: by its length, in chunks,
    or to the connection's end."""

    def __init__(self, conn: _Conn, status: int, headers: Dict[str, str], method: str,
                 release: Callable[[_Conn, bool], None]) -> None:
        self._conn = conn
        self.status = status
        self.headers = headers
        self._release = release
        self._done = False
        self._keep = headers.get("connection", "").lower() != "close"
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._chunk_left = 0
        self._eof = False
        self.length: Optional[int] = None
        if method == "HEAD" or status in (204, 304):
            self._left: Optional[int] = 0
        elif self._chunked:
            self._left = None
        else:
            cl = headers.get("content-length")
            if cl is not None and cl.isdigit():
                self._left = self.length = int(cl)
            else:
                self._left, self._keep = None, False  # to the connection's end
        if self._left == 0:
            self._eof = True

    def header(self, name: str) -> Optional[str]:
        return self.headers.get(name.lower())

    def read(self, n: int = -1) -> bytes:
        """Reads up to n bytes of the body (all of it if n < 0); b"" at its end."""
        if n < 0:
            parts: List[bytes] = []
            while True:
                part = self.read(BLOCK)
                if not part:
                    return b"".join(parts)
                parts.append(part)
        if self._eof or n == 0:
            return b""
        f = self._conn.rfile
        if self._chunked:
            if self._chunk_left == 0:
                line = self._conn._line()
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ProtocolError(f"not a chunk size: {line[:80]!r}") from None
                if size == 0:
                    while self._conn._line() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    self._eof = True
                    return b""
                self._chunk_left = size
            b: bytes = f.read(min(n, self._chunk_left))
            if not b:
                raise ConnectionResetError("the answer ended inside a chunk")
            self._chunk_left -= len(b)
            if self._chunk_left == 0:
                f.readline(8)
            return b
        want = n if self._left is None else min(n, self._left)
        b = f.read1(want) if want > 0 else b""
        if self._left is None:
            if not b:
                self._eof = True
            return b
        if not b:
            raise ConnectionResetError(f"the answer ended {self._left} bytes short")
        self._left -= len(b)
        if self._left == 0:
            self._eof = True
        return b

    def close(self, reusable: bool = True) -> None:
        """Gives the connection back (if the body was read to its end) or
        closes it."""
        if self._done:
            return
        self._done = True
        self._release(self._conn, reusable and self._keep and self._eof)


class Transport:
    """Sends requests to one server, pinning its certificate."""

    def __init__(self, base: str, *, token: Optional[str], key: Optional[bytes],
                 fingerprint: Optional[bytes], insecure_http: bool, timeout: float,
                 connect_timeout: Optional[float] = None) -> None:
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
        # connect_timeout bounds the TCP connection and the TLS handshake
        # (and learning the certificate): a member of a Failover moves on
        # from a stalled server after it.
        self.connect_timeout = connect_timeout if connect_timeout is not None else timeout
        self._fp = fingerprint
        self._learned = False
        self._lock = threading.Lock()
        self._pin_lock = threading.Lock()
        self._idle: List[_Conn] = []
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

    def _connect(self) -> _Conn:
        try:
            return _Conn(self.host, self.port, self.connect_timeout, self._ctx,
                         self._verify if self._ctx is not None else None)
        except (errors.BraidError, ssl.CertificateError):
            raise
        except _DialError as e:
            raise errors.Unreachable(self.url, e.cause, connected=False) from e.cause
        except OSError as e:
            raise errors.Unreachable(self.url, e) from e

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
            conn = self._connect_unchecked()
            try:
                conn.send("GET", self.prefix + "/v1/health", {"Connection": "close"}, None, 0)
                status, headers = conn.receive("GET")
                proof = headers.get(HEADER_CERT_PROOF.lower(), "")
            except OSError as e:
                # Learning the certificate sends nothing of the request.
                raise errors.Unreachable(self.url, e, connected=False) from e
            finally:
                conn.close()
            fp = hashlib.sha256(conn.der).digest()
            if not hmac.compare_digest(proof.encode(), cert_proof(self.key, fp).encode()):
                raise errors.CertificateError(
                    f"the server did not prove that it holds the cluster key for its certificate "
                    f"{format_fingerprint(fp)}: its cluster key differs (check BRAID_KEY or the key file), "
                    "or something between us is not the braid server; no credential was sent"
                )
            with self._lock:
                self._fp, self._learned = fp, True

    def _connect_unchecked(self) -> _Conn:
        try:
            return _Conn(self.host, self.port, self.connect_timeout, self._ctx, None)
        except _DialError as e:
            raise errors.Unreachable(self.url, e.cause, connected=False) from e.cause
        except OSError as e:
            raise errors.Unreachable(self.url, e) from e

    def _unpin(self) -> bool:
        with self._lock:
            if not self._learned:
                return False
            self._fp, self._learned = None, False
            return True

    def _get_conn(self) -> Tuple[_Conn, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._connect(), False

    def _release(self, conn: _Conn, reusable: bool) -> None:
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
        streamed = body is not None and not isinstance(body, (bytes, bytearray))
        if streamed and length is None:
            raise ValueError("a streamed body needs its length")
        n = len(body) if isinstance(body, (bytes, bytearray)) else (length or 0)
        start = body.tell() if streamed and hasattr(body, "seek") else None  # type: ignore[union-attr]
        replayable = not streamed or start is not None
        wait = timeout if timeout is not None else self.timeout
        relearned = False
        for _ in range(3):
            self._pin()
            try:
                conn, reused = self._get_conn()
            except errors.CertificateError:
                # A certificate learned from the key's proof was replaced
                # (a server set up anew): learn the new one, once.
                if relearned or not replayable or not self._unpin():
                    raise
                relearned = True
                continue
            conn.sock.settimeout(wait)
            try:
                conn.send(method, self.prefix + path, headers, body, n)
                status, rh = conn.receive(method)
            except OSError as e:
                conn.close()
                # A connection kept open that the server meanwhile closed:
                # send again on a new one.
                if reused and replayable and isinstance(e, (ConnectionResetError, BrokenPipeError)):
                    if start is not None:
                        body.seek(start)  # type: ignore[union-attr]
                    continue
                if isinstance(e, socket.timeout):
                    raise errors.Unreachable(self.url, TimeoutError(
                        f"no answer within {wait:g}s to {method} {path}")) from e
                raise errors.Unreachable(self.url, e) from e
            except errors.CertificateError:
                conn.close()
                raise
            r = Response(conn, status, rh, method, self._release)
            if status // 100 != 2:
                raise _decode_error(op, r)
            return r
        raise errors.Unreachable(self.url, ConnectionError("the server closed the connection three times"))

    def json(self, op: str, method: str, path: str, payload: Any = None,
             timeout: Optional[float] = None) -> Dict[str, Any]:
        """Sends payload as JSON (if not None) and decodes the JSON object
        the server answers."""
        body = None if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        r = self.request(op, method, path, body, "application/json" if body is not None else None,
                         timeout=timeout)
        return read_object(op, r, self.url)


def split_urls(s: str) -> List[str]:
    """The URLs of a comma-separated list, as the Go client takes them."""
    urls = [u.strip() for u in s.split(",") if u.strip()]
    if not urls:
        raise errors.ConfigurationError(f"server URL {s!r}: no URL; want e.g. https://10.0.0.1:7400")
    return urls


class Failover:
    """Sends requests to one of several servers that share one database
    (PostgreSQL) and so serve the same jobs, blobs and tokens, with the
    rules of the Go client (client/failover.go): each request goes to the
    server that answered last (the first at start) and moves on to the
    next when that one cannot be reached, only if the request cannot have
    arrived (no connection could be made: refused or timed out) or changes
    nothing (GET, HEAD). A request the server may have received and acted
    on (a POST that got no answer) is not sent twice. Each server's
    certificate is pinned on its own: by the cluster key's proof, or, with
    a fingerprint or a join token, the servers share one certificate."""

    def __init__(self, transports: List[Transport], failover_after: float = 10.0) -> None:
        self._ts = transports
        # failover_after also bounds the wait for the answer to a GET or
        # HEAD (plus what the request asks the server to hold it), so a
        # stalled server's open connection does not hold a status poll
        # for the whole request timeout.
        self.failover_after = failover_after
        self._cur = 0
        self._lock = threading.Lock()

    def _current(self) -> Transport:
        with self._lock:
            return self._ts[self._cur]

    @property
    def url(self) -> str:
        return self._current().url

    @property
    def urls(self) -> List[str]:
        return [t.url for t in self._ts]

    @property
    def fingerprint(self) -> Optional[bytes]:
        return self._current().fingerprint

    def close(self) -> None:
        for t in self._ts:
            t.close()

    def request(self, op: str, method: str, path: str, body: Union[None, bytes, BinaryIO] = None,
                content_type: Optional[str] = None, length: Optional[int] = None,
                timeout: Optional[float] = None) -> Response:
        """Transport.request on the current server, then on the next ones
        while the rules above allow it. Raises Unreachable naming every
        server tried when none answered."""
        with self._lock:
            start = self._cur
        streamed = body is not None and not isinstance(body, (bytes, bytearray))
        pos: Optional[int] = None
        if streamed:
            try:
                pos = body.tell()  # type: ignore[union-attr]
            except (AttributeError, OSError):
                pos = None
        failed: List[errors.Unreachable] = []
        for i in range(len(self._ts)):
            k = (start + i) % len(self._ts)
            if i > 0 and pos is not None:
                body.seek(pos)  # type: ignore[union-attr]
            t = self._ts[k]
            wait = timeout
            if method in ("GET", "HEAD"):
                held = max(0.0, (timeout if timeout is not None else t.timeout) - t.timeout)
                wait = min(timeout if timeout is not None else t.timeout, self.failover_after + held)
            try:
                r = t.request(op, method, path, body, content_type, length, wait)
            except errors.Unreachable as e:
                # A body that cannot be rewound is sent again only if none
                # of it was read (no connection was made).
                again = not e.connected or (method in ("GET", "HEAD") and (not streamed or pos is not None))
                if not again:
                    raise
                failed.append(e)
                continue
            with self._lock:
                self._cur = k
            return r
        tried = "; ".join(f"{e.url}: {e.cause}" for e in failed)
        raise errors.Unreachable(", ".join(self.urls), ConnectionError(f"no server could be reached ({tried})"),
                                 connected=any(e.connected for e in failed))

    def json(self, op: str, method: str, path: str, payload: Any = None,
             timeout: Optional[float] = None) -> Dict[str, Any]:
        """As Transport.json."""
        body = None if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        r = self.request(op, method, path, body, "application/json" if body is not None else None,
                         timeout=timeout)
        return read_object(op, r, self.url)


def read_object(op: str, r: Response, url: str) -> Dict[str, Any]:
    """Reads an answer's body to its end and decodes the JSON object in it."""
    try:
        data = r.read()
    except OSError as e:
        r.close(False)
        raise errors.Unreachable(url, e) from e
    r.close()
    try:
        v = json.loads(data)
    except ValueError as e:
        raise errors.BraidError(f"{op}: the server's answer is not JSON: {e}") from None
    if not isinstance(v, dict):
        raise errors.BraidError(f"{op}: the server's answer is not a JSON object")
    return v


def _decode_error(op: str, r: Response) -> errors.APIError:
    try:
        b = r.read(64 << 10)
    except OSError:
        b = b""
    r.close(False)
    msg = ""
    try:
        msg = json.loads(b).get("error", "")
    except (ValueError, AttributeError):
        pass
    if not msg:
        s = b.decode("utf-8", "replace").strip()
        msg = s if s and len(s) < 200 else _reason(r.status)
    return errors.api_error(op, r.status, msg)



def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"
