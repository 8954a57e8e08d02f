"""The braid client: blobs, operations, jobs and pipelines of one server.

A :class:`Client` speaks the server's control API (api/openapi.yaml in
the braid repository) over HTTPS with the server's certificate pinned
(see :mod:`braid._http`). Jobs are futures: :meth:`Job.result` waits and
returns the output blob's id or raises :class:`~braid.errors.JobFailed`;
:func:`as_completed` yields jobs as they end; :func:`wait` waits for many
with a progress display.

Waiting asks the server to hold each answer until the job is final or the
poll interval (50 ms growing to 1 s) passed (GET /v1/jobs/ID?wait=), as
the Go client does: a job's end is seen as soon as it happens, without a
poll per 50 ms.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import (Any, BinaryIO, Dict, Iterable, Iterator, List, Mapping, Optional,
                    Sequence, Tuple, Union)

from . import errors
from ._http import (BLOCK, Failover, Transport, admin_token, format_fingerprint, parse_fingerprint,
                    read_object, split_join_token, split_urls)
from .progress import Progress

#: What a job's input may be: a blob id, "job:ID", a Job (its output), a
#: local file (uploaded first) or bytes (uploaded first).
Input = Union[str, "Job", "os.PathLike[str]", bytes]

#: Job states; the last three are final.
QUEUED, RUNNING, DONE, FAILED, CANCELED = "queued", "running", "done", "failed", "canceled"
_FINAL = (DONE, FAILED, CANCELED)

#: How long waits keep retrying a server that does not answer (restarting,
#: say) before they raise Unreachable.
DEFAULT_RETRY_WINDOW = 30.0
#: failover_after of a Client of several servers (the Go client's
#: DefaultFailoverAfter).
DEFAULT_FAILOVER_AFTER = 10.0


@dataclass
class UnitCounts:
    """A job's computation units by state."""

    total: int = 0
    done: int = 0
    failed: int = 0
    running: int = 0
    #: Failed tries of units that then ran again.
    retries: int = 0
    #: Units with a try that brought no result.
    retried: int = 0


@dataclass
class JobStatus:
    """The server's view of one job (api.JobStatus). :attr:`raw` holds the
    whole answer, including fields this version does not name."""

    job: int
    state: str
    op: str = ""
    input: str = ""
    output: str = ""
    error: str = ""
    units: UnitCounts = field(default_factory=UnitCounts)
    params: Dict[str, str] = field(default_factory=dict)
    split: str = ""
    merge: str = ""
    input_job: int = 0
    pipeline: int = 0
    step: str = ""
    module: str = ""
    inputs: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def final(self) -> bool:
        """Whether the job is done, failed or canceled."""
        return self.state in _FINAL

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "JobStatus":
        u = d.get("units") or {}
        return cls(
            job=int(d.get("job", 0)), state=str(d.get("state", "")), op=d.get("op", ""),
            input=d.get("input", ""), output=d.get("output", ""), error=d.get("error", ""),
            units=UnitCounts(**{k: int(u.get(k, 0)) for k in ("total", "done", "failed", "running", "retries", "retried")}),
            params=dict(d.get("params") or {}), split=d.get("split", ""), merge=d.get("merge", ""),
            input_job=int(d.get("input_job", 0)), pipeline=int(d.get("pipeline", 0)),
            step=d.get("step", ""), module=d.get("module", ""), inputs=list(d.get("inputs") or []), raw=dict(d),
        )


@dataclass
class PipelineStatus:
    """The server's view of a pipeline: its state and its steps' jobs in
    the order they were given."""

    pipeline: int
    state: str
    name: str = ""
    steps: Dict[str, JobStatus] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        """Whether every step is done, failed or canceled."""
        return all(s.final for s in self.steps.values())

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "PipelineStatus":
        steps = [JobStatus.from_json(s) for s in d.get("steps") or []]
        return cls(pipeline=int(d.get("pipeline", 0)), state=str(d.get("state", "")), name=d.get("name", ""),
                   steps={s.step: s for s in steps})


def _raise_for(st: JobStatus, step: Optional[str] = None) -> None:
    if st.state == FAILED:
        raise errors.JobFailed(st, step)
    if st.state == CANCELED:
        raise errors.JobCanceled(st, step)


class _Deadline:
    """A timeout in seconds (None: never) turned into remaining time."""

    def __init__(self, timeout: Optional[float]) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout {timeout}: want seconds >= 0, or None for no limit")
        self.end = None if timeout is None else time.monotonic() + timeout
        self.timeout = timeout

    def remaining(self) -> Optional[float]:
        return None if self.end is None else self.end - time.monotonic()

    def expired(self) -> bool:
        r = self.remaining()
        return r is not None and r <= 0


class _Outage:
    """Tracks how long the server has not answered, for waits that retry
    through a restart."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.since: Optional[float] = None

    def ok(self) -> None:
        self.since = None

    def failed(self, e: errors.BraidError) -> None:
        """Re-raises e once the server has not answered for the window."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
        if now - self.since >= self.window:
            raise e


def _hold(seconds: float) -> str:
    """A Go duration of whole milliseconds, at least 1ms."""
    return f"{max(int(seconds * 1000), 1)}ms"


class Job:
    """A submitted job: a future of its output blob's id.

    ``job.result()`` waits for it and returns the output id, or raises
    :class:`~braid.errors.JobFailed` (:class:`~braid.errors.JobCanceled`)
    with the server's reason.
    """

    def __init__(self, client: "Client", status: JobStatus) -> None:
        self.client = client
        self.id = status.job
        self._status = status

    def __repr__(self) -> str:
        return f"<braid.Job {self.id} {self._status.op} {self._status.state}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.client is self.client and other.id == self.id

    def __hash__(self) -> int:
        return hash((id(self.client), self.id))

    @property
    def last_status(self) -> JobStatus:
        """The status last seen, without asking the server."""
        return self._status

    def status(self) -> JobStatus:
        """Asks the server for the job's status."""
        return self._poll(None)

    def _poll(self, hold: Optional[float]) -> JobStatus:
        path = f"/v1/jobs/{self.id}"
        timeout = None
        if hold is not None:
            path += "?wait=" + _hold(hold)
            timeout = self.client.timeout + hold
        d = self.client._t.json(f"status of job {self.id}", "GET", path, timeout=timeout)
        st = JobStatus.from_json(d)
        self._status = st
        return st

    def done(self) -> bool:
        """Whether the job has ended (done, failed or canceled); asks the
        server unless it was already seen to end."""
        if self._status.final:
            return True
        return self.status().final

    def wait(self, timeout: Optional[float] = None, progress: Union[bool, Progress] = False) -> JobStatus:
        """Waits until the job ends and returns its final status, whatever
        the state (it does not raise for a failed job; :meth:`result` does).

        Args:
            timeout: seconds to wait at most; None waits as long as it takes.
            progress: True draws a progress display (see
                :mod:`braid.progress`); a Progress draws on that one.

        Raises:
            WaitTimeout: the job did not end in time.
            Unreachable: the server did not answer for the client's
                retry window (30 s by default).
        """
        for st in _watch([self], timeout, progress):
            pass
        return self._status

    def result(self, timeout: Optional[float] = None, progress: Union[bool, Progress] = False) -> str:
        """Waits until the job ends and returns its output blob's id.

        Raises:
            JobFailed: the job failed; the exception carries the server's
                message and the final status.
            JobCanceled: the job was canceled.
            WaitTimeout: it did not end within timeout seconds.
        """
        st = self.wait(timeout, progress)
        _raise_for(st)
        return st.output

    def exception(self, timeout: Optional[float] = None) -> Optional[errors.JobFailed]:
        """Waits until the job ends and returns its JobFailed, or None if it
        is done."""
        try:
            self.result(timeout)
        except errors.JobFailed as e:
            return e
        return None

    def cancel(self) -> JobStatus:
        """Cancels the job if it has not ended."""
        d = self.client._t.json(f"cancel job {self.id}", "POST", f"/v1/jobs/{self.id}/cancel", {})
        self._status = JobStatus.from_json(d)
        return self._status


def _watch(jobs: Sequence[Job], timeout: Optional[float],
           progress: Union[bool, Progress, None]) -> Iterator[Job]:
    """Yields each job of jobs once it is final, polling the server: a
    held poll of the oldest unfinished job, then a quick look at the
    others, each round."""
    pending: List[Job] = []
    seen = set()
    for j in jobs:
        if j not in seen:
            seen.add(j)
            pending.append(j)
    bar: Optional[Progress] = None
    if isinstance(progress, Progress):
        bar = progress
    elif progress:
        bar = Progress(total=len(pending))
    deadline = _Deadline(timeout)
    outage = _Outage(min((j.client.retry_window for j in pending), default=DEFAULT_RETRY_WINDOW))
    interval = 0.05
    try:
        for j in list(pending):
            if j.last_status.final:
                pending.remove(j)
                if bar is not None:
                    bar.update(j.last_status)
                yield j
        while pending:
            rem = deadline.remaining()
            if rem is not None and rem <= 0:
                ids = ", ".join(str(j.id) for j in pending[:10]) + (", ..." if len(pending) > 10 else "")
                raise errors.WaitTimeout(
                    f"waited {deadline.timeout:g}s; {len(pending)} job(s) not ended: {ids} (they keep running)")
            hold = interval if rem is None else max(min(interval, rem), 0.001)
            ended: List[Job] = []
            try:
                for i, j in enumerate(pending):
                    st = j._poll(hold if i == 0 else None)
                    if bar is not None:
                        bar.update(st)
                    if st.final:
                        ended.append(j)
                outage.ok()
            except (errors.Unreachable, errors.ServerError) as e:
                outage.failed(e)
                time.sleep(hold)
            for j in ended:
                pending.remove(j)
                yield j
            interval = 0.05 if ended else min(interval * 1.5, 1.0)
    finally:
        if bar is not None and not isinstance(progress, Progress):
            bar.close()


def as_completed(jobs: Iterable[Job], timeout: Optional[float] = None) -> Iterator[Job]:
    """Yields the jobs as they end (done, failed or canceled), like
    concurrent.futures.as_completed; call ``job.result()`` on each.

    Raises:
        WaitTimeout: timeout seconds passed before every job ended.
    """
    return _watch(list(jobs), timeout, None)


def wait(jobs: Iterable[Job], timeout: Optional[float] = None, progress: bool = True) -> List[JobStatus]:
    """Waits for every job to end, drawing one progress display for all
    (terminal, notebook or log lines: see :mod:`braid.progress`), and
    returns their final statuses in the order given. It raises for none
    of them: call ``job.result()`` for that.

    Raises:
        WaitTimeout: timeout seconds passed before every job ended.
    """
    js = list(jobs)
    for _ in _watch(js, timeout, progress):
        pass
    return [j.last_status for j in js]


class Pipeline:
    """A submitted pipeline: named steps, each a job."""

    def __init__(self, client: "Client", status: PipelineStatus) -> None:
        self.client = client
        self.id = status.pipeline
        self._status = status

    def __repr__(self) -> str:
        return f"<braid.Pipeline {self.id} {self._status.name!r} {self._status.state}>"

    @property
    def last_status(self) -> PipelineStatus:
        return self._status

    @property
    def jobs(self) -> Dict[str, Job]:
        """The steps' jobs by step name, in the order given."""
        return {name: Job(self.client, st) for name, st in self._status.steps.items()}

    def status(self) -> PipelineStatus:
        """Asks the server for the pipeline's status."""
        d = self.client._t.json(f"pipeline {self.id}", "GET", f"/v1/pipelines/{self.id}")
        self._status = PipelineStatus.from_json(d)
        return self._status

    def wait(self, timeout: Optional[float] = None, progress: Union[bool, Progress] = False) -> PipelineStatus:
        """Waits until every step has ended and returns the final status;
        it does not raise for failed steps (:meth:`result` does)."""
        js = list(self.jobs.values())
        for _ in _watch(js, timeout, progress):
            pass
        return self.status()

    def result(self, timeout: Optional[float] = None, progress: Union[bool, Progress] = False) -> Dict[str, str]:
        """Waits for every step and returns each step's output blob id by
        step name.

        Raises:
            JobFailed: a step failed (the first one given that did);
                ``.step`` names it.
        """
        st = self.wait(timeout, progress)
        for name, s in st.steps.items():
            _raise_for(s, name)
        return {name: s.output for name, s in st.steps.items()}


def _read_key(key: Union[None, str, bytes], key_file: Union[None, str, "os.PathLike[str]"]) -> Optional[bytes]:
    if key_file is not None:
        try:
            with open(key_file, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise errors.ConfigurationError(f"read key file: {e}") from None
        raw = raw.strip()
        if not raw:
            raise errors.ConfigurationError(f"key file {os.fspath(key_file)} is empty")
    elif key is not None:
        raw = (key.encode() if isinstance(key, str) else bytes(key)).strip()
        if not raw:
            raise errors.ConfigurationError("the cluster key is empty")
    else:
        return None
    if len(raw) < 8:
        raise errors.ConfigurationError("cluster key is shorter than 8 bytes; use a longer random secret")
    return raw


def _env(name: str) -> Optional[str]:
    v = os.environ.get(name, "").strip()
    return v or None


class Client:
    """A client of a braid server, or of several that share one database.
    Safe to share between threads.

    Args:
        url: the server's base URL, e.g. ``"https://10.0.0.1:7400"``
            (default: BRAID_SERVER). HTTPS is spoken whatever the scheme,
            unless insecure_http. Several servers sharing one database are
            given as one comma-separated list (``"https://a:7400,https://b:7400"``),
            as to the Go client: a request goes to the server that answered
            last and moves on to the next only if it cannot have arrived (no
            connection could be made) or changes nothing (a GET).
        token: a token from ``braid token create`` (BRAID_TOKEN); a join
            token ("TOKEN.HEX") also pins the server's certificate.
        key: the cluster key (BRAID_KEY), as text or bytes: authenticates
            as admin unless a token is given, and pins the certificate by
            the server's proof of the key unless a fingerprint is known.
        key_file: read the cluster key from this file instead.
        fingerprint: the SHA-256 fingerprint of the server's certificate
            ("sha256:..." or openssl's form; BRAID_SERVER_FINGERPRINT).
        insecure_http: speak plain HTTP to a server started with
            --insecure-http (credentials travel readable).
        timeout: seconds a request may wait for an answer.
        retry_window: seconds waits keep retrying a server that does
            not answer before raising Unreachable.
        failover_after: with several servers, seconds a server may take
            to accept a connection (TCP and TLS) or to begin answering a
            GET before the request goes to the next one: what moves the
            client off a stopped or stalled server, which still accepts
            TCP connections but never answers (the Go client's
            WithFailoverAfter).

    Only arguments left as None are read from the environment.

    Raises:
        ConfigurationError: a malformed token or fingerprint, an
            unreadable key file, or, over HTTPS, no way to check the
            server's certificate (neither fingerprint, join token nor key).
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 key: Union[None, str, bytes] = None, key_file: Union[None, str, "os.PathLike[str]"] = None,
                 fingerprint: Union[None, str, bytes] = None, insecure_http: bool = False,
                 timeout: float = 60.0, retry_window: float = DEFAULT_RETRY_WINDOW,
                 failover_after: float = DEFAULT_FAILOVER_AFTER) -> None:
        url = url or _env("BRAID_SERVER")
        if not url:
            raise errors.ConfigurationError("no server: pass the URL (e.g. https://10.0.0.1:7400) or set BRAID_SERVER")
        if token is None:
            token = _env("BRAID_TOKEN")
        if key is None and key_file is None:
            key = _env("BRAID_KEY")
        if fingerprint is None:
            fingerprint = _env("BRAID_SERVER_FINGERPRINT")
        k = _read_key(key, key_file)
        fp: Optional[bytes] = None
        if isinstance(fingerprint, (bytes, bytearray)):
            if len(fingerprint) != 32:
                raise errors.ConfigurationError("fingerprint: want the 32 bytes of a SHA-256")
            fp = bytes(fingerprint)
        elif fingerprint:
            fp = parse_fingerprint(fingerprint)
        cred: Optional[str] = None
        if token:
            cred, join_fp = split_join_token(token)
            if fp is None:
                fp = join_fp
        elif k is not None:
            cred = admin_token(k)
        if not insecure_http and fp is None and k is None:
            raise errors.ConfigurationError(
                "no way to check the server's certificate: give a join token (braid token create prints one), "
                "the fingerprint (braid server prints it) or the cluster key")
        self.timeout = timeout
        self.retry_window = retry_window
        if failover_after <= 0:
            raise errors.ConfigurationError(f"failover_after {failover_after}: want seconds > 0")
        urls = split_urls(url)
        several = len(urls) > 1
        ts = [Transport(u, token=cred, key=k, fingerprint=fp, insecure_http=insecure_http, timeout=timeout,
                        connect_timeout=min(timeout, failover_after) if several else None)
              for u in urls]
        self._t: Union[Transport, Failover] = ts[0] if not several else Failover(ts, failover_after)

    @property
    def url(self) -> str:
        """The server's base URL; of several, the one requests go to now."""
        return self._t.url

    @property
    def fingerprint(self) -> Optional[str]:
        """The pinned certificate's fingerprint ("sha256:..."), None before
        the first request with the key, or over plain HTTP."""
        fp = self._t.fingerprint
        return None if fp is None else format_fingerprint(fp)

    def close(self) -> None:
        """Closes the connections kept open."""
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<braid.Client {self.url}>"

    # Server and operations.

    def health(self) -> Dict[str, Any]:
        """The server's health: {"status": "ok", "workers": N}."""
        return self._t.json("health", "GET", "/v1/health")

    def ops(self) -> List[Dict[str, Any]]:
        """The operations the server can run (api.OpInfo each)."""
        return self._t.json("list ops", "GET", "/v1/ops").get("ops") or []

    def op(self, name: str) -> Dict[str, Any]:
        """Describes one operation.

        Raises:
            NotFound: no operation of that name.
        """
        return self._t.json(f"describe operation {name}", "GET", "/v1/ops/" + urllib.parse.quote(name, safe=""))

    def add_op(self, name: str, module: Union[str, "os.PathLike[str]", bytes], *, doc: Optional[str] = None,
               split: Optional[str] = None, merge: Optional[str] = None,
               params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """Uploads a WebAssembly module (WASI command: stdin to stdout) as a
        new version of the operation name and returns its description.

        Args:
            module: the .wasm file's path, or its bytes.
            doc: a one-line description for listings.
            split, merge: defaults for jobs that do not say, e.g.
                "lines:1M" and "reduce:sumcounts".
            params: the parameters it declares, NAME to default value.

        Raises:
            BadRequest: the module or an argument is invalid; the message
                says which.
        """
        q: List[Tuple[str, str]] = []
        if doc:
            q.append(("doc", doc))
        if split:
            q.append(("split", split))
        if merge:
            q.append(("merge", merge))
        for k in sorted(params or {}):
            q.append(("param", f"{k}={(params or {})[k]}"))
        path = "/v1/ops/" + urllib.parse.quote(name, safe="")
        if q:
            path += "?" + urllib.parse.urlencode(q)
        data = bytes(module) if isinstance(module, (bytes, bytearray)) else _read_file(module)
        r = self._t.request(f"add operation {name}", "PUT", path, data, "application/octet-stream")
        return read_object(f"add operation {name}", r, self.url)

    def remove_op(self, name: str) -> None:
        """Removes a user operation; jobs that use it keep running it."""
        r = self._t.request(f"remove operation {name}", "DELETE", "/v1/ops/" + urllib.parse.quote(name, safe=""))
        r.read()
        r.close()

    def workers(self) -> List[Dict[str, Any]]:
        """The workers the server knows, live and dead."""
        return self._t.json("list workers", "GET", "/v1/workers").get("workers") or []

    def create_token(self, role: str, name: Optional[str] = None) -> Dict[str, Any]:
        """Makes a token (admin only): role is admin, client, worker or
        monitor. The answer's "join" is the join token to give a Client."""
        req: Dict[str, Any] = {"role": role}
        if name:
            req["name"] = name
        return self._t.json("create token", "POST", "/v1/tokens", req)

    # Blobs.

    def put(self, source: Union[str, "os.PathLike[str]", bytes, BinaryIO]) -> str:
        """Uploads a file (by path), bytes, or a binary file object read to
        its end, and returns the blob's id (the sha256 of its bytes). A
        file is streamed, not held in memory.

        Raises:
            TooLarge: larger than the server's --max-upload.
            InsufficientStorage: the server's storage is full.
        """
        return str(self.put_info(source)["id"])

    def put_info(self, source: Union[str, "os.PathLike[str]", bytes, BinaryIO]) -> Dict[str, Any]:
        """:meth:`put` returning {"id": ..., "size": ...}."""
        return self._upload(source, "/v1/blobs")

    def _upload(self, source: Union[str, "os.PathLike[str]", bytes, BinaryIO], path: str) -> Dict[str, Any]:
        """Uploads source to path: "/v1/blobs", or "/v1/blobs?member=1" for
        a member of a dataset about to be made, whose upload goes when a
        dataset that lists it is deleted (an upload on its own stays)."""
        op = "upload blob"
        if isinstance(source, (bytes, bytearray)):
            r = self._t.request(op, "POST", path, bytes(source), "application/octet-stream")
            return read_object(op, r, self.url)
        if isinstance(source, (str, os.PathLike)):
            try:
                f = open(source, "rb")
            except OSError as e:
                raise errors.BraidError(f"{op}: {e}") from None
            with f:
                size = os.fstat(f.fileno()).st_size
                r = self._t.request(f"{op} {os.fspath(source)}", "POST", path, f,
                                    "application/octet-stream", length=size)
                return read_object(op, r, self.url)
        try:
            size = os.fstat(source.fileno()).st_size - source.tell()
        except (AttributeError, OSError, io.UnsupportedOperation):
            return self._upload(source.read(), path)
        r = self._t.request(op, "POST", path, source, "application/octet-stream", length=size)
        return read_object(op, r, self.url)

    def get(self, blob: Union[str, Job], path: Union[str, "os.PathLike[str]"]) -> int:
        """Downloads a blob (or a done job's output) into the file at path
        and returns its size. The bytes are checked against the id (their
        sha256) as they arrive, into a temporary file beside path that
        replaces it only once they all arrived and matched.

        Raises:
            NotFound: no such blob. Gone: an output removed after retention.
            IntegrityError: the download stopped early or did not match;
                path was left as it was.
        """
        bid = self._blob_id(blob)
        dest = os.fspath(path)
        d = os.path.dirname(os.path.abspath(dest))
        fd, tmp = tempfile.mkstemp(prefix=".braid-", suffix=".part", dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                n = self._download(bid, f)
            os.replace(tmp, dest)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return n

    def get_bytes(self, blob: Union[str, Job]) -> bytes:
        """Downloads a blob (or a done job's output) into memory, checked as
        :meth:`get` checks it."""
        buf = io.BytesIO()
        self._download(self._blob_id(blob), buf)
        return buf.getvalue()

    def _blob_id(self, blob: Union[str, Job]) -> str:
        if isinstance(blob, Job):
            return blob.result()
        return blob

    def _download(self, bid: str, w: BinaryIO, dataset: Optional[str] = None) -> int:
        op = f"download blob {bid}"
        path = "/v1/blobs/" + urllib.parse.quote(bid, safe="")
        if dataset:
            path += "?dataset=" + urllib.parse.quote(dataset, safe="")
        r = self._t.request(op, "GET", path)
        length = r.header("Content-Length")
        want = int(length) if length and length.isdigit() else -1
        h = hashlib.sha256()
        n = 0
        try:
            while True:
                b = r.read(BLOCK)
                if not b:
                    break
                h.update(b)
                w.write(b)
                n += len(b)
        except OSError as e:
            r.close(False)
            raise errors.IntegrityError(f"{op}: the download stopped after {n} of {want} bytes ({e})") from e
        r.close()
        if want >= 0 and n != want:
            raise errors.IntegrityError(f"{op}: the download stopped after {n} of {want} bytes")
        if h.hexdigest() != bid:
            raise errors.IntegrityError(
                f"{op}: the bytes received hash to sha256 {h.hexdigest()}, not to the blob's id: refused")
        return n

    # Datasets.

    def put_dataset(self, source: Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]) -> str:
        """Uploads the files of a directory (not its subdirectories), or the
        files given, as a dataset, and returns its id: the sha256 of its
        manifest, usable as a job's input (the operation maps over every
        member) like a blob id. Members are named by their file names,
        which must differ.

        Raises:
            ConfigurationError: no files, or two files of one name.
        """
        if isinstance(source, (str, os.PathLike)) and os.path.isdir(source):
            d = os.fspath(source)
            paths = [os.path.join(d, n) for n in sorted(os.listdir(d)) if os.path.isfile(os.path.join(d, n))]
        elif isinstance(source, (str, os.PathLike)):
            paths = [os.fspath(source)]
        else:
            paths = [os.fspath(p) for p in source]
        names = [os.path.basename(p) for p in paths]
        if not paths:
            raise errors.ConfigurationError("put dataset: no files: a dataset needs at least one member")
        if len(set(names)) != len(names):
            dup = sorted(n for n in set(names) if names.count(n) > 1)[0]
            raise errors.ConfigurationError(f"put dataset: two files named {dup!r}: members are named by their file names")
        members = []
        for p, n in zip(paths, names):
            info = self._upload(p, "/v1/blobs?member=1")
            members.append({"name": n, "size": int(info["size"]), "blob": str(info["id"])})
        return str(self._t.json("make dataset", "POST", "/v1/datasets", {"members": members})["id"])

    def dataset(self, dataset: Union[str, Job]) -> Dict[str, Any]:
        """The manifest of a dataset (or of a done job's output dataset):
        {"format", "members": [{"name", "size", "blob"}, ...]}."""
        did = self._blob_id(dataset)
        return self._t.json(f"dataset {did}", "GET", "/v1/datasets/" + urllib.parse.quote(did, safe=""))

    def get_dataset(self, dataset: Union[str, Job], directory: Union[str, "os.PathLike[str]"]) -> int:
        """Downloads every member of a dataset (or of a done job's output
        dataset) into directory, made if missing, each checked as
        :meth:`get` checks a blob; returns the bytes written."""
        did = self._blob_id(dataset)
        d = self.dataset(did)
        os.makedirs(directory, exist_ok=True)
        total = 0
        for m in d.get("members") or []:
            dest = os.path.join(os.fspath(directory), m["name"])
            fd, tmp = tempfile.mkstemp(prefix=".braid-", suffix=".part", dir=os.fspath(directory))
            try:
                with os.fdopen(fd, "wb") as f:
                    total += self._download(m["blob"], f, dataset=did)
                os.replace(tmp, dest)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        return total

    def blobs(self) -> List[Dict[str, Any]]:
        """The stored blobs: {"id", "size"} each."""
        return self._t.json("list blobs", "GET", "/v1/blobs").get("blobs") or []

    def delete_blob(self, blob: str) -> None:
        """Deletes a blob, or a dataset with its members but those something
        else needs (this client's upload of the same bytes on its own with
        :meth:`put`, another client's upload, another dataset, an
        unfinished job, a kept output). Only this client's upload goes while
        another client's upload, dataset or job needs the same bytes.

        Raises:
            Conflict: an unfinished job uses it, it is a job's output kept
                until its retention ends, a dataset lists it (delete the
                dataset), or it is an operation's module; the message says
                which.
            NotFound: no such blob (or another client's).
        """
        r = self._t.request(f"delete blob {blob}", "DELETE", "/v1/blobs/" + urllib.parse.quote(blob, safe=""))
        r.read()
        r.close()

    # Jobs.

    def _input(self, inp: Input) -> str:
        if isinstance(inp, Job):
            return f"job:{inp.id}"
        if isinstance(inp, (bytes, bytearray)):
            return self.put(bytes(inp))
        if isinstance(inp, os.PathLike):
            return self.put(inp)
        if isinstance(inp, str):
            return inp
        raise TypeError(f"input {inp!r}: want a blob id, 'job:ID', a Job, a pathlib.Path or bytes")

    def _inputs(self, inp: Optional[Input], inps: Optional[Sequence[Input]]) -> Dict[str, Any]:
        """The input fields of a job request: "input", or "inputs" for a
        join."""
        if inps is not None and not isinstance(inps, (str, bytes, bytearray, os.PathLike)):
            if inp is not None:
                raise ValueError("give input or inputs, not both")
            if not inps:
                raise ValueError("inputs: an empty list; give at least one input")
            return {"inputs": [self._input(i) for i in inps]}
        if inps is not None:
            raise TypeError(f"inputs={inps!r}: want a list of inputs; for one input, use input=")
        if inp is None:
            raise ValueError("no input: give input (a blob id, 'job:ID', a Job, a Path or bytes) or inputs")
        return {"input": self._input(inp)}

    def submit(self, op: str, input: Optional[Input] = None, split: Optional[str] = None,
               merge: Optional[str] = None, params: Optional[Mapping[str, Any]] = None, *,
               inputs: Optional[Sequence[Input]] = None, units: Optional[int] = None,
               tile: Union[None, str, Tuple[int, int]] = None, repeat: Optional[int] = None,
               policy: Optional[str] = None, in_flight: Optional[int] = None,
               unit_mem: Optional[int] = None, unit_timeout: Optional[str] = None,
               unit_output: Optional[int] = None, max_tries: Optional[int] = None,
               **extra: Any) -> Job:
        """Submits a job: apply op to input, or to several inputs joined.

        Args:
            op: the operation's name (:meth:`ops` lists them).
            input: a blob id or dataset id, "job:ID" or a Job (its output,
                once done), a pathlib.Path or bytes (uploaded first).
            inputs: instead of input, up to 64 inputs of those kinds
                (datasets aside), joined in the order given (fan-in): the
                job waits for every input job, and the operation reads the
                inputs concatenated on stdin, each also as a file /in/NAME
                (docs/ops.md, Joining inputs).
            split: "whole", "bytes:SIZE", "lines:SIZE" or "tiles:WxH[+HALO]"
                (default: the operation's).
            merge: "concat", "tiles" or "reduce:OP" (default: the
                operation's).
            params: the operation's parameters; values become strings.
            units, tile, repeat, policy, in_flight, unit_mem,
            unit_timeout, unit_output, max_tries: as braid submit's flags.
            extra: further fields of the request (api.JobRequest), sent as
                given, for servers newer than this client.

        Returns:
            The Job, a future of its output id.

        Raises:
            BadRequest: the server refused the request; the message names
                what is wrong (unknown operation, bad split, ...).
            NotFound: the input blob or job does not exist.
            ValueError: both input and inputs, or neither, were given.
        """
        req = _job_request(op, self._inputs(input, inputs), split, merge, params, units, tile, repeat, policy,
                           in_flight, unit_mem, unit_timeout, unit_output, max_tries, extra)
        d = self._t.json(f"submit job ({op})", "POST", "/v1/jobs", req)
        return Job(self, JobStatus.from_json(d))

    def job(self, job_id: int) -> Job:
        """The job with this id, with its current status.

        Raises:
            NotFound: no such job.
        """
        j = Job(self, JobStatus(job=int(job_id), state=""))
        j.status()
        return j

    def jobs(self, state: Optional[str] = None, limit: Optional[int] = None) -> List[Job]:
        """Jobs, newest first: those in state (all if None), at most limit
        (None: the server's default, 100)."""
        q: Dict[str, str] = {}
        if state:
            q["state"] = state
        if limit:
            q["limit"] = str(limit)
        path = "/v1/jobs" + ("?" + urllib.parse.urlencode(q) if q else "")
        d = self._t.json("list jobs", "GET", path)
        return [Job(self, JobStatus.from_json(s)) for s in d.get("jobs") or []]

    # Pipelines.

    def submit_pipeline(self, steps: Sequence[Mapping[str, Any]], name: Optional[str] = None) -> Pipeline:
        """Submits a pipeline: a DAG of named steps, each a job.

        Each step is a mapping with "name", "op" and "input" (a blob id,
        "step:NAME" for another step's output, "job:ID", a Job, a
        pathlib.Path or bytes) or "inputs" (a list of those, joined: a
        step may wait for several), and optionally any of :meth:`submit`'s
        keyword arguments ("split", "merge", "params", ...)::

            p = c.submit_pipeline([
                {"name": "count", "op": "wordcount", "input": Path("book.txt"),
                 "split": "lines:1M", "merge": "reduce:sumcounts"},
                {"name": "top", "op": "topwords", "input": "step:count", "params": {"N": 10}},
            ])
            outputs = p.result()      # {"count": ID, "top": ID}

        Raises:
            BadRequest: the server refused the whole pipeline, naming the
                step (unknown operation or step, a cycle, ...).
        """
        out: List[Dict[str, Any]] = []
        for i, s in enumerate(steps):
            s = dict(s)
            try:
                sname, op = s.pop("name"), s.pop("op")
            except KeyError as e:
                raise ValueError(f"pipeline step {i}: no {e.args[0]!r}; a step needs name, op and input (or inputs)") from None
            try:
                inp = self._inputs(s.pop("input", None), s.pop("inputs", None))
            except ValueError as e:
                raise ValueError(f"pipeline step {i} ({sname}): {e}") from None
            known = ("split", "merge", "params", "units", "tile", "repeat", "policy", "in_flight", "unit_mem",
                     "unit_timeout", "unit_output", "max_tries")
            kw = {k: s.pop(k, None) for k in known}
            req = _job_request(op, inp, kw["split"], kw["merge"], kw["params"], kw["units"],
                               kw["tile"], kw["repeat"], kw["policy"], kw["in_flight"], kw["unit_mem"],
                               kw["unit_timeout"], kw["unit_output"], kw["max_tries"], s)
            req["name"] = sname
            out.append(req)
        body: Dict[str, Any] = {"steps": out}
        if name:
            body["name"] = name
        d = self._t.json("submit pipeline", "POST", "/v1/pipelines", body)
        return Pipeline(self, PipelineStatus.from_json(d))

    def pipeline(self, pipeline_id: int) -> Pipeline:
        """The pipeline with this id, with its current status."""
        p = Pipeline(self, PipelineStatus(pipeline=int(pipeline_id), state=""))
        p.status()
        return p


def _job_request(op: str, inp: Mapping[str, Any], split: Optional[str], merge: Optional[str],
                 params: Optional[Mapping[str, Any]], units: Optional[int],
                 tile: Union[None, str, Tuple[int, int]], repeat: Optional[int], policy: Optional[str],
                 in_flight: Optional[int], unit_mem: Optional[int], unit_timeout: Optional[str],
                 unit_output: Optional[int], max_tries: Optional[int], extra: Mapping[str, Any]) -> Dict[str, Any]:
    req: Dict[str, Any] = {"op": op}
    req.update(inp)
    if params:
        req["params"] = {str(k): _param(v) for k, v in params.items()}
    if isinstance(tile, tuple):
        tile = f"{tile[0]}x{tile[1]}"
    for k, v in (("split", split), ("merge", merge), ("units", units), ("tile", tile), ("repeat", repeat),
                 ("policy", policy), ("in_flight", in_flight), ("unit_mem", unit_mem),
                 ("unit_timeout", unit_timeout), ("unit_output", unit_output), ("max_tries", max_tries)):
        if v is not None and v != "":
            req[k] = v
    req.update(extra)
    return req


def _param(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def _read_file(path: Union[str, "os.PathLike[str]"]) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise errors.BraidError(f"read {os.fspath(path)}: {e}") from None


__all__ = ["Client", "Job", "Pipeline", "JobStatus", "PipelineStatus", "UnitCounts", "as_completed", "wait",
           "Progress", "QUEUED", "RUNNING", "DONE", "FAILED", "CANCELED"]
