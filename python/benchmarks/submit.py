#!/usr/bin/env python3
"""What the Python client adds to submitting and waiting for small jobs,
against the Go client, side by side on one cluster.

Starts a braid server and two workers on loopback (python/tests/cluster.py),
uploads one 1 KiB blob, then runs rounds of: N jobs of the built-in noop
operation submitted one after the other, then waited for in order (each
wait a held poll, GET /v1/jobs/ID?wait=), once through the Go client
(gosubmit/, built here, timed inside the program) and once through the
Python client (timed in this process); both time everything from making
the client (pinning the certificate with the cluster key) to the last
job's end. The order alternates each round. Prints the median of each and
their ratio.

    python3 python/benchmarks/submit.py [--jobs 100] [--rounds 7]

Run it from a checkout with Go installed; the braid package is imported
from python/src unless it is installed. BRAID_BIN names a braid binary to
use instead of building one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
try:
    import braid
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))
    import braid

from cluster import Cluster, braid_binary, go_build  # noqa: E402


def python_round(url: str, key: str, blob: str, n: int) -> float:
    start = time.perf_counter()
    with braid.Client(url, key=key) as c:
        jobs = [c.submit("noop", blob) for _ in range(n)]
        for j in jobs:
            j.result()
    return time.perf_counter() - start


def go_round(prog: str, url: str, key: str, blob: str, n: int) -> float:
    env = dict(os.environ, BRAID_KEY=key)
    p = subprocess.run([prog, "-server", url, "-input", blob, "-n", str(n)], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=900, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"gosubmit: {p.stderr.decode(errors='replace')}")
    return float(json.loads(p.stdout)["seconds"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100, help="jobs per round (default 100)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of each client (default 7)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="braid-py-bench-") as tmp:
        binary = braid_binary(tmp)
        prog = go_build(tmp, "./python/benchmarks/gosubmit", "gosubmit")
        with Cluster(binary, workers=2, threads=2) as cl:
            with braid.Client(cl.url, key=cl.key) as c:
                blob = c.put(os.urandom(1024))
                # Warm up: the first jobs pay for connections and caches.
                for j in [c.submit("noop", blob) for _ in range(10)]:
                    j.result()
            go, py = [], []
            for r in range(args.rounds):
                order = [("go", go), ("python", py)]
                if r % 2:
                    order.reverse()
                for name, acc in order:
                    if name == "go":
                        acc.append(go_round(prog, cl.url, cl.key, blob, args.jobs))
                    else:
                        acc.append(python_round(cl.url, cl.key, blob, args.jobs))
                print(f"round {r + 1}: go {go[-1]:.3f}s  python {py[-1]:.3f}s", file=sys.stderr)
    g, p = statistics.median(go), statistics.median(py)
    print(f"{args.jobs} noop jobs submitted then waited for, {args.rounds} rounds, median wall time: "
          f"Go client {g:.3f}s, Python client {p:.3f}s, Python/Go {p / g:.3f} ({(p / g - 1) * 100:+.1f}%)")
    print(f"  go rounds:     {' '.join(f'{x:.3f}' for x in go)}")
    print(f"  python rounds: {' '.join(f'{x:.3f}' for x in py)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
