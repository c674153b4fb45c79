"""Helpers shared by the peer and reproduction benchmarks (issue 8).

* :func:`environment` — machine, CPU, library versions and the git commit,
  printed at the top of every table so a figure can be traced to its run;
* :func:`measure` — wall time and peak RSS of one call, either in this
  process (peak above the RSS at entry, sampled) or in a fresh ``spawn``
  subprocess (lifetime peak RSS of a process that did nothing else — the
  honest figure when several learners are compared);
* :func:`print_table` — a fixed-width table of dicts.

Not part of the streamrank package: benchmarks only.
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import platform
import resource
import subprocess
import sys
import time
import traceback
from pathlib import Path

__all__ = ["environment", "measure", "print_table", "fmt_mib", "peer_available", "PeerMissing"]

ROOT = Path(__file__).resolve().parents[1]


class PeerMissing(RuntimeError):
    """A peer library (xgboost, lightgbm, scikit-learn) is not installed."""


def peer_available(name: str) -> bool:
    try:
        importlib.import_module(name)
        return True
    except Exception:
        return False


def _version(mod: str) -> str:
    try:
        m = importlib.import_module(mod)
        return str(getattr(m, "__version__", "?"))
    except Exception:
        return "not installed"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _mem_total() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "?"


def environment(peers=("xgboost", "lightgbm", "sklearn")) -> dict:
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or "?"
    except Exception:
        commit = "?"
    env = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores ({_cpu()}), {_mem_total()} RAM",
        "python": platform.python_version(),
        "streamrank": _version("streamrank") + f" (git {commit})",
        "numpy": _version("numpy"), "scipy": _version("scipy"), "numba": _version("numba"),
    }
    for p in peers:
        env[p] = _version(p)
    return env


def print_environment(env: dict) -> None:
    print("; ".join(f"{k} {v}" for k, v in env.items()))


def fmt_mib(n) -> str:
    if n is None:
        return "-"
    return f"{n / 2**20:,.0f} MiB"


def _child(q, modname, fname, args, kwargs):
    try:
        mod = importlib.import_module(modname)
        fn = getattr(mod, fname)
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        wall = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        q.put(("ok", out, wall, peak))
    except BaseException as exc:  # report to the parent, never hang it
        q.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}", 0.0, 0))


def measure(fn, *args, isolate: bool = False, **kwargs):
    """Run ``fn(*args, **kwargs)``; return ``(result, wall seconds, peak RSS bytes)``.

    ``isolate=False``: in this process; peak RSS is the sampled peak *above*
    the RSS at entry (what the call added).  ``isolate=True``: in a fresh
    spawned interpreter; peak RSS is that process's lifetime maximum
    (interpreter + imports + data + model), so learners are compared on equal
    terms.  ``fn`` must be a module-level function and its arguments plain
    data (paths, numbers, dicts).  The result of ``fn`` must be picklable
    data (a dict of numbers) — it is passed back through a multiprocessing
    queue, the only use of pickle, between two copies of this script.
    """
    if not isolate:
        from streamrank._memory import PeakRSS

        with PeakRSS() as mem:
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            wall = time.perf_counter() - t0
        return out, wall, mem.delta
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    modname = fn.__module__
    if modname == "__main__":
        modname = Path(sys.modules["__main__"].__file__).stem
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    p = ctx.Process(target=_child, args=(q, modname, fn.__name__, args, kwargs))
    p.start()
    status, out, wall, peak = q.get()
    p.join()
    if status != "ok":
        raise RuntimeError(f"isolated run of {fn.__name__} failed: {out}")
    return out, wall, peak


def print_table(rows, columns, title=None) -> None:
    """``columns``: list of (key, header, format) — format a str.format spec or a callable."""
    cells = []
    for r in rows:
        line = []
        for key, _, fmt in columns:
            v = r.get(key)
            if v is None or (isinstance(v, float) and v != v and fmt != "s"):
                line.append("-" if v is None else "nan")
            elif callable(fmt):
                line.append(fmt(v))
            else:
                line.append(format(v, fmt))
        cells.append(line)
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h, _) in enumerate(columns)]
    if title:
        print()
        print(title)
    left = [i == 0 or fmt == "s" for i, (_, _, fmt) in enumerate(columns)]
    head = "  ".join(h.ljust(w) if lf else h.rjust(w) for (_, h, _), w, lf in zip(columns, widths, left))
    head = head.rstrip()
    print(head)
    print("-" * len(head))
    for c in cells:
        print("  ".join(v.ljust(w) if lf else v.rjust(w) for v, w, lf in zip(c, widths, left)).rstrip())
    sys.stdout.flush()
