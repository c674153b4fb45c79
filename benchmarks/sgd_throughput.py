"""Throughput of the sparse bilinear SGD ranker vs Vowpal Wabbit's bilinear emulation.

Both learners see the same (q, d+, d-) tuples, one pass, single thread, in the
same process:

* streamrank: ``SparseSGDRanker.partial_fit`` (hinge, eta0/sqrt(t), lazy
  cumulative L1, exact unhashed W as rows in a pool); batches of
  ``--batch`` tuples already in memory as CSR;
* Vowpal Wabbit (``pip install vowpalwabbit``, the ``bench`` extra): every
  tuple is the example ``1 |q <q features> |d <d+ - d- features>`` with
  ``-q qd`` (all q x d products: the bilinear form on hashed pairs),
  ``--loss_function hinge``, ``-b`` bits of hash, ``--noconstant``, one pass.
  The example strings are built before any clock starts; VW is timed four
  ways (``--vw-variants``), each ratio printed:

  - ``text``: ``vw.learn(line)`` -- VW parses and learns (as before; the
    issue's reference figure);
  - ``parsed``: examples parsed before the clock, learning only;
  - ``sgd``: ``--sgd`` (plain SGD like streamrank's instead of VW's default
    adaptive/normalized/invariant update), parsed before the clock.  Its
    weights take 4 bytes instead of 16 (a 4 MB table at ``-b 20``, cache
    resident), which is most of why it is much faster;
  - ``driver``: VW's own C++ driver (``-d file``, ``run_parser``) on a
    page-cache-warm file -- the ``vw`` command line without process start.

  When vowpalwabbit is not installed, a plain numpy/scipy dense-W SGD step is
  the baseline instead.
* hash-table floor: one hashed read and one hashed update per product in a
  table of 16-byte slots at load 0.5 for the learner's peak number of stored
  entries (no probing, insertion or L1) -- an upper bound for any exact
  learner that keeps W in a hash table (streamrank did, up to 0.3; its rows
  are now read sequentially, which this bound does not cover), printed beside VW.

Rates are per CPU second of this process (``time.process_time``; both
learners run single-threaded in this process), because the machine these
figures were taken on is shared and wall time mostly measures the other jobs.
Reported: tuples/s, W updates/s (entries of W changed) and q x d
products per tuple; the ratio streamrank / VW.  ``--rss`` also streams 10x
more tuples and compares peak RSS (it must stay flat: memory is the model and
one batch, never the stream).

    python benchmarks/sgd_throughput.py                   # 20 Newsgroups tuples
    python benchmarks/sgd_throughput.py --smoke           # a few seconds, synthetic
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import scipy.sparse as sp


def build_parser():
    p = argparse.ArgumentParser(prog="benchmarks/sgd_throughput.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tuples", type=int, default=50_000, help="tuples timed (one pass)")
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--eta0", type=float, default=200.0)
    p.add_argument("--l1", type=float, default=1e-4)
    p.add_argument("--bits", type=int, default=20, help="VW hash bits (-b)")
    p.add_argument("--limit", type=int, default=None, help="20NG documents per split (about)")
    p.add_argument("--synthetic", action="store_true", help="random sparse vectors instead of 20NG")
    p.add_argument("--top-words", type=int, default=None,
                   help="keep each document's K largest tf-idf weights (renormalised): shorter tuples, e.g. "
                        "K=12 gives about the ~277 q x d products per example of the issue's VW figure")
    p.add_argument("--rss", action="store_true", help="also stream 10x more tuples and compare peak RSS")
    p.add_argument("--no-vw", action="store_true", help="skip Vowpal Wabbit")
    p.add_argument("--vw-variants", default="text,parsed,sgd,driver",
                   help="comma-separated VW runs: text (vw.learn(line), parse + learn), parsed (examples "
                        "parsed before the clock), sgd (--sgd, parsed), driver (VW's C++ driver on a file)")
    p.add_argument("--smoke", action="store_true", help="tiny synthetic run, a few seconds")
    return p


def load_tuples(args):
    if args.synthetic:
        rng = np.random.default_rng(0)
        n_docs, n_f = 2000, 2000
        X = sp.random(n_docs, n_f, density=0.02, random_state=rng, format="csr")
        X = sp.csr_matrix(X.multiply(1.0 / np.sqrt(X.multiply(X).sum(axis=1) + 1e-12)))
        y = rng.integers(0, 20, n_docs)
    else:
        from streamrank.datasets.newsgroups import load_newsgroups

        c = load_newsgroups(limit=args.limit)
        X, y = c.X_train.astype(np.float64), c.y_train
        if args.top_words:
            X = top_words(X, args.top_words)
    from streamrank.datasets.tuples import class_tuples

    t = class_tuples(y, y, args.tuples * (10 if args.rss else 1), same_set=True, random_state=0)
    return X, t


def top_words(X, k):
    """Each row's k largest entries, rescaled to unit norm (a short 'query' version of every document)."""
    X = sp.csr_matrix(X, copy=True)
    for r in range(X.shape[0]):
        a, b = X.indptr[r], X.indptr[r + 1]
        if b - a > k:
            row = X.data[a:b]
            row[np.argsort(row)[: b - a - k]] = 0.0
    X.eliminate_zeros()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X)


def run_streamrank(X, t, args, prebuild=True):
    """``prebuild``: slice every batch before the clock starts (else stream them: flat memory)."""
    import streamrank as sr

    m = sr.SparseSGDRanker(eta0=args.eta0, l1=args.l1, auto_refit=False)
    w = t[:16]
    sr.SparseSGDRanker().partial_fit(X[w[:, 0]], X[w[:, 1]], X[w[:, 2]])  # compile (cached)

    def gen():
        for a in range(0, len(t), args.batch):
            yield X[t[a:a + args.batch, 0]], X[t[a:a + args.batch, 1]], X[t[a:a + args.batch, 2]]

    batches = list(gen()) if prebuild else gen()
    products = 0
    t0, c0 = time.perf_counter(), time.process_time()
    peak_slots = 0
    for Q, P, N in batches:
        products += int(np.sum(np.diff(Q.indptr) * (np.diff(P.indptr) + np.diff(N.indptr))))
        m.partial_fit(Q, P, N)
        peak_slots = max(peak_slots, 2 * m._W.count)  # a hash table at load 0.5
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return dict(seconds=dt, cpu=cpu, tuples_s=len(t) / cpu, updates_s=m.n_updates_ / cpu,
                products=products / len(t), nnz=m.nnz_, mem_mb=m.memory_bytes_ / 1e6, peak_slots=peak_slots)


def _vw_line(qi, qx, dj, dx):
    q = " ".join(f"{i}:{v:.6g}" for i, v in zip(qi, qx))
    d = " ".join(f"{j}:{v:.6g}" for j, v in zip(dj, dx) if v != 0)
    return f"1 |q {q} |d {d}"


def _vw_lines(X, t):
    lines = []
    for a, b, c in t:
        q = X[a]
        delta = (X[b] - X[c]).tocsr()
        lines.append(_vw_line(q.indices, q.data, delta.indices, delta.data))
    return lines


VW_VARIANTS = {
    # name: (extra VW options, how the examples reach VW)
    "text": ("", "text"),          # vw.learn(line): VW parses and learns (the default, as before)
    "parsed": ("", "parsed"),      # examples parsed before the clock: learning only
    "sgd": ("--sgd", "parsed"),    # plain SGD update (like streamrank's), parsed before the clock
    "driver": ("", "driver"),      # VW's own C++ driver reading a cache-warm file (the vw command line)
}


def run_vw(X, t, args, variant="text", lines=None):
    """VW on the same tuples; ``variant`` in VW_VARIANTS (creation of the workspace is not timed)."""
    import os
    import tempfile

    from vowpalwabbit import Workspace

    if lines is None:
        lines = _vw_lines(X, t)
    extra, how = VW_VARIANTS[variant]
    opts = f"--loss_function hinge -q qd -b {args.bits} --noconstant --quiet {extra}".strip()
    if how == "driver":
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tuples.vw")
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            with open(path, "rb") as f:  # warm the page cache: the file read is not what is measured
                f.read()
            t0, c0 = time.perf_counter(), time.process_time()
            vw = Workspace(f"{opts} -d {path}")
            vw.run_parser()
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            n = int(vw.get_weighted_examples())
            vw.finish()
        return dict(seconds=dt, cpu=cpu, tuples_s=n / cpu)
    vw = Workspace(opts)
    if how == "parsed":
        exs = [vw.parse(s) for s in lines]
        t0, c0 = time.perf_counter(), time.process_time()
        for ex in exs:
            vw.learn(ex)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        for ex in exs:
            vw.finish_example(ex)
    else:
        t0, c0 = time.perf_counter(), time.process_time()
        for s in lines:
            vw.learn(s)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    vw.finish()
    return dict(seconds=dt, cpu=cpu, tuples_s=len(lines) / cpu)


def run_floor(X, t, args, slots, limit=None):
    """Floor of an exact hash-table W of ``slots`` 16-byte slots, same tuples.

    Per tuple: the margin reads ``tab[h(i, j)]`` once per q x (d+ - d-)
    product, the update adds to it once more (every tuple, like a loss that is
    always positive) -- one hashed read and one hashed read-modify-write per
    product, with the same prefetching as the learner, but no probing, no
    insertion, no L1.  No exact hash-table learner of this size can beat it:
    it says how much of the gap to VW is memory traffic.
    """
    from streamrank._numba import jit
    from streamrank.sgd._prefetch import prefetch as _prefetch
    from streamrank.sgd._sparse_row_kernels import merge_diff as _merge_diff

    gold = np.uint64(0x9E3779B97F4A7C15)

    @jit
    def floor_steps(tab, qp, qi, qx, pp, pi, px, mp, mi, mx, n_cols, shift, dj, dx, slot_buf):
        total = 0.0
        for r in range(qp.shape[0] - 1):
            nd = _merge_diff(pp, pi, px, mp, mi, mx, r, dj, dx)
            s = 0.0
            m = 0
            for a in range(qp[r], qp[r + 1]):
                base = np.int64(qi[a]) * n_cols
                acc = 0.0
                for b in range(nd):
                    h = np.int64((np.uint64(base + dj[b]) * gold) >> np.uint64(shift))
                    slot_buf[m] = h
                    m += 1
                for b in range(nd):
                    acc += tab[2 * slot_buf[m - nd + b] + 1] * dx[b]
                s += qx[a] * acc
            mend = m
            m = 0
            for a in range(qp[r], qp[r + 1]):
                g = 1e-9 * qx[a]
                for b in range(nd):
                    if m + 24 < mend:
                        _prefetch(tab, 2 * slot_buf[m + 24])
                    tab[2 * slot_buf[m] + 1] += g * dx[b]
                    m += 1
            total += s
        return total

    t = t[:limit]
    Q, P, N = X[t[:, 0]], X[t[:, 1]], X[t[:, 2]]
    bits = max(4, int(np.ceil(np.log2(max(slots, 16)))))
    tab = np.zeros(2 << bits)
    nd = np.diff(P.indptr) + np.diff(N.indptr)
    dj, dx = np.empty(max(1, nd.max()), np.int64), np.empty(max(1, nd.max()))
    buf = np.empty(max(1, int((np.diff(Q.indptr) * nd).max())), np.int64)
    run = lambda k: floor_steps(tab, Q.indptr[:k + 1], Q.indices, Q.data, P.indptr, P.indices, P.data,
                                N.indptr, N.indices, N.data, X.shape[1], 64 - bits, dj, dx, buf)
    run(2)  # compile
    t0, c0 = time.perf_counter(), time.process_time()
    run(len(t))
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return dict(seconds=dt, cpu=cpu, tuples_s=len(t) / cpu, mb=tab.nbytes / 1e6)


def run_numpy_dense(X, t, args, limit=2000):
    """Plain numpy/scipy baseline: dense W, one hinge step per tuple (no L1)."""
    n_f = X.shape[1]
    W = np.eye(n_f)
    t = t[:limit]
    t0, c0 = time.perf_counter(), time.process_time()
    for k, (a, b, c) in enumerate(t, start=1):
        q = X[a]
        delta = (X[b] - X[c]).tocsr()
        margin = float(q.data @ W[np.ix_(q.indices, delta.indices)] @ delta.data)
        if 1.0 - margin > 0:
            W[np.ix_(q.indices, delta.indices)] += (args.eta0 / np.sqrt(k)) * np.outer(q.data, delta.data)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return dict(seconds=dt, cpu=cpu, tuples_s=len(t) / cpu)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.synthetic, args.tuples, args.batch = True, 3000, 1024
    from streamrank._memory import PeakRSS

    print("Note: figures taken on a 2-core machine shared with other engineers' jobs (single thread each).")
    X, t_all = load_tuples(args)
    t = t_all[:args.tuples]
    print(f"{len(t):,} tuples over {X.shape[0]:,} documents, {X.shape[1]:,} features, "
          f"{X.nnz / X.shape[0]:.0f} nonzeros per document")
    sr_res = run_streamrank(X, t, args)
    mem1 = None
    if args.rss:
        with PeakRSS() as mem1:
            run_streamrank(X, t, args, prebuild=False)
    print(f"streamrank SparseSGDRanker: {sr_res['tuples_s']:,.0f} tuples/s, {sr_res['updates_s']:,.0f} "
          f"W updates/s, {sr_res['products']:.0f} q x (d+ - d-) products per tuple, nnz(W) {sr_res['nnz']:,}, "
          f"W {sr_res['mem_mb']:.1f} MB ({sr_res['cpu']:.2f} s CPU, {sr_res['seconds']:.1f} s wall)")
    floor = run_floor(X, t, args, sr_res["peak_slots"])
    print(f"hash-table floor, one hashed read + one hashed update per product in a {floor['mb']:.0f} MB table "
          f"(the learner's peak entries at load 0.5; no probing, insertion or L1): {floor['tuples_s']:,.0f} tuples/s "
          f"(streamrank at {sr_res['tuples_s'] / floor['tuples_s']:.2f}x of it)")
    base = None
    if not args.no_vw:
        try:
            lines = _vw_lines(X, t)
            vw = {v: run_vw(X, t, args, v, lines) for v in args.vw_variants.split(",")}
        except ImportError:
            print("vowpalwabbit is not installed (pip install vowpalwabbit); numpy dense-W baseline instead")
        else:
            for v, res in vw.items():
                extra, how = VW_VARIANTS[v]
                print(f"Vowpal Wabbit -q qd hinge -b {args.bits} {extra + ' ' if extra else ''}[{how}]: "
                      f"{res['tuples_s']:,.0f} tuples/s ({res['tuples_s'] * sr_res['products']:,.0f} q x d "
                      f"products/s; {res['cpu']:.2f} s CPU, {res['seconds']:.1f} s wall)")
            for v, res in vw.items():
                print(f"ratio streamrank / VW [{v}]: {sr_res['tuples_s'] / res['tuples_s']:.2f}x tuples/s "
                      f"(target >= 3x); hash-table floor / VW [{v}]: {floor['tuples_s'] / res['tuples_s']:.2f}x")
            return _rss(args, mem1, t, t_all, sr_res, X) if args.rss else 0
    if base is None:
        base = ("numpy/scipy dense W", run_numpy_dense(X, t, args))
    name, res = base
    print(f"{name}: {res['tuples_s']:,.0f} tuples/s ({res['cpu']:.2f} s CPU, {res['seconds']:.1f} s wall)")
    print(f"ratio streamrank / {name}: {sr_res['tuples_s'] / res['tuples_s']:.2f}x tuples/s")
    return _rss(args, mem1, t, t_all, sr_res, X) if args.rss else 0


def _rss(args, mem1, t, t_all, sr_res, X):
    from streamrank._memory import PeakRSS

    with PeakRSS() as mem10:
        big = run_streamrank(X, t_all, args, prebuild=False)
    print(f"peak RSS: {len(t):,} tuples {mem1.peak / 1e6:.0f} MB, {len(t_all):,} tuples {mem10.peak / 1e6:.0f} MB "
          f"(W {sr_res['mem_mb']:.1f} -> {big['mem_mb']:.1f} MB; batches streamed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
