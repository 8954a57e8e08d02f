"""The Rust example operation (examples/ops/bytehist) end to end: built
with rustc for WASI, added as an operation, run as a job over units of a
bytes split merged by the Go sumcounts example, output checked.

Skips without a rustc that builds for WASI, saying what to install,
unless BRAID_REQUIRE_WASM=1 or BRAID_REQUIRE_RUST=1 (CI), which make that
a failure."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections import Counter
from typing import List, Optional, Tuple

import pytest

import braid
from cluster import ROOT

HINT = ("apt-get install -y rustc libstd-rust-dev-wasm32 (Debian's rustc, with the wasm32-wasi standard "
        "library), or rustup target add wasm32-wasip1; RUSTC names the rustc to use")


def rust_compiler(tmp: str) -> Tuple[Optional[Tuple[str, str]], str]:
    """A rustc that builds for WASI and its target, as examples/ops finds
    them ($RUSTC, rustc on PATH, /usr/bin/rustc; wasm32-wasip1, then
    wasm32-wasi), or None and why."""
    cands: List[str] = []
    for c in (os.environ.get("RUSTC"), shutil.which("rustc"), "/usr/bin/rustc"):
        if c and os.path.exists(c) and c not in cands:
            cands.append(c)
    if not cands:
        return None, "rustc not found, so the Rust example cannot be built; " + HINT
    probe = os.path.join(tmp, "probe.rs")
    with open(probe, "w") as f:
        f.write("fn main() {}\n")
    tried = []
    for c in cands:
        for target in ("wasm32-wasip1", "wasm32-wasi"):
            p = subprocess.run([c, "--target", target, "-o", probe + ".wasm", probe],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
            if p.returncode == 0:
                return (c, target), ""
            first = (p.stdout.decode(errors="replace").strip().splitlines() or [""])[0]
            tried.append(f"{c} --target {target}: {first}")
    return None, f"no rustc here builds for WASI ({'; '.join(tried)}); " + HINT


@pytest.fixture(scope="session")
def bytehist(build_dir: str) -> str:
    found, why = rust_compiler(build_dir)
    if found is None:
        if os.environ.get("BRAID_REQUIRE_WASM") == "1" or os.environ.get("BRAID_REQUIRE_RUST") == "1":
            pytest.fail(why + " (BRAID_REQUIRE_WASM=1 or BRAID_REQUIRE_RUST=1)")
        pytest.skip(why)
    rustc, target = found
    out = os.path.join(build_dir, "bytehist.wasm")
    src = os.path.join(ROOT, "examples", "ops", "bytehist", "main.rs")
    p = subprocess.run([rustc, "--target", target, "--edition", "2021", "-C", "opt-level=3", "-C", "strip=debuginfo",
                        "-D", "warnings", "-o", out, src], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert p.returncode == 0, f"{rustc} failed to build {src}:\n{p.stdout.decode(errors='replace')}"
    return out


def test_rust_operation_job(cluster, bytehist, wasm_ops):
    with braid.Client(cluster.url, key=cluster.key) as c:
        c.add_op("rsumcounts", wasm_ops["sumcounts"])
        info = c.add_op("bytehist", bytehist, doc="byte histogram (Rust)", split="bytes:16K",
                        merge="reduce:rsumcounts", params={"CLASS": "all"})
        assert info["kind"] == "wasm" and info["split"] == "bytes:16K"
        rng = random.Random(5)
        data = bytes(rng.choice(b"hello, world\n\x00\xff") for _ in range(200_000))
        job = c.submit("bytehist", data)
        out = c.get_bytes(job.result(timeout=300))
        assert job.last_status.units.total > 10
        want = "".join(f"{v:02x}\t{n}\n" for v, n in sorted(Counter(data).items()))
        assert out.decode() == want
        text = c.submit("bytehist", data, params={"CLASS": "text"}, split="bytes:64K")
        want_text = "".join(f"{v:02x}\t{n}\n" for v, n in sorted(Counter(data).items()) if v not in (0, 0xff))
        assert c.get_bytes(text.result(timeout=300)).decode() == want_text

        bad = c.submit("bytehist", data, params={"CLASS": "binary"}, max_tries=1)
        with pytest.raises(braid.JobFailed) as ei:
            bad.result(timeout=300)
        assert "exit code 2" in ei.value.message and 'CLASS=\\"binary\\": want all or text' in ei.value.message
