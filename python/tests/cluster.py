"""A real braid cluster on loopback for the tests and the benchmark: the
braid binary built from this checkout, one `braid server` and one or more
`braid worker` processes in a temporary directory, stopped by PID.

BRAID_BIN names a braid binary to use instead of building one.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from typing import List, Optional

#: The repository's root: python/tests/ is two levels below it.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def go_build(out_dir: str, pkg: str = "./cmd/braid", name: str = "braid", env: Optional[dict] = None) -> str:
    """Builds a Go main package of this module into out_dir; returns the file."""
    out = os.path.join(out_dir, name)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(["go", "build", "-trimpath", "-o", out, pkg], cwd=ROOT, env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"go build {pkg} failed:\n{p.stdout.decode(errors='replace')}")
    return out


def braid_binary(tmp: str) -> str:
    """BRAID_BIN, or braid built from this checkout into tmp."""
    b = os.environ.get("BRAID_BIN")
    if b:
        return b
    return go_build(tmp)


def _wait_for(pattern: str, path: str, proc: subprocess.Popen, what: str, timeout: float = 60.0) -> "re.Match[str]":
    """Waits until the file at path has a line matching pattern."""
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern, re.M)
    while time.monotonic() < deadline:
        with open(path, encoding="utf-8", errors="replace") as f:
            m = rx.search(f.read())
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    with open(path, encoding="utf-8", errors="replace") as f:
        log = f.read()
    raise RuntimeError(f"{what} did not start (exit {proc.poll()}); its output:\n{log}")


class Cluster:
    """A braid server and workers on loopback. Use as a context manager or
    call stop(); both kill exactly the processes it started."""

    def __init__(self, binary: str, workers: int = 1, threads: int = 2, insecure_http: bool = False) -> None:
        self.binary = binary
        self.insecure_http = insecure_http
        self.dir = tempfile.mkdtemp(prefix="braid-py-")
        self.key = base64.b64encode(os.urandom(32)).decode()
        self.procs: List[subprocess.Popen] = []
        self.server: Optional[subprocess.Popen] = None
        self.url = ""
        self.fingerprint = ""
        try:
            self._start(workers, threads)
        except BaseException:
            self.stop()
            raise

    def _env(self) -> dict:
        e = {k: v for k, v in os.environ.items() if not k.startswith("BRAID_")}
        e["BRAID_KEY"] = self.key
        return e

    def _spawn(self, name: str, args: List[str]) -> subprocess.Popen:
        log = open(os.path.join(self.dir, name + ".log"), "wb")
        try:
            p = subprocess.Popen([self.binary] + args, stdout=log, stderr=subprocess.STDOUT, env=self._env(),
                                 stdin=subprocess.DEVNULL)
        finally:
            log.close()
        self.procs.append(p)
        return p

    def _start(self, workers: int, threads: int) -> None:
        data = os.path.join(self.dir, "data")
        args = ["server", "--listen", "127.0.0.1:0", "--data", data]
        if self.insecure_http:
            args.append("--insecure-http")
        self.server = self._spawn("server", args)
        log = os.path.join(self.dir, "server.log")
        self.url = _wait_for(r"^braid server listening on (\S+)", log, self.server, "braid server").group(1)
        if not self.insecure_http:
            self.fingerprint = _wait_for(r"^certificate fingerprint (\S+)", log, self.server, "braid server").group(1)
        for i in range(workers):
            self.add_worker(threads, f"w{i}")
        if workers:
            self.wait_workers(workers)

    def add_worker(self, threads: int = 2, name: str = "w") -> subprocess.Popen:
        return self._spawn("worker-" + name, ["worker", "--server", self.url, "--threads", str(threads),
                                              "--name", name, "--module-dir", os.path.join(self.dir, "mod-" + name)])

    def wait_workers(self, n: int, timeout: float = 60.0) -> None:
        """Waits until the server counts n live workers (via braid workers)."""
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            p = subprocess.run([self.binary, "workers", "--server", self.url, "--json"], env=self._env(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
            out = p.stdout.decode(errors="replace")
            if p.returncode == 0:
                ws = json.loads(out).get("workers") or []
                if sum(1 for w in ws if w.get("alive")) >= n:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{n} worker(s) did not register within {timeout:g}s: braid workers said:\n{out}\n"
                           + self.logs())

    def braid(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Runs a braid client command against the cluster with the key."""
        p = subprocess.run([self.binary] + list(args) + ["--server", self.url], env=self._env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        if check and p.returncode != 0:
            raise RuntimeError(f"braid {' '.join(args)}: exit {p.returncode}: {p.stderr.decode(errors='replace')}")
        return p

    def logs(self) -> str:
        parts = []
        for f in sorted(os.listdir(self.dir)):
            if f.endswith(".log"):
                with open(os.path.join(self.dir, f), encoding="utf-8", errors="replace") as fh:
                    parts.append(f"--- {f}\n{fh.read()[-4000:]}")
        return "\n".join(parts)

    def kill(self, p: subprocess.Popen) -> None:
        """Stops one process this cluster started: SIGTERM, then SIGKILL."""
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)

    def stop(self) -> None:
        """Stops the workers, then the server, and removes the directory."""
        for p in reversed(self.procs):
            self.kill(p)
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
