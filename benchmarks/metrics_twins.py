"""The metrics kernels' plain-Python twins: their time against the estimate they are charged, and the kernels'.

``streamrank.metrics._twin_calls.run`` runs a metrics kernel's twin (its own
source as plain Python, no numba) while the twin's *estimated* seconds fit
the process's budget (issue 22).  An estimate must not be below the twin's
real time, or a process spends more than the budget before it takes the
kernel.  For each metric and input shape this prints the twin's time (best
of ``--repeat``), its estimate, their ratio (``twin/est``, must stay below
1), the warm kernel's time and ``twin/kernel``, and whether the values are
bit-identical.

    python benchmarks/metrics_twins.py            # twelve shapes, up to 8,000 rows
    python benchmarks/metrics_twins.py --smoke    # three small shapes, seconds
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def shapes(smoke: bool, seed: int = 0) -> dict:
    """name -> (y, s, gp): group layouts from one big group to many one-row groups, and tied scores."""
    rng = np.random.default_rng(seed)

    def make(sizes, tied=False):
        sizes = np.asarray(sizes, np.int64)
        n = int(sizes.sum())
        s = np.round(rng.normal(size=n)) if tied else rng.normal(size=n)
        return rng.integers(0, 3, n).astype(np.float64), s, np.concatenate(([0], np.cumsum(sizes)))

    mq_like = rng.integers(6, 40, 150)       # MQ2008 Fold1 test: 2,874 rows in 156 groups of 6-119
    mq_like[:3] = (119, 80, 60)
    if smoke:
        return {"20 x 10": make([10] * 20), "one of 200": make([200]), "20 x 10 tied": make([10] * 20, tied=True)}
    return {"MQ2008-like": make(mq_like), "one of 500": make([500]), "one of 3000": make([3000]),
            "one of 8000": make([8000]), "1000 x 3": make([3] * 1000), "3000 x 1": make([1] * 3000),
            "300 x 10": make([10] * 300), "100 x 30": make([30] * 100), "40 x 100": make([100] * 40),
            "40 mixed 1-200": make(rng.integers(1, 200, 40)), "100 x 30 tied": make([30] * 100, tied=True),
            "MQ2008-like tied": make(mq_like, tied=True)}


def calls(y, s, gp):
    """name -> a function running the metric's call site (what ``run`` is handed)."""
    from streamrank.metrics import _kernels
    from streamrank.metrics._checks import trec_scores
    from streamrank.metrics._evaluator import per_group_values
    from streamrank.metrics._pairs import _auc_1d

    ids = np.array([f"doc-{i % 97:05d}-{i}" for i in range(len(y))])
    out = {f"{kind}@{ks}": (lambda kind=kind, ks=ks: per_group_values(kind, y, s, gp, ks))
           for kind, ks in (("ndcg", [10]), ("ndcg", [1, 3, 5, 10]), ("map", [0]), ("err", [10]),
                            ("precision", [10]), ("rr", [0]), ("disagreement", [0]))}
    out["trec order"] = lambda: trec_scores(s, gp, ids)
    if np.any(y > 0) and not np.all(y > 0):
        out["auc (one group)"] = lambda: _auc_1d(y, s)
    out["stable order"] = lambda: _kernels._stable_order(s, 0, len(s), -1.0)
    return out


def _timed(fn, repeat):
    best, value = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t0)
    return best, value


def _same(a, b) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="three small shapes (seconds)")
    p.add_argument("--repeat", type=int, default=3, help="best of this many timings (default 3)")
    args = p.parse_args(argv)
    from streamrank.metrics import _twin_calls

    estimates: list = []
    mode = [True]
    saved = _twin_calls.numba_ready, _twin_calls.use_twin
    _twin_calls.numba_ready = lambda: False                       # every call asks for its estimate ...
    _twin_calls.use_twin = lambda est: (estimates.append(est), mode[0])[1]      # ... and takes the mode's path
    rows, worst, failed = [], 0.0, False
    try:
        for shape, (y, s, gp) in shapes(args.smoke).items():
            for name, fn in calls(y, s, gp).items():
                mode[0] = False
                fn()                                               # compile or load the kernel
                t_kernel, v_kernel = _timed(fn, args.repeat)
                mode[0] = True
                estimates.clear()
                t_twin, v_twin = _timed(fn, args.repeat)
                est = sum(estimates) / args.repeat
                same = _same(v_twin, v_kernel)
                failed |= not same
                worst = max(worst, t_twin / est)
                rows.append((shape, name, len(y), len(gp) - 1, t_twin, est, t_kernel, same))
    finally:
        _twin_calls.numba_ready, _twin_calls.use_twin = saved
    print(f"{'shape':18s} {'call':22s} {'rows':>5s} {'groups':>6s} {'twin ms':>8s} {'est ms':>7s} {'twin/est':>8s} "
          f"{'kernel ms':>9s} {'twin/kernel':>11s}  identical")
    for shape, name, n, g, tt, est, tk, same in rows:
        print(f"{shape:18s} {name:22s} {n:5d} {g:6d} {tt * 1e3:8.2f} {est * 1e3:7.2f} {tt / est:8.2f} "
              f"{tk * 1e3:9.3f} {tt / tk:11.0f}  {'yes' if same else 'NO: FAILED'}")
    print(f"largest twin/estimate: {worst:.2f} (an estimate below the twin's time shows as > 1)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
