"""Progress display of jobs being waited for.

Three ways to draw, chosen by where the output goes:

* in a Jupyter notebook (an IPython kernel is running): an HTML progress
  bar updated in place, through IPython.display; no ipywidgets needed;
* on a terminal: one line on stderr, redrawn at most ten times a second;
* anywhere else (a log file, a pipe, a notebook without IPython): a line
  when the count of units done changed, at most every two seconds.

IPython is never imported by this module: it is used only if the program
already runs inside it, so the client works the same without it.
"""

from __future__ import annotations

import html
import sys
import time
from typing import IO, TYPE_CHECKING, Any, Dict, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .client import JobStatus

_WIDTH = 30


def _notebook_display() -> Optional[Any]:
    """Returns IPython.display if the program runs in an IPython kernel
    (a notebook), else None."""
    ip = sys.modules.get("IPython")
    if ip is None:
        return None
    try:
        shell = ip.get_ipython()
    except Exception:
        return None
    # A kernel's shell has a kernel; the terminal IPython's has not.
    if shell is None or getattr(shell, "kernel", None) is None:
        return None
    try:
        import IPython.display as display  # type: ignore[import-not-found]
    except Exception:
        return None
    return display


class Progress:
    """Draws the progress of one or more jobs: units done of total, jobs
    done of total, rate and time.

    Args:
        total: how many jobs are followed.
        out: where to write text (default sys.stderr).
        mode: "notebook", "tty" or "lines"; None chooses by the
            environment as the module's doc says.
    """

    def __init__(self, total: int = 1, out: Optional[IO[str]] = None, mode: Optional[str] = None) -> None:
        self.total = total
        self.out = out if out is not None else sys.stderr
        self._display = None
        if mode is None:
            self._display = _notebook_display()
            if self._display is not None:
                mode = "notebook"
            else:
                isatty = getattr(self.out, "isatty", None)
                mode = "tty" if isatty is not None and isatty() else "lines"
        elif mode == "notebook":
            self._display = _notebook_display()
            if self._display is None:
                mode = "lines"
        if mode not in ("notebook", "tty", "lines"):
            raise ValueError(f"progress mode {mode!r}: want notebook, tty or lines")
        self.mode = mode
        self._jobs: Dict[int, "JobStatus"] = {}
        self._start = time.monotonic()
        self._last_draw = 0.0
        self._last_done = -1
        self._width = 0
        self._handle: Any = None
        self._drawn = False
        self._final_drawn = False

    def update(self, st: "JobStatus") -> None:
        """Records a job's latest status and redraws if it is time."""
        self._jobs[st.job] = st
        now = time.monotonic()
        done_units = sum(s.units.done for s in self._jobs.values())
        finished = sum(1 for s in self._jobs.values() if s.final)
        all_final = finished >= self.total
        if not all_final and not (st.final and self.total > 1):
            gap = now - self._last_draw
            if self.mode in ("tty", "notebook") and gap < 0.1:
                return
            if self.mode == "lines" and (done_units == self._last_done or gap < 2.0):
                return
        self._last_draw, self._last_done = now, done_units
        self._final_drawn = all_final
        self._draw(self.line())

    def line(self) -> str:
        """The text of the display."""
        sts = list(self._jobs.values())
        done = sum(s.units.done for s in sts)
        total = sum(s.units.total for s in sts)
        elapsed = time.monotonic() - self._start
        rate = done / elapsed if elapsed > 0 else 0.0
        frac = done / total if total else 0.0
        if self.total == 1 and len(sts) == 1:
            s = sts[0]
            head = f"job {s.job} {s.state:<8}"
        else:
            finished = sum(1 for s in sts if s.final)
            failed = sum(1 for s in sts if s.state in ("failed", "canceled"))
            head = f"{finished}/{self.total} jobs" + (f" ({failed} failed)" if failed else "")
        filled = int(_WIDTH * frac)
        bar = "=" * filled + (">" + " " * (_WIDTH - filled - 1) if filled < _WIDTH else "")
        return f"{head} [{bar}] {done}/{total} units  {rate:.1f} units/s  {elapsed:.1f}s"

    def _draw(self, line: str) -> None:
        self._drawn = True
        if self.mode == "notebook":
            d = self._display
            assert d is not None
            sts = list(self._jobs.values())
            done = sum(s.units.done for s in sts)
            total = max(sum(s.units.total for s in sts), 1)
            markup = d.HTML(
                f'<div><progress value="{done}" max="{total}" style="width:20em"></progress> '
                f"<code>{html.escape(line)}</code></div>"
            )
            if self._handle is None:
                self._handle = d.display(markup, display_id=True)
            else:
                self._handle.update(markup)
            return
        if self.mode == "tty":
            pad = " " * max(self._width - len(line), 0)
            self.out.write("\r" + line + pad)
            self._width = len(line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def close(self) -> None:
        """Draws the final state and ends the line on a terminal."""
        if self._jobs and not self._final_drawn:
            self._draw(self.line())
        if self.mode == "tty" and self._drawn:
            self.out.write("\n")
            self.out.flush()
