#!/usr/bin/env python3
"""Word counts of text files on a braid cluster, from Python.

Adds the example operations wordcount and sumcounts (examples/ops, built
by examples/ops/build.sh), uploads each file, counts its words in units of
lines merged by a reduce, waits for all with a progress display, and
prints each file's most frequent words. Then it runs a two-step pipeline
on the first file: the count, then a checksum of the count.

    export BRAID_SERVER=https://10.0.0.1:7400
    export BRAID_TOKEN=braid_...   # a join token: braid token create --role client
    python3 python/examples/wordcount.py --ops examples/ops/out book.txt notes.txt

Works the same in a notebook (the progress bar is drawn in the page).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections import Counter
from typing import Dict

import braid


def main() -> int:
    ap = argparse.ArgumentParser(description="Count words of text files on a braid cluster.")
    ap.add_argument("files", nargs="+", type=pathlib.Path, help="text files")
    ap.add_argument("--ops", default="examples/ops/out", help="directory of wordcount.wasm and sumcounts.wasm")
    ap.add_argument("--top", type=int, default=5, help="words to print per file")
    ap.add_argument("--split", default="lines:64K", help="units of the count (default lines:64K)")
    args = ap.parse_args()

    try:
        c = braid.Client()  # BRAID_SERVER, and BRAID_TOKEN or BRAID_KEY
    except braid.ConfigurationError as e:
        print(f"wordcount.py: {e}", file=sys.stderr)
        return 2
    with c:
        try:
            c.add_op("sumcounts", pathlib.Path(args.ops, "sumcounts.wasm"), doc="adds up word<TAB>count lines")
            c.add_op("wordcount", pathlib.Path(args.ops, "wordcount.wasm"), doc="counts words",
                     split="lines:1M", merge="reduce:sumcounts", params={"LOWER": "0"})
            jobs: Dict[braid.Job, pathlib.Path] = {}
            for f in args.files:
                job = c.submit("wordcount", f, split=args.split, params={"LOWER": True})
                jobs[job] = f
            # One progress display for all the jobs; then each result.
            braid.wait(jobs)
            for job in braid.as_completed(jobs):
                counts = parse(c.get_bytes(job.result()))
                top = ", ".join(f"{w} {n}" for w, n in counts.most_common(args.top))
                print(f"{jobs[job]}: {sum(counts.values())} words; most frequent: {top}")

            p = c.submit_pipeline([
                {"name": "count", "op": "wordcount", "input": args.files[0], "split": args.split},
                {"name": "digest", "op": "checksum", "input": "step:count"},
            ], name="wordcount-digest")
            out = p.result(progress=True)
            print(f"pipeline {p.id}: checksum of the count of {args.files[0]}: "
                  f"{c.get_bytes(out['digest']).decode().strip()}")
        except braid.BraidError as e:
            print(f"wordcount.py: {e}", file=sys.stderr)
            return 1
    return 0


def parse(out: bytes) -> Counter:
    """Reads sumcounts' output: word<TAB>count lines."""
    counts: Counter = Counter()
    for line in out.decode().splitlines():
        word, _, n = line.rpartition("\t")
        counts[word] = int(n)
    return counts


if __name__ == "__main__":
    sys.exit(main())
