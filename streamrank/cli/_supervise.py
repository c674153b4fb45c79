"""Ctrl-C within a second or two in every phase, native code included: the command runs in a child process.

Python handles a signal only between bytecodes.  A long LAPACK call (the
exact kernel's ``scipy.linalg.eigh`` holds the GIL for minutes) or a numba
loop therefore delays Ctrl-C until it returns — the issue measured 242 s.
So the ``streamrank`` console script (``main()`` without ``argv``) forks
once the arguments are parsed (``nightly``, ``distributed`` and ``recipe``
before their module is imported): the child runs the command as before, in its
own process group; the parent only waits.  On SIGINT / SIGTERM the parent
forwards the signal to the child, which normally stops at once (the usual
"interrupted" message, exit 130 / 143).  If the child is still running
:data:`GRACE` seconds later — inside native code — the parent kills it
(SIGKILL, with every process of its group: the workers of a LocalCluster the
command started) and reports the interruption itself.  That is safe by design:
every store append and model write in streamrank is atomic under kill -9
(appends commit by one final rename of the log, models appear whole or not
at all, leftovers of a dead process are swept by the next writer).

If the parent itself is killed (kill -9 included), a watchdog process --
forked from the parent, in the child's process group, blocked on a pipe whose
write end only the parent holds -- sees end of file and SIGKILLs the child's
group, so no orphan keeps computing (:func:`_watchdog`).

In-process callers (``main([...])``, the tests) and platforms without
``fork`` run the command directly; ``STREAMRANK_NO_FORK=1`` does too.
"""
from __future__ import annotations

import os
import signal
import sys
import time

__all__ = ["GRACE", "can_supervise", "supervised"]

#: seconds the child has to stop by itself after Ctrl-C before it is killed
GRACE = 1.0


def can_supervise() -> bool:
    import threading

    return (hasattr(os, "fork") and os.environ.get("STREAMRANK_NO_FORK", "") in ("", "0")
            and threading.current_thread() is threading.main_thread())


def _watchdog(child: int, read_end: int, write_end: int) -> int:
    """Fork the process that SIGKILLs the process group of ``child`` if this process (the parent) dies.

    It blocks reading ``read_end`` of a pipe whose write end only the parent
    holds (the child closed its copies): the parent writes one byte when the
    command is over, so end of file without that byte means the parent died
    (kill -9 included) and the watchdog kills the command's whole group -- the
    command and the processes it started -- even inside a native call that
    holds the GIL for minutes, which a thread in the child could not.  It
    joins that group, so the group exists (its id cannot be reused) as long as
    the watchdog waits, and a kill of the group takes the watchdog along.
    A fork of the already-imported parent: no interpreter start-up.
    """
    wd = os.fork()
    if wd:
        return wd
    try:
        os.close(write_end)                    # end of file once the parent's copy is closed: by its death
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)   # Ctrl-C is the parent's to forward, never the watchdog's
        try:
            os.setpgid(0, child)
        except OSError:
            pass
        try:
            word = os.read(read_end, 1)
        except OSError:
            word = b""
        if not word:                           # end of file: the parent is gone
            try:
                os.killpg(child, signal.SIGKILL)
            except OSError:
                pass
    finally:
        os._exit(0)


def supervised(run, command: str) -> int:
    """Run ``run()`` (returns an exit code) in a forked child; see the module doc.  Returns the exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    stops = {signal.SIGINT, signal.SIGTERM}
    # held back until the parent's handlers are in place: a Ctrl-C right after the fork is forwarded, never lost
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    read_end, write_end = os.pipe()                # the watchdog's: the write end stays in this process only
    pid = os.fork()
    if pid == 0:                                   # the child: the command itself
        code = 1
        try:
            os.close(read_end)
            os.close(write_end)
            os.setpgid(0, 0)                       # the terminal's Ctrl-C reaches the parent, which forwards it
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            code = int(run() or 0)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:                      # noqa: BLE001 - the child never returns into the caller
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    got: list = []

    def note(signum, frame):
        got.append(signum)

    try:
        os.setpgid(pid, pid)                       # (as the child does: whichever runs first)
    except OSError:
        pass
    try:
        watchdog = _watchdog(pid, read_end, write_end)   # a killed parent leaves no child computing
    finally:
        os.close(read_end)
    old = {s: signal.signal(s, note) for s in stops}
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    try:
        return _wait(pid, command, got)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        try:
            os.write(write_end, b"x")              # the command is over: the watchdog leaves it alone
        except OSError:                            # (killed with the child's group after the grace)
            pass
        os.close(write_end)
        try:
            os.waitpid(watchdog, 0)
        except ChildProcessError:
            pass


def _wait(pid: int, command: str, got: list) -> int:
    """Wait for the command's process ``pid``; forward a signal ``got`` receives; SIGKILL its group after the grace."""
    deadline = None
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:              # already reaped
            return 1
        if done:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code
        if got and deadline is None:
            try:
                os.kill(pid, got[0])
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + GRACE
        if deadline is not None and time.monotonic() > deadline:
            try:                               # the child's whole process group: the processes it started
                os.killpg(pid, signal.SIGKILL)   # (a LocalCluster's workers) go with it
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.waitpid(pid, 0)
            sigterm = got[0] == signal.SIGTERM
            print(f"streamrank {command}: {'terminated (SIGTERM)' if sigterm else 'interrupted'}; stopped "
                  f"inside native code after {GRACE:g} s (nothing half-written was left: stores keep their "
                  "last commit, models are written whole or not at all)", file=sys.stderr, flush=True)
            return 143 if sigterm else 130
        time.sleep(0.02)
