"""Real child processes without paying Python's, numpy's and streamrank's start-up again: a fork server.

The crash, kill and race tests need real processes (a real SIGKILL at swept
moments, real overlapping runs).  Started with ``python script.py`` each one
spends 1-2 CPU-s importing numpy, numba, zarr and streamrank before it does
anything the test is about.  :class:`ForkServer` is one Python process that has
imported those modules once; :meth:`ForkServer.popen` asks it to ``fork()`` a
child that runs a script, ``-m module`` or ``-c code`` exactly as ``python``
would (``sys.argv``, ``__main__``, the environment, the working directory, the
exit status of ``SystemExit`` or of an uncaught exception), with the test's own
pipes as its stdin/stdout/stderr (passed over a Unix socket, SCM_RIGHTS).

The child is a real process: it can be killed with SIGKILL or interrupted with
SIGINT at any moment, and two of them run concurrently.  Its exit status is
read by the server (its parent) and returned as :attr:`ForkedProcess.returncode`
with ``subprocess``'s convention (``-signal`` when killed by a signal).

Differences from a fresh interpreter, which the tests using it do not depend on:
the preloaded modules are already imported (their import-time state is the
server's), and ``PYTHONPATH`` in ``env`` is applied by prepending to ``sys.path``.
Nothing here runs a numba kernel in the server, so no thread pool exists at fork.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

__all__ = ["ForkServer", "ForkedProcess"]

_SERVER = r'''
import json, os, runpy, signal, socket, sys, traceback
for _m in json.loads(sys.argv[2]):
    __import__(_m)
exec(compile(sys.argv[3], "<warm-up>", "exec"), {"__name__": "__warm_up__"})
del _m
sock = socket.socket(fileno=int(sys.argv[1]))
status = {}

def reap():
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        status[pid] = os.waitstatus_to_exitcode(st)

def run_child(req):
    os.environ.clear()
    os.environ.update(req["env"])
    for p in reversed([p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]):
        sys.path.insert(0, p)
    if req["cwd"]:
        os.chdir(req["cwd"])
    argv = req["argv"]
    code = 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path.insert(0, "")
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = list(argv)
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:              # as python does: die of the SIGINT
        sys.stdout.flush(); sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    os._exit(code)

while True:
    msg, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 3)
    if not msg:
        break
    req = json.loads(msg)
    reap()
    if req["op"] == "spawn":
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sock.close()
            for target, fd in zip((0, 1, 2), fds):
                os.dup2(fd, target)
            for fd in fds:
                os.close(fd)
            run_child(req)
        for fd in fds:
            os.close(fd)
        sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    elif req["op"] == "poll":
        sock.sendall(json.dumps({"code": status.pop(req["pid"], None) if req.get("pop") else
                                 status.get(req["pid"])}).encode() + b"\n")
'''


class ForkedProcess:
    """A child of the :class:`ForkServer`; the subset of :class:`subprocess.Popen` the tests use."""

    def __init__(self, server, pid, stdin, stdout, stderr):
        self._server, self.pid = server, pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode = None

    def send_signal(self, sig):
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self):
        import signal

        self.send_signal(signal.SIGKILL)

    def poll(self):
        if self.returncode is None:
            self.returncode = self._server._poll(self.pid)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["forked", self.pid], timeout)
            time.sleep(0.005)
        return self.returncode

    def communicate(self, timeout=None):
        if self.stdin is not None:
            self.stdin.close()
        err = []
        if self.stderr is not None:           # read both pipes at once: a full stderr pipe would block the child
            import threading

            reader = threading.Thread(target=lambda: err.append(self.stderr.read()), daemon=True)
            reader.start()
        out = self.stdout.read() if self.stdout is not None else None
        if self.stderr is not None:
            reader.join()
        err = err[0] if err else None
        self.wait(timeout)
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        return out, err


class ForkServer:
    """One pre-imported Python process that forks :class:`ForkedProcess` children (see the module docstring)."""

    def __init__(self, preload=("numpy", "scipy.sparse", "scipy.linalg", "numba", "zarr", "streamrank"),
                 warm_up=""):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(theirs.fileno()), json.dumps(list(preload)), warm_up],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        theirs.close()
        self._sock = ours
        self._file = ours.makefile("rb")

    def _call(self, req, fds=()):
        if self._proc.poll() is not None:
            raise RuntimeError(f"the fork server exited with {self._proc.returncode}")
        socket.send_fds(self._sock, [json.dumps(req).encode()], list(fds))
        line = self._file.readline()
        if not line:
            raise RuntimeError(f"the fork server exited with {self._proc.wait()}")
        return json.loads(line)

    def _poll(self, pid):
        return self._call({"op": "poll", "pid": pid, "pop": True})["code"]

    def popen(self, argv, *, env=None, cwd=None, stdin=None, stdout=None, stderr=None, text=True):
        """Like ``subprocess.Popen([sys.executable, *argv], ...)``; each stream is None (inherit /dev/null for
        stdin), ``subprocess.PIPE`` or ``subprocess.DEVNULL``."""
        if isinstance(argv, (str, bytes)):
            raise TypeError("argv is a list: [script, *args], ['-m', module, *args] or ['-c', code, *args]")
        mine, theirs = [], []
        for i, how in enumerate((stdin, stdout, stderr)):
            if how == subprocess.PIPE:
                r, w = os.pipe()
                mode = ("w" if i == 0 else "r") + ("" if text else "b")
                mine.append(os.fdopen(w if i == 0 else r, mode, **({"encoding": "utf-8"} if text else {})))
                theirs.append(r if i == 0 else w)
            else:
                mine.append(None)
                theirs.append(os.dup(i) if how is None and i > 0 else os.open(os.devnull, os.O_RDWR))
        try:
            pid = self._call({"op": "spawn", "argv": [os.fspath(a) for a in argv],
                              "env": dict(os.environ if env is None else env),
                              "cwd": None if cwd is None else os.fspath(cwd)}, theirs)["pid"]
        finally:
            for fd in theirs:
                os.close(fd)
        return ForkedProcess(self, pid, *mine)

    def run(self, argv, *, timeout=None, **kwargs):
        """Like ``subprocess.run([sys.executable, *argv], capture_output=True, text=True)``."""
        p = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
        try:
            out, err = p.communicate(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def stop(self):
        self._sock.close()
        self._file.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:     # pragma: no cover
            self._proc.kill()
            self._proc.wait()
