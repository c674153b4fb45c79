"""The main job: ``make demo`` / ``python -m streamrank.demo``.

Writes a synthetic LETOR-like training store (default 1,000,000 rows) and a
test store drawn from the same hidden model to a local zarr directory, streams
the training store through every learner streamrank has, and prints one table:
NDCG@10 and disagreement error on the test store, training time, rows/s and
peak resident memory.  Each learner is first run on a small in-memory sample,
so that numba's compiling (paid once per kernel, then cached on disk) is
reported in its own column and not in the training time.  The sparse bilinear SGD ranker learns from (q, d+, d−)
tuples rather than scored groups, so it runs on a planted-W tuple store and
reports tuple error instead.

No server and no cluster: everything is local files under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ._defaults import DEFAULT_BLOCK_ROWS

__all__ = ["main"]


def _fmt_bytes(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _store_matches(path: Path, spec: dict) -> bool:
    marker = path / "demo_spec.json"
    return marker.exists() and json.loads(marker.read_text()) == spec


def _write_group_store(path: Path, *, n_rows, n_features, seed, nonlinear, chunk_rows):
    import streamrank as sr
    from streamrank.datasets.synthetic import letor_like_chunks

    spec = dict(kind="groups", n_rows=n_rows, n_features=n_features, seed=seed, nonlinear=nonlinear,
                version=sr.__version__)
    if _store_matches(path, spec):
        return sr.GroupStore.open(path), 0.0
    t0 = time.perf_counter()
    store = sr.GroupStore.create(path, n_features, overwrite=True)
    for i, (X, y, qid) in enumerate(letor_like_chunks(
            n_rows, n_features, nonlinear=nonlinear, random_state=seed, chunk_rows=chunk_rows)):
        store.append(X, y, qid, batch_id=f"chunk-{i}")
    (path / "demo_spec.json").write_text(json.dumps(spec))
    return sr.GroupStore.open(path), time.perf_counter() - t0


def _learners(args):
    """(name, factory, how) for every learner; ``how`` is 'groups' or 'tuples'."""
    import streamrank as sr

    alphas = 2.0 ** np.arange(-5, 16, 2)
    out = [
        ("RankRLS primal (5-fold CV over 11 λ)",
         lambda: sr.RankRLS(solver="primal"), "cv", dict(alphas=alphas)),
        ("RankRLS conjugate gradient",
         lambda: sr.RankRLS(alpha=float(2**5), solver="cg", tol=1e-6, max_iter=60), "fit", {}),
        (f"sparse KernelRankRLS rbf r={args.n_basis}",
         lambda: sr.KernelRankRLS(kernel="rbf", gamma=1.0 / (2 * args.features), alpha=1.0,
                                  n_basis=args.n_basis, random_state=0), "fit", {}),
        ("PairwiseSGDRanker hinge",
         lambda: sr.PairwiseSGDRanker(eta0=0.05, l1=0.0, l2=1e-6, loss="hinge"), "pairs",
         dict(n_pairs=args.pairs)),
    ]
    return out


def _fit(model, how, extra, source, n_pairs=None):
    if how == "cv":
        model.cross_validate(source, extra["alphas"], folds=5, scoring="squared")
    elif how == "pairs":
        model.fit(source, n_pairs=n_pairs or extra["n_pairs"])
    else:
        model.fit(source)
    return model


def _warm_up(factory, how, extra, n_features) -> float:
    """Seconds of a first fit and evaluation on a small in-memory sample: numba compiles (or loads from its
    cache) the learner's and the metrics' kernels here, so the timed fit measures training alone."""
    import streamrank as sr
    from streamrank.datasets.synthetic import make_letor_like

    X, y, qid = make_letor_like(n_rows=3_000, n_features=n_features, random_state=1)
    t0 = time.perf_counter()
    model = _fit(factory(), how, extra, sr.as_source(X, y, qid), n_pairs=2_000)
    sr.metrics.evaluate(sr.as_source(X, y, qid), model, k=10)
    return time.perf_counter() - t0


def _run_group_learner(name, factory, how, extra, train, test, max_rows):
    import streamrank as sr
    from streamrank._memory import PeakRSS

    try:
        first_s = _warm_up(factory, how, extra, train.n_features)
    except Exception:            # a sample too small for the options (--n-basis above 3,000): the real fit decides
        first_s = float("nan")
    model = factory()
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        _fit(model, how, extra, train)
        fit_s = time.perf_counter() - t0
    res = sr.metrics.evaluate(test, model, k=10, max_rows=max_rows)
    return dict(learner=name, fit_s=fit_s, rows_per_s=train.n_rows / fit_s, peak=mem.peak, first_s=first_s,
                ndcg=float(res["ndcg@10"].value) if "ndcg@10" in res else float(res["ndcg"].value),
                disagreement=float(res["disagreement"].value))


def _run_bilinear(args, out: Path):
    """SparseSGDRanker on tuples from a planted sparse W; reports tuple error."""
    import streamrank as sr
    from streamrank._memory import PeakRSS
    from streamrank.datasets.synthetic import planted_bilinear

    data = planted_bilinear(n_features=args.bilinear_dim, n_train=args.tuples, n_test=20_000,
                            random_state=args.seed)
    def make():
        return sr.SparseSGDRanker(eta0=3.0, l1=1e-4, shrink_every=100, init="identity", auto_refit=True,
                                  random_state=0)

    t0 = time.perf_counter()                     # the first call compiles (or loads) the kernels
    make().fit(data.train, n_steps=min(args.tuples, 2_000))
    first_s = time.perf_counter() - t0
    model = make()
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        model.fit(data.train, n_steps=args.tuples)
        fit_s = time.perf_counter() - t0
    Qt, Dp, Dn = data.test
    err = sr.metrics.tuple_error(model.predict(Qt, Dp), model.predict(Qt, Dn))
    base = sr.metrics.tuple_error(np.asarray(Qt.multiply(Dp).sum(axis=1)).ravel(),
                                  np.asarray(Qt.multiply(Dn).sum(axis=1)).ravel())
    return dict(learner=f"SparseSGDRanker bilinear D={args.bilinear_dim} (+refit)", fit_s=fit_s,
                rows_per_s=args.tuples / fit_s, peak=mem.peak, first_s=first_s,
                extra=f"tuple error {err:.3f} (identity W: {base:.3f}), density {model.density_:.4f}")


def _print_table(rows, n_rows):
    head = (f"{'learner':44s} {'NDCG@10':>8s} {'disagr.':>8s} {'fit s':>8s} {'rows/s':>11s} {'peak RSS':>10s} "
            f"{'first s':>8s}")
    print()
    print(f"streamrank demo: {n_rows:,} training rows streamed from disk")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['learner']:44s} failed: {r['error']}")
        elif "extra" in r:
            print(f"{r['learner']:44s} {'-':>8s} {'-':>8s} {r['fit_s']:8.2f} {r['rows_per_s']:11,.0f} "
                  f"{_fmt_bytes(r['peak']):>10s} {r['first_s']:8.2f}   {r['extra']}  (tuples/s)")
        else:
            print(f"{r['learner']:44s} {r['ndcg']:8.4f} {r['disagreement']:8.4f} {r['fit_s']:8.2f} "
                  f"{r['rows_per_s']:11,.0f} {_fmt_bytes(r['peak']):>10s} {r['first_s']:8.2f}")
    print()
    print("NDCG@10: on the test store, higher is better.  disagr.: disagreement error, the fraction of a query's")
    print("pairs of documents with different labels that the model puts the wrong way round (1 - C-index), lower")
    print("is better.  fit s: training on the store, compiling excluded; first s: the first fit and evaluation on")
    print("a 3,000-row sample, in which numba compiles the kernels (or loads them from its cache on later runs).")


def _next_steps(out: Path) -> None:
    print()
    print(f"Next: the stores are in {out}/ (train.zarr, test.zarr; a later run with the same options reuses them).")
    print(f"  streamrank fit --store {out}/train.zarr --model demo-model.zarr --learner rankrls "
          "--alphas 2^-5:2^15 --cv 5")
    print(f"  streamrank evaluate --model demo-model.zarr --store {out}/test.zarr --metrics ndcg@10,disagreement,map")
    print("(streamrank is .venv/bin/streamrank in a clone); the guide: docs/getting-started.md, or the built site.")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m streamrank.demo",
        description="Write a synthetic LETOR-like store and stream it through every streamrank learner.",
        epilog="Example: python -m streamrank.demo --rows 200000 --out /tmp/demo",
    )
    p.add_argument("--rows", type=int, default=1_000_000, help="training rows (default 1,000,000)")
    p.add_argument("--test-rows", type=int, default=100_000, help="test rows (default 100,000)")
    p.add_argument("--features", type=int, default=50)
    p.add_argument("--nonlinear", action="store_true", help="nonlinear hidden model")
    p.add_argument("--out", default="demo_data", help="directory for the stores (reused when identical)")
    p.add_argument("--max-rows", type=int, default=DEFAULT_BLOCK_ROWS,
                   help=f"block budget in rows (default {DEFAULT_BLOCK_ROWS}, the library's)")
    p.add_argument("--n-basis", type=int, default=256, help="basis rows of the sparse kernel model")
    p.add_argument("--pairs", type=int, default=1_000_000, help="pairs for the pairwise SGD ranker")
    p.add_argument("--tuples", type=int, default=200_000, help="tuples for the bilinear ranker")
    p.add_argument("--bilinear-dim", type=int, default=1_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strict", action="store_true",
                   help="kept for old scripts: a failing learner always makes the demo exit 1")
    args = p.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chunk = min(args.max_rows, 200_000)
    train, t_train = _write_group_store(out / "train.zarr", n_rows=args.rows, n_features=args.features,
                                        seed=args.seed, nonlinear=args.nonlinear, chunk_rows=chunk)
    test, _ = _write_group_store(out / "test.zarr", n_rows=args.test_rows, n_features=args.features,
                                 seed=args.seed + 1, nonlinear=args.nonlinear, chunk_rows=chunk)
    if t_train:
        print(f"wrote {train.n_rows:,} rows in {train.n_groups:,} groups to {out / 'train.zarr'} "
              f"in {t_train:.1f} s ({train.n_rows / t_train:,.0f} rows/s)")
    else:
        print(f"reusing {out / 'train.zarr'} ({train.n_rows:,} rows, {train.n_groups:,} groups)")

    rows = []
    for name, factory, how, extra in _learners(args):
        print(f"  {name} ...", flush=True)
        try:
            rows.append(_run_group_learner(name, factory, how, extra, train, test, args.max_rows))
        except Exception as exc:  # the demo reports every learner, even a failing one
            rows.append(dict(learner=name, error=f"{type(exc).__name__}: {exc}"))
    print("  SparseSGDRanker ...", flush=True)
    try:
        rows.append(_run_bilinear(args, out))
    except Exception as exc:
        rows.append(dict(learner="SparseSGDRanker bilinear", error=f"{type(exc).__name__}: {exc}"))
    _print_table(rows, train.n_rows)
    failed = [r for r in rows if "error" in r]
    if failed:
        print(f"\n{len(failed)} learner(s) failed: " + ", ".join(r["learner"] for r in failed), file=sys.stderr)
        return 1
    _next_steps(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
