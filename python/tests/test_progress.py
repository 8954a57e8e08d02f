"""The progress display in each of its three places: a terminal, a
notebook (an IPython kernel, faked here) and a plain stream, without
IPython installed."""

from __future__ import annotations

import io
import sys
import types

import braid
from braid import progress
from braid.client import JobStatus, UnitCounts


def status(job: int, state: str, done: int, total: int) -> JobStatus:
    return JobStatus(job=job, state=state, units=UnitCounts(total=total, done=done))


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_redraws_one_line(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    out = TTY()
    bar = braid.Progress(total=1, out=out)
    assert bar.mode == "tty"
    bar.update(status(7, "running", 0, 4))
    bar._last_draw = 0  # as if 0.1 s passed
    bar.update(status(7, "running", 2, 4))
    bar.update(status(7, "done", 4, 4))
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    last = text.split("\r")[-1]
    assert last.startswith("job 7 done") and "4/4 units" in last and "[" + "=" * 30 + "]" in last


def test_plain_stream_without_ipython(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    out = io.StringIO()
    bar = braid.Progress(total=2, out=out, mode="notebook")  # no IPython: falls back
    assert bar.mode == "lines"
    bar.update(status(1, "running", 1, 2))
    bar.update(status(1, "running", 1, 2))  # unchanged: no line
    bar.update(status(1, "done", 2, 2))
    bar.update(status(2, "failed", 0, 1))
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("0/2 jobs [")
    assert lines[-1].startswith("2/2 jobs (1 failed) [") and "2/3 units" in lines[-1]
    assert "\r" not in out.getvalue() and len(lines) == 3


def test_notebook_updates_one_display(monkeypatch):
    shown = []

    class Handle:
        def update(self, obj):
            shown.append(("update", obj.data))

    class HTML:
        def __init__(self, data):
            self.data = data

    def display(obj, display_id=False):
        assert display_id is True
        shown.append(("display", obj.data))
        return Handle()

    ipython = types.ModuleType("IPython")
    disp = types.ModuleType("IPython.display")
    disp.HTML, disp.display = HTML, display
    ipython.display = disp
    ipython.get_ipython = lambda: types.SimpleNamespace(kernel=object())
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", disp)

    out = io.StringIO()
    bar = braid.Progress(total=1, out=out)
    assert bar.mode == "notebook"
    bar.update(status(3, "running", 1, 4))
    bar.update(status(3, "done", 4, 4))
    bar.close()
    assert [k for k, _ in shown] == ["display", "update"]
    assert '<progress value="4" max="4"' in shown[-1][1] and "job 3 done" in shown[-1][1]
    assert out.getvalue() == "", "nothing on the text stream"

    # A terminal IPython (no kernel) is not a notebook.
    ipython.get_ipython = lambda: types.SimpleNamespace()
    assert progress._notebook_display() is None
