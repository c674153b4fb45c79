"""``streamrank warmup``: compile streamrank's numba kernels into the cache once, before the first real use.

The first use of a kernel with a new argument signature compiles it (seconds each; a cold ``evaluate`` is
mostly compiling), and ``cache=True`` writes the result to numba's cache (``NUMBA_CACHE_DIR``, else beside the
installed package: see :mod:`streamrank._numba`), where every later process loads it in milliseconds.  A CI
job, a container image build or a fresh install can pay that once, up front, with::

    streamrank warmup            # one worker process per core
    streamrank warmup --jobs 1   # in this process, one part after the other

The parts run the public API on tiny synthetic data with the layouts streamrank meets in use: stores
(float32 dense and CSR, written, verified and read with the read checks), LETOR text, in-memory float64 arrays
and CSR matrices, every learner (RankRLS primal/cg with cross-validation, exact and sparse KernelRankRLS
with each named kernel, the two SGD rankers) and every metric.  What they compile is exactly what those calls
compile; a signature nobody meets here (say int or read-only inputs) still compiles on first use.  Results are
thrown away; nothing but the numba cache is written outside a temporary directory.
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from ._common import UsageError

__all__ = ["PARTS", "add_parser", "cmd_warmup", "run_part", "serve"]


def _letor(n_rows=240, n_features=8, seed=0):
    from streamrank.datasets.synthetic import make_letor_like

    X, y, qid = make_letor_like(n_rows, n_features, random_state=seed)
    return np.ascontiguousarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64), np.asarray(qid)


def _csr(X):
    import scipy.sparse as sp

    Xs = np.where(np.abs(X) > 0.5, X, 0.0)
    return sp.csr_matrix(Xs)


def _store(tmp, name, X, y, qid, columns=None, chunk_rows=None):
    import scipy.sparse as sp

    import streamrank as sr

    path = os.path.join(tmp, name)
    store = sr.GroupStore.create(path, X.shape[1], sparse=sp.issparse(X), chunk_rows=chunk_rows,
                                 **({"row_columns": tuple(columns)} if columns else {}))
    half = int(np.flatnonzero(qid != qid[0])[0]) if np.any(qid != qid[0]) else len(y)
    for i, part in enumerate((slice(0, half), slice(half, len(y)))):
        cols = {k: v[part] for k, v in (columns or {}).items()}
        store.append(X[part], y[part], qid[part], batch_id=f"batch-{i}", **cols)
    return sr.GroupStore.open(path)


def _letor_text(tmp, name, X, y, qid):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        for i, (yi, qi, row) in enumerate(zip(y, qid, X)):
            feats = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row) if v)
            f.write(f"{int(yi)} qid:{int(qi)} {feats} #docid = d{i}\n")
    return path


def _part_commands(tmp, run):
    """The commands on LETOR text: ingest, info --verify, fit (rankrls, cg, sgd-pairwise), evaluate, predict."""
    X, y, qid = _letor()
    train, test = _letor_text(tmp, "train.txt", X, y, qid), _letor_text(tmp, "test.txt", X[:96], y[:96], qid[:96])
    s, t = os.path.join(tmp, "train.zarr"), os.path.join(tmp, "test.zarr")
    runs = [["ingest", train, "--store", s, "--docids"], ["ingest", test, "--store", t], ["info", s, "--verify"]]
    for learner in ("rankrls", "cg", "sgd-pairwise"):
        m = os.path.join(tmp, f"{learner}.zarr")
        runs += [["fit", "--store", s, "--model", m, "--learner", learner],
                 ["evaluate", "--model", m, "--store", t], ["evaluate", "--model", m, "--data", test],
                 ["predict", "--model", m, "--store", s, "--run", os.path.join(tmp, f"{learner}.run")]]
    runs.append(["cv", "--store", s, "--learner", "rankrls", "--alphas", "0.1,1,10", "--folds", "3"])
    for argv in runs:
        with contextlib.redirect_stdout(io.StringIO()):    # results of tiny data: only the compiling matters
            rc = run([*argv, "--quiet"])
        if rc:
            raise RuntimeError(f"streamrank {' '.join(argv)} exited {rc}")


def _part_stores(tmp, run):
    """Stores: write (dense, CSR, row columns), verify, read blocks with the read checks; LETOR text; tuples."""
    import streamrank as sr
    from streamrank.datasets.synthetic import write_planted_bilinear_store

    X, y, qid = _letor()
    for name, data in (("dense.zarr", X), ("csr.zarr", _csr(X))):
        store = _store(tmp, name, data, y, qid, chunk_rows=32)   # whole chunks: read checks on decoded chunks
        store.verify()
        for _ in store.blocks(max_rows=64):
            pass
    n = len(y)
    w = _store(tmp, "cols.zarr", X, y, qid, columns=dict(weight=np.ones(n), click=(y > 1).astype(np.int8),
                                                          position=np.arange(1, n + 1) % 10 + 1))
    w.verify()
    text = _letor_text(tmp, "train.txt", X, y, qid)
    sr.read_svmlight(text)
    for _ in sr.iter_svmlight(text, chunk_bytes=4096):
        pass
    tuples, _ = write_planted_bilinear_store(os.path.join(tmp, "tuples.zarr"), 300, 60, nnz=5, n_topics=4)
    tuples.verify()
    sr.SparseSGDRanker(eta0=3.0, l1=1e-4, random_state=0).fit(tuples, n_steps=200)


def _part_rankrls(tmp, run):
    """RankRLS primal and cg on a store and on float64 arrays / CSR, with CV; predictions scored by every metric."""
    import streamrank as sr

    X, y, qid = _letor()
    store = _store(tmp, "train.zarr", X, y, qid)
    csr = _csr(X)
    for source in (store, (X, y, qid), (csr, y, qid)):
        args = (source,) if not isinstance(source, tuple) else source
        m = sr.RankRLS(alpha=1.0).fit(*args)
        sr.RankRLS(solver="cg", alpha=1.0, max_iter=5).fit(*args)
        m.predict(args[0] if isinstance(source, tuple) else X)
    sr.RankRLS(ties="exclude", group_weight="query").fit(X, y, qid)
    sr.RankRLS().cross_validate(store, [0.1, 1.0], folds=3)
    sr.RankRLS(solver="cg", max_iter=5).cross_validate(store, [0.1, 1.0], folds=3)
    sr.RankRLS().fit(X, y, qid, sample_weight=np.ones_like(y))
    sr.RankRLS().fit(X, np.c_[y, -y])                       # several outputs, one global group
    sr.metrics.evaluate(store, m)


def _part_kernel(tmp, run):
    """KernelRankRLS exact and sparse (rbf, linear, poly), fitted and cross-validated."""
    import streamrank as sr

    X, y, qid = _letor(n_rows=160)
    store = _store(tmp, "train.zarr", X, y, qid)
    for kernel in ("rbf", "linear", "poly"):
        m = sr.KernelRankRLS(kernel=kernel, gamma=0.1).fit(X, y, qid)
        m.predict(X)
        s = sr.KernelRankRLS(kernel=kernel, gamma=0.1, n_basis=16).fit(store)
        s.predict(X)
    sr.KernelRankRLS(gamma=0.1).cross_validate((X, y, qid), [0.1, 1.0], folds=3)
    sr.KernelRankRLS(gamma=0.1, n_basis=16).cross_validate(store, [0.1, 1.0], folds=3)


def _part_sgd(tmp, run):
    """PairwiseSGDRanker (store, arrays, CSR, weights) and SparseSGDRanker (tuples, CSR and dense partial_fit)."""
    import streamrank as sr
    from streamrank.datasets.synthetic import planted_bilinear

    X, y, qid = _letor()
    store = _store(tmp, "train.zarr", X, y, qid)
    for loss in ("hinge", "logistic"):
        sr.PairwiseSGDRanker(loss=loss).fit(store, n_pairs=200).predict(X)
    sr.PairwiseSGDRanker().fit(X, y, qid, n_pairs=200)
    sr.PairwiseSGDRanker().fit(X, y, qid, sample_weight=np.ones_like(y), n_pairs=200)
    sr.PairwiseSGDRanker().partial_fit(X, y, qid)
    sr.PairwiseSGDRanker().fit(_csr(X), y, qid, n_pairs=200).predict(_csr(X))
    data = planted_bilinear(n_features=60, n_train=300, n_test=50, nnz=5, n_topics=4, random_state=0)
    m = sr.SparseSGDRanker(eta0=3.0, l1=1e-4, random_state=0).fit(data.train, n_steps=300)
    Qt, Dp, Dn = data.test
    m.predict(Qt, Dp)
    sr.SparseSGDRanker(init="zeros").partial_fit(Qt, Dp, Dn)
    sr.SparseSGDRanker(init="zeros").partial_fit(Qt.toarray(), Dp.toarray(), Dn.toarray())


DESCRIPTION = """\
Compile streamrank's numba kernels into numba's cache now, so that the first
ingest, fit or evaluate (a cron job's, a container's, a CI run's) loads them
instead of compiling them: a cold first command spends most of its time
compiling.  Each part runs the library on tiny synthetic data in a temporary
directory and keeps nothing but the cache (NUMBA_CACHE_DIR, else beside the
installed package).  Input layouts the parts do not use still compile on
first use."""

#: name -> (what it runs, its share of the work: parts start biggest first, so N workers finish together)
PARTS = {"sgd": (_part_sgd, 4), "rankrls": (_part_rankrls, 3), "commands": (_part_commands, 3),
         "stores": (_part_stores, 2), "kernel": (_part_kernel, 2)}


def _kernel_counts() -> tuple[int, int]:
    """(signatures compiled, signatures loaded from the cache) by this process's streamrank kernels."""
    from numba.core.registry import CPUDispatcher

    from .._numba import LazyKernel

    seen, compiled, loaded = set(), 0, 0
    for name, mod in list(sys.modules.items()):
        if not name.startswith("streamrank") or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if isinstance(obj, LazyKernel):
                obj = obj._dispatcher          # made only if it ran
            if isinstance(obj, CPUDispatcher) and id(obj) not in seen:
                seen.add(id(obj))
                compiled += sum(obj.stats.cache_misses.values())
                loaded += sum(obj.stats.cache_hits.values())
    return compiled, loaded


def run_part(name: str, run) -> None:
    """Run one part in this process; ``run(argv)`` runs a command line (the CLI's ``main``, which the parts that
    drive commands call: passed in, since the CLI's parser is what imports this module)."""
    import warnings

    fn, _ = PARTS[name]
    with tempfile.TemporaryDirectory(prefix=f"streamrank-warmup-{name}-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tiny data: cg stops early, CV folds are small; only compiling matters
        fn(tmp, run)


def _parts_type(text: str) -> list[str]:
    import argparse

    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in PARTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown part {', '.join(unknown) or repr(text)}: the parts are "
                                         + ", ".join(PARTS))
    return names


def add_parser(sub, common, run) -> None:
    """The ``warmup`` command's parser (``common`` adds -q/-v; ``run``: the CLI's ``main``, see :func:`run_part`)."""
    import argparse
    import functools

    parts = "\n".join(f"  {n:8s} {PARTS[n][0].__doc__}" for n in PARTS)
    p = sub.add_parser("warmup", help="compile the kernels into numba's cache once, ahead of the first real use",
                       description=DESCRIPTION, epilog=f"parts:\n{parts}\n\nexamples:\n  streamrank warmup\n"
                                                       "  streamrank warmup --jobs 1 --parts rankrls,stores",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="worker processes (default: one per core, at most one per part; 1: in this process)")
    p.add_argument("--parts", type=_parts_type, default=None, metavar="P,P", help="only these parts (default all)")
    common(p)
    p.set_defaults(func=functools.partial(cmd_warmup, run=run))


def _run_counted(name: str, run) -> dict:
    """Run one part here: its time, and the signatures it compiled and loaded (this process's counts move)."""
    before, t = _kernel_counts(), time.perf_counter()
    error = None
    try:
        run_part(name, run)
    except Exception as exc:  # noqa: BLE001 - reported with the part's name; the other parts still run
        error = f"{type(exc).__name__}: {exc}"
    after = _kernel_counts()
    return dict(name=name, seconds=time.perf_counter() - t, compiled=after[0] - before[0],
                loaded=after[1] - before[1], error=error)


def serve(run) -> None:
    """A worker process of :func:`cmd_warmup`: runs the parts named on stdin (one a line), one result line each
    (``run``: see :func:`run_part`)."""
    import json

    for line in sys.stdin:
        if not line.strip():
            break
        print("WARMUP=" + json.dumps(_run_counted(line.strip(), run)), flush=True)


def _in_workers(names: list[str], jobs: int):
    """Yield each part's result as worker processes finish it; a free worker takes the biggest part left."""
    import json
    import selectors

    code = "from streamrank.cli._app import main; from streamrank.cli._warmup import serve; serve(main)"
    sel = selectors.DefaultSelector()
    pending = list(names)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, bufsize=1) for _ in range(jobs)]
    try:
        for proc in procs:
            proc.stdin.write(pending.pop(0) + "\n")
            sel.register(proc.stdout, selectors.EVENT_READ, proc)
        busy = len(procs)
        while busy:
            for key, _ in sel.select():
                proc = key.data
                line = proc.stdout.readline()
                if not line:                               # the worker died: its part is lost
                    sel.unregister(proc.stdout)
                    busy -= 1
                    yield dict(name="?", seconds=0.0, compiled=0, loaded=0,
                               error=f"a worker process exited ({proc.wait()})")
                    continue
                if not line.startswith("WARMUP="):
                    continue                               # something a part printed
                yield json.loads(line[len("WARMUP="):])
                if pending:
                    proc.stdin.write(pending.pop(0) + "\n")
                else:
                    proc.stdin.close()
                    sel.unregister(proc.stdout)
                    busy -= 1
    finally:
        for proc in procs:
            if proc.stdin and not proc.stdin.closed:
                proc.stdin.close()
            proc.wait()
            proc.stdout.close()
        sel.close()


def cmd_warmup(args, run) -> int:
    if args.jobs is not None and args.jobs < 1:     # a bad option: exit 2, as for every command
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    names = sorted(args.parts or PARTS, key=lambda n: -PARTS[n][1])
    jobs = min(len(names), args.jobs if args.jobs is not None else (os.cpu_count() or 1))
    t0 = time.perf_counter()
    results = (_run_counted(n, run) for n in names) if jobs == 1 else _in_workers(names, jobs)
    failed = []
    for r in results:
        if r["error"]:
            failed.append(r["name"])
        if not args.quiet:
            print(f"warmup {r['name']}: {r['seconds']:.1f} s, {r['compiled']} signatures compiled, "
                  f"{r['loaded']} loaded from the cache" + (f"; failed: {r['error']}" if r["error"] else ""),
                  file=sys.stderr, flush=True)
    if not args.quiet:
        print(f"warmup: {len(names)} parts in {time.perf_counter() - t0:.1f} s in {jobs} "
              f"process{'es' if jobs > 1 else ''}; numba cache: {_cache_place()}", file=sys.stderr)
    if failed:
        raise RuntimeError(f"warmup part{'s' if len(failed) > 1 else ''} {', '.join(failed)} failed (see above)")
    return 0


def _cache_place() -> str:
    return os.environ.get("NUMBA_CACHE_DIR") or "beside the installed package (__pycache__), else ~/.cache/numba"
