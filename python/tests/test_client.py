"""The Python client against a real braid server and worker (conftest.py):
what a user would check: ids, outputs, errors and their messages."""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
import random
import socket
import threading
from collections import Counter
from typing import Iterator

import pytest

import braid


@pytest.fixture(scope="session")
def join_token(cluster) -> str:
    """A client-role join token made by the braid CLI."""
    p = cluster.braid("token", "create", "--role", "client", "--name", "pytest", "--json")
    return json.loads(p.stdout)["join"]


@pytest.fixture
def client(cluster, join_token) -> Iterator[braid.Client]:
    c = braid.Client(cluster.url, token=join_token)
    yield c
    c.close()


@pytest.fixture
def admin(cluster) -> Iterator[braid.Client]:
    c = braid.Client(cluster.url, key=cluster.key)
    yield c
    c.close()


def checksum_of(data: bytes, block: int) -> bytes:
    """What the built-in checksum operation outputs (ops.ChecksumOf)."""
    h = hashlib.sha256()
    for off in range(0, len(data), block):
        h.update(hashlib.sha256(data[off:off + block]).digest())
    return (h.hexdigest() + "\n").encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Connecting: the ways to pin the certificate and authenticate.


def test_join_token_pins_the_certificate(cluster, client):
    h = client.health()
    assert h["status"] == "ok" and h["workers"] >= 1
    assert client.fingerprint == cluster.fingerprint


def test_key_pins_by_the_servers_proof(cluster, admin, tmp_path):
    assert admin.fingerprint is None  # nothing pinned before the first request
    assert admin.health()["status"] == "ok"
    assert admin.fingerprint == cluster.fingerprint
    kf = tmp_path / "key"
    kf.write_text(cluster.key + "\n")
    with braid.Client(cluster.url, key_file=kf) as c:
        assert c.health()["status"] == "ok"
        assert c.fingerprint == cluster.fingerprint


def test_plain_token_and_fingerprint(cluster, join_token):
    token, _, fp = join_token.partition(".")
    with braid.Client(cluster.url, token=token, fingerprint=cluster.fingerprint) as c:
        assert c.put(b"x") == hashlib.sha256(b"x").hexdigest()
    # openssl's form of the fingerprint, and a URL without scheme.
    colons = ":".join(fp[i:i + 2] for i in range(0, len(fp), 2)).upper()
    with braid.Client(cluster.url.split("://", 1)[1], token=token, fingerprint=colons) as c:
        assert c.health()["status"] == "ok"


def test_wrong_token_is_an_auth_error(cluster):
    fp = cluster.fingerprint.split(":", 1)[1]
    with braid.Client(cluster.url, token="braid_0000000000000000wrong." + fp) as c:
        with pytest.raises(braid.AuthError) as ei:
            c.put(b"data")
    e = ei.value
    assert e.status == 401 and e.op == "upload blob"
    assert e.message and e.message in str(e), "the server's message is carried"


def test_wrong_fingerprint_sends_nothing(cluster, join_token):
    token = join_token.partition(".")[0]
    with braid.Client(cluster.url, token=token, fingerprint="sha256:" + "ab" * 32) as c:
        with pytest.raises(braid.CertificateError, match="not the pinned sha256:abab"):
            c.health()


def test_wrong_key_is_a_certificate_error(cluster):
    with braid.Client(cluster.url, key="not the cluster's key") as c:
        with pytest.raises(braid.CertificateError, match="did not prove that it holds the cluster key"):
            c.health()


@pytest.mark.parametrize("kwargs, match", [
    ({"token": "braid_abc"}, "no way to check the server's certificate"),
    ({"token": "braid_abc.nothex"}, "join token: the part after the dot"),
    ({"token": "braid_abc", "fingerprint": "sha256:1234"}, "not a sha256 certificate fingerprint"),
    ({"key": "short"}, "shorter than 8 bytes"),
    ({"key_file": "/nonexistent/braid.key"}, "read key file"),
])
def test_bad_arguments_are_configuration_errors(cluster, kwargs, match, monkeypatch):
    for v in ("BRAID_KEY", "BRAID_TOKEN", "BRAID_SERVER_FINGERPRINT"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(braid.ConfigurationError, match=match):
        braid.Client(cluster.url, **kwargs)


def test_server_down_is_unreachable(cluster, join_token):
    url = f"https://127.0.0.1:{free_port()}"
    with braid.Client(url, token=join_token) as c:
        with pytest.raises(braid.Unreachable, match="cannot reach the braid server at " + url) as ei:
            c.submit("noop", "0" * 64)
    assert isinstance(ei.value, ConnectionError)
    with braid.Client(url, key=cluster.key) as c:
        with pytest.raises(braid.Unreachable):
            c.health()


# Blobs.


def test_put_and_get(client, tmp_path):
    data = random.Random(1).randbytes(3 << 20)
    want = hashlib.sha256(data).hexdigest()
    src = tmp_path / "in.bin"
    src.write_bytes(data)
    assert client.put(src) == want
    assert client.put(str(src)) == want
    assert client.put(data) == want
    with open(src, "rb") as f:
        assert client.put(f) == want
    assert client.put(io.BytesIO(data)) == want
    assert client.put_info(b"")["size"] == 0
    dst = tmp_path / "out.bin"
    assert client.get(want, dst) == len(data)
    assert dst.read_bytes() == data
    assert client.get_bytes(want) == data
    assert any(b["id"] == want for b in client.blobs())
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


def test_get_unknown_blob(client, tmp_path):
    dst = tmp_path / "out.bin"
    with pytest.raises(braid.NotFound) as ei:
        client.get("ab" * 32, dst)
    assert ei.value.status == 404 and ei.value.message
    assert list(tmp_path.iterdir()) == [], "nothing is left behind"


# Jobs.


def test_submit_and_result(client):
    data = random.Random(2).randbytes(300_000)
    blob = client.put(data)
    job = client.submit("checksum", blob, params={"block": 4096})
    assert isinstance(job, braid.Job) and job.id > 0
    out = job.result(timeout=120)
    assert client.get_bytes(out) == checksum_of(data, 4096)
    st = job.status()
    assert st.state == braid.DONE and st.output == out and st.units.done == st.units.total > 1
    assert client.job(job.id).last_status.output == out
    # A job's output as the next job's input, given as the Job.
    again = client.submit("noop", job)
    assert again.result(timeout=120) == out
    assert client.get_bytes(again) == checksum_of(data, 4096)


def test_failed_job_raises_with_the_servers_message(client):
    blob = client.put(b"x")
    job = client.submit("sleep", blob, params={"ms": 0, "fail": "0"}, max_tries=1)
    with pytest.raises(braid.JobFailed) as ei:
        job.result(timeout=120)
    e = ei.value
    assert e.job == job.id and e.status.state == braid.FAILED
    assert e.message and e.message == e.status.error
    assert "unit" in e.message
    assert isinstance(job.exception(), braid.JobFailed)


def test_bad_submission_is_a_bad_request(client):
    blob = client.put(b"x")
    with pytest.raises(braid.BadRequest, match="nosuchop"):
        client.submit("nosuchop", blob)
    with pytest.raises(braid.BadRequest, match="block"):
        client.submit("checksum", blob, params={"block": "many"})
    with pytest.raises(braid.NotFound):
        client.submit("noop", "cd" * 32)
    with pytest.raises(braid.NotFound):
        client.job(987654321)


def test_timeout_and_cancel(client):
    blob = client.put(b"x")
    job = client.submit("sleep", blob, params={"ms": 60000})
    with pytest.raises(braid.WaitTimeout) as ei:
        job.result(timeout=0.3)
    assert isinstance(ei.value, TimeoutError)
    assert not job.done()
    job.cancel()
    with pytest.raises(braid.JobCanceled):
        job.result(timeout=60)


def test_as_completed(client):
    blob = client.put(b"x")
    # Submitted first, ended first; given last, after one that ends later.
    fast = [client.submit("sleep", blob, params={"ms": 0}) for _ in range(5)]
    slow = client.submit("sleep", blob, params={"ms": 1500})
    failing = client.submit("sleep", blob, params={"ms": 0, "fail": "0"}, max_tries=1)
    order = []
    for j in braid.as_completed([slow] + fast + [failing], timeout=120):
        assert j.last_status.final
        order.append(j)
    assert sorted(j.id for j in order) == sorted(j.id for j in [slow] + fast + [failing])
    assert order.index(slow) > order.index(fast[0]), "a job that ends first is yielded first"
    with pytest.raises(braid.JobFailed):
        failing.result()
    sts = braid.wait(fast, progress=False)
    assert [s.state for s in sts] == [braid.DONE] * 5


def test_wasm_operations_and_a_pipeline(client, wasm_ops):
    info = client.add_op("pywordcount", wasm_ops["wordcount"], doc="word count", split="lines:4K",
                         merge="reduce:pysumcounts", params={"LOWER": "0"})
    assert info["name"] == "pywordcount" and info["kind"] == "wasm"
    assert info["hash"] == hashlib.sha256(pathlib.Path(wasm_ops["wordcount"]).read_bytes()).hexdigest()
    with open(wasm_ops["sumcounts"], "rb") as f:
        client.add_op("pysumcounts", f.read())
    assert {"pywordcount", "pysumcounts"} <= {o["name"] for o in client.ops()}
    assert client.op("pywordcount")["split"] == "lines:4K"

    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta", "Epsilon", "zeta"]
    text = "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(4000)) + "\n"
    want = "".join(f"{w}\t{n}\n" for w, n in sorted(Counter(text.split()).items()))

    job = client.submit("pywordcount", text.encode())
    assert job.result(timeout=120) and job.status().units.total > 1
    assert client.get_bytes(job).decode() == want
    lower = client.submit("pywordcount", text.encode(), split="lines:16K", params={"LOWER": True})
    want_lower = "".join(f"{w}\t{n}\n" for w, n in sorted(Counter(text.lower().split()).items()))
    assert client.get_bytes(lower).decode() == want_lower

    p = client.submit_pipeline([
        {"name": "count", "op": "pywordcount", "input": text.encode()},
        {"name": "sum", "op": "checksum", "input": "step:count", "params": {"block": 7}},
    ], name="pytest")
    outs = p.result(timeout=120)
    assert set(outs) == {"count", "sum"}
    assert client.get_bytes(outs["count"]).decode() == want
    assert client.get_bytes(outs["sum"]) == checksum_of(want.encode(), 7)
    assert p.last_status.state == braid.DONE and p.jobs["sum"].last_status.step == "sum"

    client.remove_op("pysumcounts")
    with pytest.raises(braid.NotFound):
        client.op("pysumcounts")


def test_pipeline_errors(client):
    blob = client.put(b"x")
    with pytest.raises(braid.BadRequest, match="nosuchstep"):
        client.submit_pipeline([{"name": "a", "op": "noop", "input": "step:nosuchstep"}])
    with pytest.raises(ValueError, match="step 0: no 'op'"):
        client.submit_pipeline([{"name": "a", "input": blob}])
    p = client.submit_pipeline([
        {"name": "bad", "op": "sleep", "input": blob, "params": {"ms": 0, "fail": "0"}, "max_tries": 1},
        {"name": "after", "op": "noop", "input": "step:bad"},
    ])
    with pytest.raises(braid.JobFailed) as ei:
        p.result(timeout=120)
    assert ei.value.step == "bad"


def test_wait_draws_progress(client):
    blob = client.put(b"x")
    jobs = [client.submit("sleep", blob, params={"ms": 200}, units=3) for _ in range(3)]
    out = io.StringIO()
    bar = braid.Progress(total=len(jobs), out=out, mode="lines")
    for j in jobs:
        j.wait(timeout=120, progress=bar)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines and lines[-1].startswith("3/3 jobs [") and "9/9 units" in lines[-1]


def test_wait_gives_up_on_a_server_that_stays_down(join_token):
    url = f"https://127.0.0.1:{free_port()}"
    with braid.Client(url, token=join_token, retry_window=0.5) as c:
        job = braid.Job(c, braid.JobStatus(job=1, state=braid.RUNNING))
        with pytest.raises(braid.Unreachable):
            job.result(timeout=60)
        with pytest.raises(braid.WaitTimeout):
            job.result(timeout=0.2)  # the timeout ends the wait first
        with pytest.raises(braid.Unreachable):
            list(braid.as_completed([job], timeout=60))


def test_insecure_http(binary):
    """A server started with --insecure-http: plain HTTP on request, and an
    HTTPS client pinned to nothing cannot talk to it."""
    from cluster import Cluster

    with Cluster(binary, workers=0, insecure_http=True) as cl:
        assert cl.url.startswith("http://")
        with braid.Client(cl.url, key=cl.key, insecure_http=True) as c:
            assert c.url == cl.url and c.fingerprint is None
            blob = c.put(b"plain")
            assert c.get_bytes(blob) == b"plain"
        with braid.Client(cl.url, key=cl.key) as c:  # HTTPS to a plain-HTTP server
            with pytest.raises(braid.Unreachable):
                c.health()


def test_datasets(client, cluster, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    files = {f"part-{i:02d}": (f"member {i}\n" * (i + 1)).encode() for i in range(5)}
    for name, data in files.items():
        (src / name).write_bytes(data)
    ds = client.put_dataset(src)
    manifest = client.dataset(ds)
    assert [m["name"] for m in manifest["members"]] == sorted(files)

    # Mapped over every member and concatenated in name order.
    cat = client.submit("noop", ds)
    assert client.get_bytes(cat) == b"".join(files[n] for n in sorted(files))

    # Per member: an output dataset of the same names.
    per = client.submit("noop", ds, merge="none")
    n = client.get_dataset(per, tmp_path / "out")
    assert n == sum(len(b) for b in files.values())
    for name, data in files.items():
        assert (tmp_path / "out" / name).read_bytes() == data

    # Another client sees none of it.
    p = cluster.braid("token", "create", "--role", "client", "--name", "pytest-other", "--json")
    with braid.Client(cluster.url, token=json.loads(p.stdout)["join"]) as other:
        with pytest.raises(braid.NotFound):
            other.dataset(ds)

    # A member goes with its dataset, not alone; an upload of the same
    # bytes on its own stays.
    d2 = tmp_path / "gone"
    d2.mkdir()
    (d2 / "only").write_bytes(b"only in the dataset to delete\n")
    (d2 / "mine").write_bytes(b"put on its own too\n")
    mine = client.put(b"put on its own too\n")
    gone = client.put_dataset(d2)
    member = {m["name"]: m["blob"] for m in client.dataset(gone)["members"]}["only"]
    with pytest.raises(braid.Conflict, match=f"member of datasets {gone}"):
        client.delete_blob(member)
    client.delete_blob(gone)
    for blob in (gone, member):
        with pytest.raises(braid.NotFound):
            client.get_bytes(blob)
    assert client.get_bytes(mine) == b"put on its own too\n"

    with pytest.raises(braid.ConfigurationError, match="no files"):
        client.put_dataset([])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "same").write_bytes(b"1")
    (tmp_path / "b" / "same").write_bytes(b"2")
    with pytest.raises(braid.ConfigurationError, match="two files named 'same'"):
        client.put_dataset([tmp_path / "a" / "same", tmp_path / "b" / "same"])


# Fan-in.


def test_fan_in_joins_inputs(client, wasm_ops):
    """A job over several inputs (a blob, another job's output, bytes)
    reads them joined in the order given; a pipeline step joins two steps."""
    a = client.put(b"alpha beta\nbeta\n")
    first = client.submit("noop", b"gamma alpha\n")
    job = client.submit("checksum", inputs=[a, first, b"delta\n"], params={"block": 5})
    joined = b"alpha beta\nbeta\n" + b"gamma alpha\n" + b"delta\n"
    assert client.get_bytes(job.result(timeout=120)) == checksum_of(joined, 5)
    st = job.status()
    assert st.inputs == [a, f"job:{first.id}", hashlib.sha256(b"delta\n").hexdigest()]
    assert st.input == hashlib.sha256(joined).hexdigest(), "the input is the joined bytes"

    # A word count over two branches joined: the counts of both texts.
    client.add_op("fanwordcount", wasm_ops["wordcount"], split="lines:4K", merge="reduce:fansumcounts")
    client.add_op("fansumcounts", wasm_ops["sumcounts"])
    left, right = b"one two two\n", b"two three\nthree\n"
    p = client.submit_pipeline([
        {"name": "left", "op": "noop", "input": left},
        {"name": "right", "op": "noop", "input": right},
        {"name": "count", "op": "fanwordcount", "inputs": ["step:left", "step:right"]},
    ])
    outs = p.result(timeout=120)
    assert client.get_bytes(outs["count"]) == b"one\t1\nthree\t2\ntwo\t3\n"
    assert p.jobs["count"].last_status.inputs == [f"job:{p.jobs['left'].id}", f"job:{p.jobs['right'].id}"]


def test_fan_in_refusals(client, tmp_path):
    a = client.put(b"a\n")
    with pytest.raises(ValueError, match="input or inputs, not both"):
        client.submit("noop", a, inputs=[a])
    with pytest.raises(ValueError, match="no input"):
        client.submit("noop")
    with pytest.raises(ValueError, match="an empty list"):
        client.submit("noop", inputs=[])
    with pytest.raises(TypeError, match="want a list of inputs"):
        client.submit("noop", inputs=a)
    with pytest.raises(ValueError, match=r"step 0 \(j\): give input or inputs, not both"):
        client.submit_pipeline([{"name": "j", "op": "noop", "input": a, "inputs": [a]}])
    # The server refuses a dataset among joined inputs, naming it.
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"member\n")
    ds = client.put_dataset(tmp_path / "d")
    with pytest.raises(braid.BadRequest, match=f"input 2 \\({ds}\\) is a dataset"):
        client.submit("noop", inputs=[a, ds])


# Several servers: failover with the Go client's rules.


def test_failover_past_a_server_that_is_down(cluster, join_token, tmp_path, monkeypatch):
    down = f"https://127.0.0.1:{free_port()}"
    with braid.Client(f"{down}, {cluster.url}", token=join_token) as c:
        blob = c.put(b"failed over\n")  # a POST: refused on the first, so never sent there
        assert blob == hashlib.sha256(b"failed over\n").hexdigest()
        assert c.url == cluster.url, "requests stay with the server that answered"
        f = tmp_path / "streamed"
        f.write_bytes(b"a file, streamed\n" * 1000)
        assert c.put(f) == hashlib.sha256(f.read_bytes()).hexdigest()
        job = c.submit("checksum", blob, params={"block": 4})
        assert c.get_bytes(job.result(timeout=120)) == checksum_of(b"failed over\n", 4)
    # The cluster key pins each server by its proof; BRAID_SERVER takes
    # the same list.
    monkeypatch.setenv("BRAID_SERVER", f"{down},{cluster.url}")
    with braid.Client(key=cluster.key) as c:
        assert c.health()["status"] == "ok" and c.fingerprint == cluster.fingerprint


class StallingProxy:
    """A TCP proxy to a server that can stall: from then on it forwards
    nothing either way and answers nothing, but keeps every connection
    open and accepts new ones, as a server stopped with SIGSTOP does."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit("//", 1)[1].rsplit(":", 1)
        self.target = (host, int(port))
        self.ln = socket.socket()
        self.ln.bind(("127.0.0.1", 0))
        self.ln.listen(64)
        self.url = f"https://127.0.0.1:{self.ln.getsockname()[1]}"
        self.stalled = threading.Event()
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.ln.accept()
            except OSError:
                return
            self.socks.append(c)
            if self.stalled.is_set():
                continue  # accepted, never answered
            s = socket.create_connection(self.target)
            self.socks.append(s)
            for a, b in ((c, s), (s, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        while True:
            try:
                data = a.recv(65536)
            except OSError:
                return
            if not data or self.stalled.is_set():
                return  # what arrives once stalled goes nowhere
            try:
                b.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.ln.close()
        for s in self.socks:
            s.close()


def test_failover_from_a_stalled_server(cluster, join_token, admin):
    proxy = StallingProxy(cluster.url)
    try:
        with braid.Client(f"{proxy.url},{cluster.url}", token=join_token, failover_after=2.0) as c:
            assert c.health()["status"] == "ok" and c.url == proxy.url, "the first server answers while it runs"
            proxy.stalled.set()
            # A POST written to the stalled server's open connection may
            # have arrived: it is not sent again.
            data = b"sent to a server that may have received it\n"
            with pytest.raises(braid.Unreachable, match="cannot reach the braid server at " + proxy.url) as ei:
                c.put(data)
            assert ei.value.connected
            with pytest.raises(braid.NotFound):
                admin.get_bytes(hashlib.sha256(data).hexdigest())
            # A GET changes nothing: it moves on after the failover time.
            assert c.health()["status"] == "ok"
            assert c.url == cluster.url
        # A new client's POST: the stalled server never finishes the TLS
        # handshake, so nothing was sent, and the POST moves on.
        with braid.Client(f"{proxy.url},{cluster.url}", token=join_token, failover_after=2.0) as c:
            assert c.put(data) == hashlib.sha256(data).hexdigest()
            assert c.url == cluster.url
        # So does a client pinning by the key's proof: it cannot learn
        # the stalled server's certificate.
        with braid.Client(f"{proxy.url},{cluster.url}", key=cluster.key, failover_after=2.0) as c:
            assert c.put(b"by key\n") == hashlib.sha256(b"by key\n").hexdigest()
    finally:
        proxy.close()


def test_every_server_down(join_token):
    a, b = f"https://127.0.0.1:{free_port()}", f"https://127.0.0.1:{free_port()}"
    with braid.Client(f"{a},{b}", token=join_token) as c:
        with pytest.raises(braid.Unreachable) as ei:
            c.submit("noop", "0" * 64)
    e = ei.value
    assert isinstance(e, ConnectionError) and not e.connected
    assert f"{a}: " in str(e) and f"{b}: " in str(e), "the error names every server tried"
    with pytest.raises(braid.ConfigurationError, match="no URL"):
        braid.Client(" , ", token=join_token)
