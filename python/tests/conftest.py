"""Fixtures: one real braid cluster (server + worker on loopback) for the
whole session, and the example operations built into WebAssembly."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Dict, Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import Cluster, braid_binary, go_build  # noqa: E402


@pytest.fixture(scope="session")
def build_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="braid-py-build-")
    yield d
    import shutil

    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def binary(build_dir: str) -> str:
    """The braid binary: BRAID_BIN, or built from this checkout."""
    return braid_binary(build_dir)


@pytest.fixture(scope="session")
def cluster(binary: str) -> Iterator[Cluster]:
    """A server and one worker with two threads, stopped at the end."""
    c = Cluster(binary, workers=1, threads=2)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def wasm_ops(build_dir: str) -> Dict[str, str]:
    """The Go example operations (examples/ops) built for wasip1."""
    out = {}
    for name in ("wordcount", "sumcounts"):
        out[name] = go_build(build_dir, "./examples/ops/" + name, name + ".wasm",
                             env={"GOOS": "wasip1", "GOARCH": "wasm"})
    return out
