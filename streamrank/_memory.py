"""Peak resident memory of this process over a stretch of code (Linux /proc, no dependency)."""
from __future__ import annotations

import os
import resource
import threading
import time

__all__ = ["current_rss", "physical_memory", "PeakRSS"]


def physical_memory() -> int:
    """Bytes of physical memory of this machine (1 << 40 where the OS does not tell: no bound then)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 1 << 40


def current_rss() -> int:
    """Resident set size of this process in bytes."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: lifetime peak is the best we have
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakRSS:
    """Context manager sampling RSS in a thread; ``.peak`` and ``.delta`` in bytes.

    >>> with PeakRSS() as mem:
    ...     _ = bytearray(10_000_000)
    >>> mem.peak >= mem.start
    True
    """

    def __init__(self, interval: float = 0.01):
        self.interval = interval
        self.start = self.peak = 0
        self._stop = threading.Event()

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, current_rss())
            time.sleep(self.interval)

    def __enter__(self):
        self.start = self.peak = current_rss()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, current_rss())
        return False

    @property
    def delta(self) -> int:
        """Peak above the RSS at entry."""
        return self.peak - self.start
