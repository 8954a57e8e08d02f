"""The client's HTTP/1.1 reader on canned answers: lengths, chunks, an
answer to the connection's end, and answers cut short."""

from __future__ import annotations

import io

import pytest

from braid import _http


def answer(raw: bytes, method: str = "GET"):
    conn = object.__new__(_http._Conn)
    conn.rfile = io.BufferedReader(io.BytesIO(raw))
    released = []
    status, headers = conn.receive(method)
    r = _http.Response(conn, status, headers, method, lambda c, ok: released.append(ok))
    return r, released


def test_content_length():
    r, rel = answer(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhelloNEXT")
    assert r.status == 200 and r.header("x-a") == "b" and r.read() == b"hello"
    r.close()
    assert rel == [True], "a fully read answer gives its connection back"


def test_chunked_with_trailer_and_interim_answer():
    raw = (b"HTTP/1.1 100 Continue\r\n\r\n"
           b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"3\r\nabc\r\nA;ext=1\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n")
    r, rel = answer(raw)
    assert r.status == 201 and r.read(2) == b"ab" and r.read() == b"c0123456789"
    r.close()
    assert rel == [True]


def test_to_the_end_and_close():
    r, rel = answer(b"HTTP/1.0 200 OK\r\n\r\nall of it")
    assert r.read() == b"all of it"
    r.close()
    assert rel == [False], "an answer without length ends with its connection"
    r, rel = answer(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
    assert r.read() == b""
    r.close()
    assert rel == [False]


def test_cut_short():
    r, _ = answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    assert r.read(3) == b"abc"
    with pytest.raises(ConnectionResetError, match="7 bytes short"):
        r.read()
    r, _ = answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
    with pytest.raises(ConnectionResetError, match="inside a chunk"):
        r.read()


@pytest.mark.parametrize("raw, match", [
    (b"", "closed the connection without answering"),
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.1 status line"),
    (b"HTTP/1.1 abc OK\r\n\r\n", "not an HTTP status"),
    (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "not a header line"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 300 + b"\r\n", "more than 200 headers"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"y" * (70 << 10) + b"\r\n\r\n", "longer than 64 KiB"),
])
def test_malformed_answers(raw, match):
    with pytest.raises(OSError, match=match):
        answer(raw)
