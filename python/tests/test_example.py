"""python/examples/wordcount.py run as a user would, against the cluster."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections import Counter

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "wordcount.py")


def test_wordcount_example(cluster, wasm_ops, tmp_path):
    texts = {
        "a.txt": "The cat sat on the mat\nthe end\n" * 500,
        "b.txt": "one two two three three three\n" * 300,
    }
    for name, t in texts.items():
        (tmp_path / name).write_text(t)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRAID_")}
    env.update(BRAID_SERVER=cluster.url, BRAID_KEY=cluster.key)
    p = subprocess.run([sys.executable, EXAMPLE, "--ops", os.path.dirname(wasm_ops["wordcount"]),
                        "--split", "lines:2K", "--top", "2", *(str(tmp_path / n) for n in texts)],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    out = p.stdout.decode()
    for name, t in texts.items():
        c = Counter(t.lower().split())
        top = ", ".join(f"{w} {n}" for w, n in c.most_common(2))
        assert f"{tmp_path / name}: {sum(c.values())} words; most frequent: {top}" in out, out
    count = "".join(f"{w}\t{n}\n" for w, n in sorted(Counter(texts["a.txt"].split()).items())).encode()
    digest = hashlib.sha256(hashlib.sha256(count).digest()).hexdigest()
    assert re.search(r"pipeline \d+: checksum of the count of .*a\.txt: " + digest, out), out
    assert "2/2 jobs [" in p.stderr.decode(), "the progress display went to stderr"


def test_example_without_credentials(cluster):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRAID_")}
    env["BRAID_SERVER"] = cluster.url
    p = subprocess.run([sys.executable, EXAMPLE, "x.txt"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 2
    assert "no way to check the server's certificate" in p.stderr.decode()
