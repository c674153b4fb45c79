"""Progress reporting of long operations: a tqdm bar on a terminal, log lines otherwise.

``Progress(total, unit="rows", desc="fit")`` is a context manager with
``update(n)``:

* when the stream (``sys.stderr`` by default) is a TTY and not ``quiet``: a
  tqdm bar (done / total, rate, ETA);
* when it is not a TTY (cron, a pipe, a log file): one plain line every
  ``interval`` seconds (default 10; env ``STREAMRANK_PROGRESS_SECONDS``) and
  one at the end, e.g. ``streamrank fit (pass 2): 5,000/9,630 rows (52%),
  12,345 rows/s, ETA 0:00:01``;
* ``quiet``: nothing.

:class:`ProgressSource` wraps a :class:`~streamrank.io.blocks.BlockSource`
so that every pass a learner makes over it (``source.blocks(...)``) drives
a progress display, without the learner knowing; :class:`ProgressTuples`
does the same for tuple sources (``.batches(...)``), counting tuples.
"""
from __future__ import annotations

import os
import sys
import time

from ..io.blocks import BlockSource

__all__ = ["Progress", "ProgressSource", "ProgressTuples", "PhaseReporter", "format_eta", "progress_reporting"]


def format_eta(seconds) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get("STREAMRANK_PROGRESS_SECONDS", "10")))
    except ValueError:
        return 10.0


class Progress:
    """Progress of one operation over ``total`` units (None: unknown total)."""

    def __init__(self, total=None, *, unit="rows", desc="streamrank", quiet=False, stream=None,
                 interval=None, tty=None, final_line=True):
        self.total = None if total is None else int(total)
        self.final_line = bool(final_line)     # False: only the phases report (no count of its own)
        self.unit = unit
        self.desc = desc
        self.quiet = bool(quiet)
        self.stream = sys.stderr if stream is None else stream
        self.interval = _interval() if interval is None else float(interval)
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty
        self.n = 0
        self.postfix = ""       # a short state after the count (a phase's note: "residual 3e-4, tol 1e-6")
        self._phase = None      # a PhaseReporter phase in progress: it owns the count, passes do not
        self._bar = None
        self._t0 = time.monotonic()
        self._last = self._t0
        self._closed = False
        # test hook: slow every update down so that a test can interrupt mid-way
        self._sleep = float(os.environ.get("_STREAMRANK_TEST_SLEEP", "0") or 0)
        if not self.quiet and self.tty:
            from tqdm import tqdm

            try:
                cols, rows = os.get_terminal_size(self.stream.fileno())
            except (AttributeError, OSError, ValueError):
                cols = rows = 0
            # a terminal reporting no size (a bare pty, some CI runners) would hide the bar
            width = {"dynamic_ncols": True} if cols > 0 and rows > 0 else {"ncols": 100, "nrows": 20}
            # block characters only where the stream can encode them (a C-locale session is ASCII)
            enc = (getattr(self.stream, "encoding", None) or "").lower().replace("-", "")
            self._bar = tqdm(total=self.total, unit=" " + unit, desc=desc, file=self.stream,
                             unit_scale=True, leave=True, ascii=None if enc.startswith("utf") else True,
                             **width)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(ok=exc_type is None)
        return False

    def set_description(self, desc: str) -> None:
        self.desc = desc
        if self._bar is not None:
            self._bar.set_description(desc)

    def reset(self, total=None, desc=None) -> None:
        """Start a new pass: count from 0 again."""
        if desc is not None:
            self.set_description(desc)
        self.total = None if total is None else int(total)
        self.n = 0
        self._t0 = time.monotonic()
        if self._bar is not None:
            self._bar.reset(total=self.total)

    def set_unit(self, unit: str) -> None:
        self.unit = unit
        if self._bar is not None:
            self._bar.unit = " " + unit

    def set_postfix(self, text: str) -> None:
        self.postfix = text or ""
        if self._bar is not None:
            self._bar.set_postfix_str(self.postfix, refresh=False)

    def say(self, text: str) -> None:
        """One line about the operation (not on a TTY bar, not when quiet)."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.write(f"streamrank {self.desc}: {text}", file=self.stream)
        else:
            print(f"streamrank {self.desc}: {text}", file=self.stream, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += int(n)
        if self._sleep:
            time.sleep(self._sleep)
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(int(n))
            return
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._line()

    def _line(self, final: bool = False) -> None:
        dt = max(time.monotonic() - self._t0, 1e-9)
        rate = self.n / dt
        if self.total:
            pct = f" ({100.0 * self.n / self.total:.0f}%)"
            done = f"{self.n:,}/{self.total:,} {self.unit}{pct}"
            eta = (self.total - self.n) / rate if rate > 0 else None
            tail = f", ETA {format_eta(eta)}" if not final else f" in {format_eta(dt)}"
        else:
            done = f"{self.n:,} {self.unit}"
            tail = f" in {format_eta(dt)}" if final else ""
        note = f" [{self.postfix}]" if self.postfix else ""
        print(f"streamrank {self.desc}: {done}{note}, {rate:,.0f} {self.unit}/s{tail}",
              file=self.stream, flush=True)

    def close(self, ok: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif not self.quiet and ok and self.final_line:  # after an error the error line says it all
            self._line(final=True)


class ProgressSource(BlockSource):
    """A block source that reports every pass over ``base`` to a :class:`Progress`.

    Everything else (sizes, group offsets, reads) is delegated, so learners
    and metrics see the same source.  Pass ``k`` is shown as ``desc (pass k)``.
    """

    def __init__(self, base, progress: Progress):
        self._base = base
        self._progress = progress
        self._passes = 0
        self._desc = progress.desc

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_base", "_progress", "_passes", "_desc"):
            raise AttributeError(name)
        return getattr(self._base, name)

    @property
    def group_ptr(self):
        return self._base.group_ptr

    def _group_ptr(self):
        return self._base._group_ptr()

    def _group_qid(self, g0, g1):
        return self._base._group_qid(g0, g1)

    def _read_rows(self, r0, r1):
        return self._base._read_rows(r0, r1)

    def _nnz_at(self, rows):
        return self._base._nnz_at(rows)

    def _read_y(self, r0, r1):
        return self._base._read_y(r0, r1)

    def plan(self, *args, **kwargs):
        return self._base.plan(*args, **kwargs)

    def read_block(self, *args):
        return self._base.read_block(*args)

    def blocks(self, *args, **kwargs):
        p = self._progress
        if p._phase is not None:      # a pass inside a phase (leave-query-out...): the phase counts
            yield from self._base.blocks(*args, **kwargs)
            return
        self._passes += 1
        desc = self._desc if self._passes == 1 else f"{self._desc} (pass {self._passes})"
        if self._passes > 1:
            p.reset(self._base.n_rows, desc)
        for block in self._base.blocks(*args, **kwargs):
            yield block
            p.update(block.n_rows)

    def __len__(self):
        return len(self._base)

    def __repr__(self):
        return f"ProgressSource({self._base!r})"


class ProgressTuples:
    """A tuple source whose ``batches(...)`` report tuples done to a :class:`Progress`."""

    def __init__(self, base, progress: Progress):
        self._base = base
        self._progress = progress

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_base", "_progress"):
            raise AttributeError(name)
        return getattr(self._base, name)

    def batches(self, *args, **kwargs):
        for batch in self._base.batches(*args, **kwargs):
            yield batch
            self._progress.update(len(batch))

    def __len__(self):
        return len(self._base)


class PhaseReporter:
    """Shows the phases of :mod:`streamrank._phases` on a :class:`Progress`: each phase restarts the count
    under its own name and unit ("fit kernel: decomposition ...", "fit rankrls: leave-query-out 120/471
    groups"); a phase without a count says when it starts and how long it took.  A phase begun inside
    another is shown at the outer one's position ("fit cg: CV folds 2/5 > cg iterations 14/1,000"), and
    the outer count goes on when it ends."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.base = progress.desc
        self.unit = progress.unit

    def begin(self, name, total, unit):
        import time as _t

        p = self.progress
        outer = p._phase
        if outer is not None:
            at = f"{outer.name} {min(p.n + 1, outer.total):,}/{outer.total:,}" if outer.total else outer.name
            name = f"{at} > {name}"
        h = _Phase(p, name, _t.monotonic(), total)
        h.before = (p.n, p.total, p._t0, p.desc, p.unit, p.postfix, outer)
        p.set_unit(unit)
        p.set_postfix("")
        p.reset(total, f"{self.base}: {name}")
        p.say("started" if total is None else f"0/{int(total):,} {unit}")
        p._phase = h
        return h

    def end(self, handle):
        import time as _t

        p = handle.progress
        if handle.total is None:
            p.say(f"done in {format_eta(_t.monotonic() - handle.t0)}")
        elif p._bar is None and not p.quiet:
            p._line(final=True)
        n, total, t0, desc, unit, postfix, outer = handle.before
        p.set_unit(unit)
        p.set_description(desc)
        p.set_postfix(postfix)
        p.n, p.total, p._t0 = n, total, t0           # the enclosing count goes on
        p._phase = outer
        if p._bar is not None:
            p._bar.reset(total=p.total)
            p._bar.update(p.n)


class _Phase:
    def __init__(self, progress, name, t0, total):
        self.progress, self.name, self.t0, self.total = progress, name, t0, total

    def update(self, n: int = 1) -> None:
        self.progress.update(n)

    def note(self, text: str) -> None:
        self.progress.set_postfix(text)


class progress_reporting:
    """``with progress_reporting("distributed rankrls", quiet=...):`` shows the :mod:`streamrank._phases`
    begun inside (a command without a row count of its own: the pipelines) on stderr, as the CLI's
    commands do."""

    def __init__(self, desc: str, *, quiet: bool = False):
        self.progress = Progress(None, unit="steps", desc=desc, quiet=quiet, final_line=False)
        self._ctx = None

    def __enter__(self):
        from .._phases import reporting

        self._ctx = reporting(PhaseReporter(self.progress))
        self._ctx.__enter__()
        return self.progress

    def __exit__(self, *exc):
        try:
            self._ctx.__exit__(*exc)
        finally:
            self.progress.close(ok=exc[0] is None)
        return False
