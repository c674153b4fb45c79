"""20 Newsgroups, Table II(a) of the sparse-SGD paper: MAP, tuple error and memory of W.

Chen, Bai, Qi, Lin & Carbonell (ICDM 2010), Table II(a), 20NG after 100,000
iterations (eta0 = C = 200, T = 100, lambda for 5-10 % density)::

    method      MAP    error  Mem. (MB)
    Identity    0.185  0.323      0.2
    Diagonal    0.190  0.318      0.2
    SGD DLR     0.399  0.099    943.1
    Sparse      0.360  0.114    154.2
    Sparse-R    0.426  0.090    154.2

Rows here (all with :class:`streamrank.SparseSGDRanker`, one process):

* ``identity``  W = I (cosine similarity of the L2-normalised tf-idf rows);
* ``diagonal``  W = I, then SGD restricted to the diagonal (the refit of
  eq. 8 with Omega = diagonal);
* ``flr``       SGD from W = I with the paper's fixed rate eta = 0.01
  (§IV.A, method 2; ``learning_rate="constant"``, ``--flr-eta``) and no
  L1: "SGD FLR";
* ``dense``     SGD with the decaying rate and no L1 (``l1=0``): "SGD DLR";
* ``sparse``    Algorithm 1 (``l1`` = --l1);
* ``sparse-r``  the same model after the refit on its support (eq. 8), on the
  same tuples.

Data: :func:`streamrank.datasets.newsgroups.load_newsgroups` (10,000 most
frequent training words, tf-idf, L2-normalised) and class tuples
(:func:`streamrank.datasets.tuples.class_tuples`): q and d+ of one newsgroup,
d- of another; training tuples within the training set, test tuples with a
test query against training documents.  MAP: every test document (all
7,532, as the paper; ``--map-queries N`` for a random subset) ranks the whole
training collection, relevant = same newsgroup, ties entering together
(:func:`streamrank.metrics.mean_average_precision`).  Scores are computed in
blocks of ``--map-block`` queries, ``S = (Q_b W) D^T`` with one sparse
product and one CSR x dense product, so memory is
O(block x (n_words + n_documents)) whatever the number of queries.
Memory: ``memory_bytes_`` (the row pool W is trained in) and the CSR size
of the final W (int32 indices + float64 values + row pointers); the paper's
figure is the storage of W.

    python benchmarks/sparse_sgd_20ng.py                    # the paper's setting, all rows (tens of minutes)
    python benchmarks/sparse_sgd_20ng.py --smoke            # a few seconds
    python benchmarks/sparse_sgd_20ng.py --l1 1e-5 3e-5     # scan lambda for the density
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import scipy.sparse as sp

PAPER = {"identity": (0.185, 0.323, 0.2), "diagonal": (0.190, 0.318, 0.2), "flr": (0.258, 0.197, 1294.0),
         "dense": (0.399, 0.099, 943.1), "sparse": (0.360, 0.114, 154.2), "sparse-r": (0.426, 0.090, 154.2)}
PAPER_NAME = {"identity": "Identity", "diagonal": "Diagonal", "flr": "SGD FLR", "dense": "SGD DLR",
              "sparse": "Sparse", "sparse-r": "Sparse-R"}


def build_parser():
    p = argparse.ArgumentParser(prog="benchmarks/sparse_sgd_20ng.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--archive", default=None, help="20news-bydate.tar.gz (default: the shared copy)")
    p.add_argument("--steps", type=int, default=100_000, help="SGD iterations (default 100,000)")
    p.add_argument("--eta0", type=float, default=200.0)
    p.add_argument("--shrink-every", type=int, default=100)
    p.add_argument("--l1", type=float, nargs="+", default=[1e-5], help="lambda value(s) of the sparse rows")
    p.add_argument("--flr-eta", type=float, default=0.01, help="fixed rate of the SGD FLR row (paper: 0.01)")
    p.add_argument("--test-tuples", type=int, default=50_000)
    p.add_argument("--map-queries", type=int, default=None,
                   help="test documents used as MAP queries (default: all, as the paper)")
    p.add_argument("--map-block", type=int, default=256, help="queries scored per block (memory bound)")
    p.add_argument("--max-features", type=int, default=10_000)
    p.add_argument("--limit", type=int, default=None, help="documents per split (about; default all)")
    p.add_argument("--methods", default="identity,diagonal,flr,dense,sparse",
                   help="comma list of identity,diagonal,flr,dense,sparse (sparse includes sparse-r)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="tiny slice, a few seconds")
    return p


def csr_bytes(W) -> int:
    return int(W.nnz * (4 + 8) + (W.shape[0] + 1) * 8)


def block_scores(W, Q_block, D):
    """Dense (block, n_docs) scores ``Q_b W D^T``: one sparse product, then CSR x dense."""
    QW = Q_block if W is None else Q_block @ W
    QW = QW.toarray() if sp.issparse(QW) else np.asarray(QW)
    return np.ascontiguousarray((D @ QW.T).T)


def map_score(W, Qt, yt, D, yd, n_queries=None, rng=None, block=256):
    """MAP of test queries ranking all training documents by q^T W d (relevant: same class).

    ``n_queries=None``: every test query.  Memory: one block of scores
    (block x n_docs) and one dense ``Q_b W`` (block x n_words) at a time.
    """
    import streamrank as sr

    n = Qt.shape[0]
    if n_queries is None or n_queries >= n:
        idx = np.arange(n)
    else:
        idx = np.sort(rng.choice(n, size=n_queries, replace=False))
    D = sp.csr_matrix(D)
    aps = []
    for a in range(0, len(idx), block):
        rows = idx[a:a + block]
        S = block_scores(W, Qt[rows], D)
        rel = (yt[rows][:, None] == yd[None, :]).astype(np.float64)
        qid = np.repeat(np.arange(len(rows)), D.shape[0])
        ap = sr.metrics.mean_average_precision(rel.ravel(), S.ravel(), qid, per_query=True)
        aps.append(np.asarray(ap, dtype=np.float64))
    return float(np.mean(np.concatenate(aps))), len(idx)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import streamrank as sr
    from streamrank._memory import PeakRSS
    from streamrank.datasets.newsgroups import CITATION, DEFAULT_ARCHIVE, load_newsgroups
    from streamrank.datasets.tuples import class_tuples
    from streamrank.io.tuples import ArrayTupleSource

    if args.smoke:
        args.limit, args.steps, args.max_features = 400, 3000, 2000
        args.test_tuples, args.l1 = 2000, [1e-4]
    import datetime
    import os

    print(f"Citation: {CITATION}")
    print("command: python benchmarks/sparse_sgd_20ng.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load average "
          + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    print("Note: timings and memory taken on a 2-core machine shared with other engineers' jobs.")
    t0 = time.perf_counter()
    c = load_newsgroups(args.archive or DEFAULT_ARCHIVE, max_features=args.max_features, limit=args.limit)
    X, y, Xt, yt = c.X_train.astype(np.float64), c.y_train, c.X_test.astype(np.float64), c.y_test
    n_f = X.shape[1]
    print(f"{X.shape[0]:,} train / {Xt.shape[0]:,} test documents, {n_f:,} words, "
          f"{X.nnz / X.shape[0]:.0f} nonzeros per document (loaded in {time.perf_counter() - t0:.0f} s)")
    train = ArrayTupleSource(X, X, class_tuples(y, y, args.steps, same_set=True, random_state=args.seed))
    tt = class_tuples(yt, y, args.test_tuples, random_state=args.seed + 1)
    val = (Xt[tt[:, 0]], X[tt[:, 1]], X[tt[:, 2]])
    methods = args.methods.split(",")
    rows = []

    def record(key, name, W, model=None, fit_s=0.0, peak=0):
        if model is not None:  # the model scores: no (tuples x features) product is formed
            s_pos, s_neg = model.predict(val[0], val[1]), model.predict(val[0], val[2])
        else:  # W = I
            s_pos = np.asarray(val[0].multiply(val[1]).sum(axis=1)).ravel()
            s_neg = np.asarray(val[0].multiply(val[2]).sum(axis=1)).ravel()
        err = sr.metrics.tuple_error(s_pos, s_neg)
        t2 = time.perf_counter()
        mp, nq = map_score(W, Xt, yt, X, y, args.map_queries, np.random.default_rng(args.seed + 2),
                           block=args.map_block)
        map_s = time.perf_counter() - t2
        nnz = n_f if W is None else W.nnz
        mem_table = model.memory_bytes_ if model is not None else 0
        rows.append(dict(key=key, method=name, MAP=mp, map_queries=nq, map_s=map_s, error=err, nnz=nnz, density=nnz / n_f**2,
                         table_mb=mem_table / 1e6, csr_mb=csr_bytes(W if W is not None else sp.eye(n_f, format="csr")) / 1e6,
                         fit_s=fit_s, peak_mb=peak / 1e6))
        r = rows[-1]
        print(f"  {name:<18} MAP {mp:.3f}  error {err:.3f}  density {r['density']:.4f}  "
              f"W table {r['table_mb']:.1f} MB / CSR {r['csr_mb']:.1f} MB  fit {fit_s:.1f} s  "
              f"(MAP over {nq:,} queries in {map_s:.0f} s)", flush=True)

    base = dict(eta0=args.eta0, shrink_every=args.shrink_every, random_state=args.seed)
    fit_kw = dict(batch_size=4096, shuffle_buffer=0)
    if "identity" in methods:
        record("identity", "identity", None)
    if "diagonal" in methods:
        m = sr.SparseSGDRanker(l1=0.0, auto_refit=False, **base)
        m.init_state(n_f, n_f)  # W0 = I, then SGD on Omega = diagonal (the refit of eq. 8)
        with PeakRSS() as mem:
            t1 = time.perf_counter()
            m.refit(train, n_steps=args.steps, **fit_kw)
            fs = time.perf_counter() - t1
        record("diagonal", "diagonal", m.W_, m, fs, mem.peak)
        del m
    if "flr" in methods:  # the paper's method 2: W unconstrained, fixed eta = 0.01, no L1
        m = sr.SparseSGDRanker(l1=0.0, auto_refit=False, learning_rate="constant",
                               **{**base, "eta0": args.flr_eta})
        with PeakRSS() as mem:
            t1 = time.perf_counter()
            m.fit(train, n_steps=args.steps, **fit_kw)
            fs = time.perf_counter() - t1
        record("flr", f"dense SGD FLR eta={args.flr_eta:g}", m.W_, m, fs, mem.peak)
        del m
    if "dense" in methods:
        m = sr.SparseSGDRanker(l1=0.0, auto_refit=False, **base)
        with PeakRSS() as mem:
            t1 = time.perf_counter()
            m.fit(train, n_steps=args.steps, **fit_kw)
            fs = time.perf_counter() - t1
        record("dense", "dense SGD DLR", m.W_, m, fs, mem.peak)
        del m
    if "sparse" in methods:
        for l1 in args.l1:
            m = sr.SparseSGDRanker(l1=l1, auto_refit=False, **base)
            with PeakRSS() as mem:
                t1 = time.perf_counter()
                m.fit(train, n_steps=args.steps, **fit_kw)
                fs = time.perf_counter() - t1
            record("sparse", f"sparse l1={l1:g}", m.W_, m, fs, mem.peak)
            with PeakRSS() as mem:
                t1 = time.perf_counter()
                m.refit(train, **fit_kw)
                fr = time.perf_counter() - t1
            record("sparse-r", f"sparse-r l1={l1:g}", m.W_, m, fs + fr, mem.peak)
            del m
    print()
    nq = rows[0]["map_queries"] if rows else 0
    print(f"Table II(a), 20NG, {args.steps:,} steps; MAP over {nq:,} test queries, tuple error over "
          f"{len(tt):,} test tuples.  Paper memory = storage of W; ours = the row pool W is "
          f"trained in, and W as CSR.  Δ = ours - paper.")
    print("| method | paper MAP | MAP | Δ MAP | paper error | error | Δ error | paper MB | W pool MB | "
          "W CSR MB | density | fit s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        pm, pe, pmb = PAPER[r["key"]]
        print(f"| {r['method']} ({PAPER_NAME[r['key']]}) | {pm:.3f} | {r['MAP']:.3f} | {r['MAP'] - pm:+.3f} | "
              f"{pe:.3f} | {r['error']:.3f} | {r['error'] - pe:+.3f} | {pmb:g} | {r['table_mb']:.1f} | "
              f"{r['csr_mb']:.1f} | {r['density']:.4f} | {r['fit_s']:.1f} | {r['peak_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
