"""One writer at a time on object storage: a lease held through conditional writes on a lock object.

There is no ``flock`` on S3.  The writer lock of a store at a URL is the
object ``<store>/.streamrank.lock``, a small JSON document ``{"owner",
"host", "pid", "acquired", "expires"}``:

* **acquire**: create it with ``If-None-Match: *``.  Of two writers racing,
  S3 lets exactly one create succeed; the other gets 412 and is refused with
  :class:`WriterLockHeld` naming the holder and when its lease ends.
* **an expired lease is taken over**, not waited for: when the lock object's
  ``expires`` is in the past (its holder died or was cut off for longer than
  the lease), or its holder is a process on this machine that no longer
  exists, the object is replaced with ``If-Match: <the etag just read>`` — of
  several takers again exactly one wins.  The winner is told
  (:attr:`WriterLease.took_over`) so that it **fences** the old holder before
  writing: see :mod:`streamrank.io._remote_commit` (the commit record's ETag
  changes, so the old holder's conditional commit can only fail).
* **renewal**: a daemon thread rewrites the lock with ``If-Match`` every
  third of the lease (default 60 s, ``STREAMRANK_LEASE_SECONDS``), so a live
  writer never loses it however long its append takes; a renewal that fails
  (someone took the lease over) marks the lease lost, and the writer's next
  :meth:`WriterLease.check` raises :class:`LeaseLost` before it writes
  anything else.  A stopped (SIGSTOP) or partitioned writer stops renewing
  and its lease runs out, as it must.
* **release**: delete with ``If-Match`` (a lease already taken over is left
  to its new holder).

Clocks: ``expires`` is written by the holder's clock and read by the taker's;
the machines' clocks must agree to well within the lease (NTP does).  The
lease must also exceed the longest time a request may stay in flight (the
client's timeouts): a write that a stalled holder sent before its lease
expired and that lands after a take-over is the one case conditional writes
cannot fence (S3 has no multi-object condition); the chunk checksums of the
commit record and ``verify()`` then report it instead of returning wrong rows.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import socket
import threading
import time
import uuid

from ._remote import PreconditionFailed, Remote

__all__ = ["LOCK_KEY", "WriterLease", "WriterLockHeld", "LeaseLost", "lease_seconds"]

logger = logging.getLogger("streamrank")

LOCK_KEY = ".streamrank.lock"


def lease_seconds() -> float:
    """The lease length: ``STREAMRANK_LEASE_SECONDS`` or 60 s."""
    try:
        v = float(os.environ.get("STREAMRANK_LEASE_SECONDS", "60"))
    except ValueError:
        v = 60.0
    return max(v, 0.5)


class WriterLockHeld(RuntimeError):
    """Another writer holds the store's lease (one writer at a time)."""


class LeaseLost(RuntimeError):
    """This writer's lease was taken over (it expired while this writer was stalled); nothing more is written."""


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="milliseconds")


def _pid_gone(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError, TypeError):
        return False
    return False


class WriterLease:
    """The lease on ``<remote>/.streamrank.lock``: a context manager (acquire on enter, release on exit)."""

    def __init__(self, remote: Remote, what: str = "appended to", seconds: float | None = None):
        self.remote = remote
        self.what = what
        self.seconds = float(seconds) if seconds is not None else lease_seconds()
        self.owner = uuid.uuid4().hex
        self.etag = None
        self.took_over = None         # the holder document that was taken over (None: the lock was free)
        self._lost = None
        self._stop = threading.Event()
        self._thread = None
        self._mutex = threading.Lock()

    # ------------------------------------------------------------ documents
    def _doc(self) -> bytes:
        now = time.time()
        return json.dumps({"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(),
                           "acquired": _iso(now), "expires": now + self.seconds,
                           "expires_utc": _iso(now + self.seconds)}).encode()

    @staticmethod
    def _holder(data: bytes):
        try:
            doc = json.loads(data)
            return doc if isinstance(doc, dict) else None
        except ValueError:
            return None

    def _alive(self, doc) -> bool:
        """Whether the lease in ``doc`` still binds: not expired, and not a vanished process of this machine."""
        if doc is None:
            return False          # not a lease document (S3 writes objects whole: nobody is writing it)
        exp = doc.get("expires")
        if not isinstance(exp, (int, float)) or exp <= time.time():
            return False
        if doc.get("host") == socket.gethostname() and _pid_gone(doc.get("pid")):
            return False
        return True

    # --------------------------------------------------------------- acquire
    def acquire(self) -> "WriterLease":
        r = self.remote
        try:
            self.etag = r.put_if_absent(LOCK_KEY, self._doc())
        except PreconditionFailed:
            try:
                data, etag = r.read_with_etag(LOCK_KEY)
            except FileNotFoundError:        # released in between: try once more
                return self._acquire_again()
            doc = self._holder(data)
            if self._alive(doc):
                raise WriterLockHeld(self._held_message(doc)) from None
            try:
                self.etag = r.put_if_match(LOCK_KEY, self._doc(), etag)
            except PreconditionFailed:
                raise WriterLockHeld(f"{r.url} is being {self.what} by another writer, which took over the "
                                     f"expired writer lease first ({r.display(LOCK_KEY)}); one writer at a "
                                     "time") from None
            self.took_over = doc or {}
            logger.warning("%s: took over the expired writer lease of %s (pid %s, expired %s)", r.url,
                           (doc or {}).get("host"), (doc or {}).get("pid"), (doc or {}).get("expires_utc"))
        self._start_renewal()
        return self

    def _acquire_again(self):
        try:
            self.etag = self.remote.put_if_absent(LOCK_KEY, self._doc())
        except PreconditionFailed:
            raise WriterLockHeld(f"{self.remote.url} is being {self.what} by another writer (lock "
                                 f"{self.remote.display(LOCK_KEY)} is held); one writer at a time") from None
        self._start_renewal()
        return self

    def _held_message(self, doc) -> str:
        return (f"{self.remote.url} is being {self.what} by another writer (host {doc.get('host')}, pid "
                f"{doc.get('pid')}, lease until {doc.get('expires_utc')}; lock {self.remote.display(LOCK_KEY)}); "
                "one writer at a time — retry when it is done (a dead writer's lease expires by itself)")

    # ------------------------------------------------------------- renewal
    def _start_renewal(self):
        self._thread = threading.Thread(target=self._renew_loop, name="streamrank-lease", daemon=True)
        self._thread.start()

    def _renew_loop(self):
        while not self._stop.wait(self.seconds / 3):
            try:
                self.renew()
            except LeaseLost:
                return
            except Exception as exc:       # a network error: keep trying until the lease runs out
                logger.warning("%s: renewing the writer lease failed (%s); retrying", self.remote.url, exc)

    def renew(self) -> None:
        with self._mutex:
            if self._lost:
                raise LeaseLost(self._lost)
            try:
                self.etag = self.remote.put_if_match(LOCK_KEY, self._doc(), self.etag)
            except PreconditionFailed:
                self._lost = (f"{self.remote.url}: this writer's lease was taken over by another writer (it "
                              "expired while this process was stalled); the append was abandoned before its "
                              "commit, nothing of it is visible")
                raise LeaseLost(self._lost) from None

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease was taken over (call before every write)."""
        if self._lost:
            raise LeaseLost(self._lost)

    # ------------------------------------------------------------- release
    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._mutex:
            if self._lost or self.etag is None:
                return
            try:
                self.remote.delete_if_match(LOCK_KEY, self.etag)
            except (PreconditionFailed, FileNotFoundError):
                pass                          # taken over meanwhile (and maybe released): not ours any more
            self.etag = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False
