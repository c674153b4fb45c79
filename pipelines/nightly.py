"""Nightly retraining on growing logs (DESIGN §1; issue 6).

One run = one night::

    python pipelines/nightly.py --store STORE --new DAYFILE... --models DIR \\
        [--learner rankrls|sparse-kernel|sgd-bilinear|sgd-pairwise] [--alphas GRID] [--full] [--keep N]

1. **Ingest** each DAYFILE (LETOR/svmlight text, ``.npz`` with ``X, y, qid``,
   or a zarr :class:`~streamrank.GroupStore`) into STORE with
   ``batch_id = "sha256:<content hash>"``: re-running a night never appends
   twice, and a killed append leaves the store at its last commit (the store's
   own atomic append; the next run repairs the torn tail and redoes it).
   With ``--learner sgd-bilinear`` STORE is a :class:`~streamrank.TupleStore`
   and a DAYFILE is an ``.npz`` with ``Q``, ``D``, ``tuples`` (rows local to
   the file) or a TupleStore.  ``sgd-pairwise`` uses a GroupStore like
   RankRLS.
2. **Update** the model incrementally: RankRLS keeps its statistics
   (G = XᵀLX, B = XᵀLY and the per-fold statistics of k-fold group CV) in the
   saved model; a night reads only the groups the base model has not seen
   (its ``data.groups`` count) and adds their statistics — the result equals a
   full retrain on all data (to summation order).  Sparse KernelRankRLS
   keeps its basis (drawn on the first night) and the fold statistics of
   Φ = k(X, basis) in ``statistics.npz`` beside the model, the same way.  SGD resumes from the saved
   state (``partial_fit`` on the tuples the model has not seen, step counter
   and cumulative-L1 state intact) and equals one run over all tuples.
   ``--full`` retrains from scratch.
3. **Select λ** from the fold statistics (squared ranking loss of each fold
   under the model trained without it, DESIGN §3.2 — no pass over history)
   and **validate** on a held-out slice — by default the newest day in the
   store (the last logged batch), or ``--validation STORE`` — with NDCG@10
   and disagreement (SGD: tuple error on the newest day's tuples).  The
   default slice is also in the candidate's training data (the current model
   has not seen it): use ``--validation`` for an unbiased comparison.
4. **Promote** the candidate if its NDCG@10 is not below the current model's
   by more than ``--tolerance`` (SGD: tuple error not above it by more): every version is written completely to
   ``DIR/<version>/`` (a model loadable with ``sr.load``, plus
   ``version.json``: metrics, data range, parameters, λ-path scores) before
   the ``DIR/current`` pointer file (holding the version's directory name) is
   replaced with ``os.replace`` — atomic.  ``sr.load(DIR + "/current")``
   loads the promoted model.  ``--keep N`` prunes all but the newest N
   versions (never the current one).
5. **Report**: ``DIR/reports/<time>.json``, one summary line on stdout and,
   with matplotlib (the ``plot`` extra), ``DIR/metrics.png`` over versions.

Crash safety: a run killed anywhere leaves ``current`` at the previous model
(or at the new one, once the pointer has been switched).  A version whose
pointer switch was lost is found again by its key (base version, committed
store groups, learner, grid) and promoted by the next run instead of being
trained again.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import shutil
import sys
import uuid
from pathlib import Path

import numpy as np
import scipy.sparse as sp

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import streamrank as sr  # noqa: E402
from streamrank.io.blocks import BlockSource  # noqa: E402

__all__ = ["main", "run_night", "ingest", "read_day", "content_hash", "GroupRange", "select_alpha",
           "validate", "switch_current", "current_version", "list_versions", "read_version", "prune"]

LEARNERS = ("rankrls", "sparse-kernel", "sgd-bilinear", "sgd-pairwise")
POINTER = "current"
META = "version.json"
DEFAULT_FOLDS = 5
DEFAULT_BLOCK_ROWS = 65_536


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


# ------------------------------------------------------------------ input
def content_hash(path) -> str:
    """``sha256:<hex>`` of a day's content: file bytes, or a zarr store's logged batch checksums."""
    p = Path(path)
    h = hashlib.sha256()
    if p.is_dir():
        try:
            store = sr.GroupStore.open(p)
        except Exception:
            store = None
        if store is not None:
            h.update(json.dumps([(e["rows"], e["groups"], e["checksum"]) for e in store.batches]).encode())
        else:
            for f in sorted(q for q in p.rglob("*") if q.is_file()):
                h.update(str(f.relative_to(p)).encode())
                with open(f, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
    else:
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return "sha256:" + h.hexdigest()


def read_day(path, *, n_features=None, sparse=False):
    """One day's ``(X, y, qid)``: ``.npz`` (``X``, ``y``, ``qid``), a GroupStore, or svmlight/LETOR text.

    A day is read into memory (days are small next to the history in the store).
    """
    p = Path(path)
    if p.is_dir():
        store = sr.GroupStore.open(p)
        from streamrank.io.blocks import vstack_X

        bl = list(store.blocks(max_rows=max(store.n_rows, 1), prefetch=False)) if store.n_rows else []
        if not bl:
            raise ValueError(f"{p}: the day's store is empty")
        X = vstack_X([b.X for b in bl])
        y = np.concatenate([b.y for b in bl])
        qid = np.concatenate([b.row_qid() for b in bl])
    elif p.suffix == ".npz":
        with np.load(p, allow_pickle=False) as z:
            missing = [k for k in ("X", "y", "qid") if k not in z.files]
            if missing:
                raise ValueError(f"{p}: .npz needs arrays X, y, qid; missing {missing}")
            X, y, qid = z["X"], z["y"], z["qid"]
    else:
        from streamrank.io.svmlight import read_svmlight

        X, y, qid = read_svmlight(str(p), n_features=n_features, dense=not sparse)
        if qid is None:
            raise ValueError(f"{p}: the day file has no qid: fields; nightly logs need query ids")
    if sparse and not sp.issparse(X):
        X = sp.csr_matrix(X)
    elif not sparse and sp.issparse(X):
        X = X.toarray()
    return X, y, qid


def ingest(store_path, files, *, sparse=False):
    """Append each day file to the store (creating it from the first one); idempotent by content hash.

    Returns one dict per file: ``batch_id``, ``file``, ``appended`` (False:
    already in the store), ``rows`` and ``groups`` ranges of the batch.
    """
    def add(store, f, bid):
        n_feat = store.n_features if store is not None else None
        X, y, qid = read_day(f, n_features=n_feat, sparse=store.sparse if store is not None else sparse)
        if store is None:
            store = sr.GroupStore.create(Path(store_path), n_features=X.shape[1], sparse=sp.issparse(X),
                                         n_outputs=1 if np.ndim(y) == 1 else np.shape(y)[1])
        return store, store.append(X, y, qid, batch_id=bid)

    return [{"batch_id": bid, "file": str(f), "appended": appended,
             "rows": list(entry["rows"]), "groups": list(entry["groups"])}
            for f, bid, appended, entry in _append_each(store_path, files, sr.GroupStore, "batches", add)]


def _append_each(store_path, files, store_cls, log_attr, add):
    """The idempotent loop of :func:`ingest` and :func:`ingest_tuples`: one append per file.

    ``batch_id`` is the file's content hash; a file whose id is already in the
    store's log (``getattr(store, log_attr)``) is skipped.  ``add(store, file,
    batch_id) -> (store, appended)`` reads the file and appends it, creating
    the store from the first file when ``store`` is None.  Returns
    ``[(file, batch_id, appended, log entry)]``.
    """
    out = []
    store_path = Path(store_path)
    store = store_cls.open(store_path, mode="a") if (store_path / "zarr.json").exists() else None
    for f in files:
        bid = content_hash(f)
        if store is not None and any(e.get("batch_id") == bid for e in getattr(store, log_attr)):
            appended = False
        else:
            store, appended = add(store, f, bid)
        entry = next(e for e in getattr(store, log_attr) if e.get("batch_id") == bid)
        out.append((f, bid, bool(appended), entry))
    return out


class GroupRange(BlockSource):
    """Groups ``g0:g1`` of a block source (e.g. tonight's new groups of a store), as a source."""

    def __init__(self, source, g0, g1):
        g0, g1 = int(g0), int(g1)
        if not 0 <= g0 <= g1 <= source.n_groups:
            raise ValueError(f"group range {g0}:{g1} outside the source's {source.n_groups} groups")
        self.base = source
        self.g0, self.g1 = g0, g1
        ptr = source.group_ptr[g0:g1 + 1]
        self._r0 = int(ptr[0])
        self._gp = (ptr - ptr[0]).astype(np.int64)
        self.n_rows = int(ptr[-1] - ptr[0])
        self.n_groups = g1 - g0
        self.n_features = source.n_features
        self.n_outputs = source.n_outputs
        self.sparse = source.sparse

    def _group_ptr(self):
        return self._gp

    def _group_qid(self, a, b):
        return self.base._group_qid(self.g0 + a, self.g0 + b)

    def _nnz_at(self, rows):
        z = self.base._nnz_at(np.concatenate(([self._r0], np.asarray(rows, np.int64) + self._r0)))
        return None if z is None else z[1:] - z[0]

    def _read_rows(self, r0, r1):
        return self.base._read_rows(self._r0 + r0, self._r0 + r1)


# ------------------------------------------------------------- model dir
def current_version(models_dir):
    """Name of the promoted version (the ``current`` pointer), or None."""
    p = Path(models_dir) / POINTER
    if not p.is_file():
        return None
    name = p.read_text().strip()
    return name or None


def list_versions(models_dir):
    """Complete versions (directories with ``version.json``), oldest first."""
    d = Path(models_dir)
    if not d.is_dir():
        return []
    vs = [p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / META).is_file()]
    return sorted(vs, key=lambda v: read_version(d, v).get("seq", 0))


def read_version(models_dir, version) -> dict:
    with open(Path(models_dir) / version / META) as fh:
        return json.load(fh)


def _write_version(models_dir, name, model, meta, arrays=None):
    """Model (+ statistics) + version.json in a hidden temp dir, then one rename: complete or absent."""
    d = Path(models_dir)
    tmp = d / f".{name}.{uuid.uuid4().hex}.partial"
    sr.save(model, tmp)
    if arrays:
        np.savez(tmp / KERNEL_STATS, **arrays)
    with open(tmp / META, "w") as fh:
        json.dump(meta, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, d / name)


def switch_current(models_dir, version):
    """Atomically point ``DIR/current`` at ``version`` (write a temp file, fsync, os.replace)."""
    d = Path(models_dir)
    tmp = d / f".{POINTER}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w") as fh:
        fh.write(version + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, d / POINTER)
    try:  # make the rename durable
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # pragma: no cover - platforms without directory fsync
        pass


def _clean_partial(models_dir):
    for p in Path(models_dir).glob(".*.partial"):
        shutil.rmtree(p, ignore_errors=True)
    for p in Path(models_dir).glob(f".{POINTER}.*.tmp"):
        p.unlink(missing_ok=True)


def prune(models_dir, keep):
    """Delete all but the newest ``keep`` versions; the current version is always kept."""
    keep = int(keep)
    if keep < 1:
        raise ValueError(f"--keep must be >= 1, got {keep}")
    cur = current_version(models_dir)
    vs = list_versions(models_dir)
    removed = []
    for v in vs[:-keep]:
        if v != cur:
            # rename first (atomic): a crash mid-delete leaves a hidden .partial that the next run removes
            doomed = Path(models_dir) / f".{v}.{uuid.uuid4().hex}.partial"
            os.replace(Path(models_dir) / v, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
            removed.append(v)
    return removed


# --------------------------------------------------------------- rankrls
def select_alpha(fold_stats, alphas):
    """λ with the lowest k-fold squared ranking loss, from per-fold statistics only.

    For fold f, ``w_f(λ) = (G − G_f + λI)⁻¹ (B − B_f)`` and its loss on fold f is
    ``w_fᵀ G_f w_f − 2 w_fᵀ B_f + yᵀL_f y`` (DESIGN §3.2); the score is their
    sum over folds divided by the number of pairs (as
    ``RankRLS.cross_validate(scoring="squared")``).  Returns (best alpha, scores).
    """
    from streamrank.rankrls._statistics import EigenPath

    def fold_loss(G, B, st, alphas):
        ep = EigenPath(G, B)
        return st.loss(np.stack([ep.coef(a) for a in alphas]))

    return _select_by_fold_loss(fold_stats, alphas, fold_loss)


def _select_by_fold_loss(fold_stats, alphas, fold_loss):
    """The k-fold selection shared by :func:`select_alpha` and :func:`select_alpha_kernel`.

    ``total`` = the sum of the fold statistics; ``fold_loss(G − G_f, B − B_f,
    fold f's statistics, alphas)`` is the (len(alphas), v) loss on fold f of
    the model trained without it.  Score = summed loss / pairs, mean over
    outputs; the best λ is the lowest non-NaN score.  Returns (best alpha,
    scores, total).
    """
    total = fold_stats[0].copy()
    for st in fold_stats[1:]:
        total.merge(st)
    alphas = np.asarray(alphas, dtype=np.float64)
    loss = np.zeros((len(alphas), total.n_outputs))
    for st in fold_stats:
        loss += fold_loss(total.G - st.G, total.B - st.B, st, alphas)
    scores = (loss / max(total.n_pairs, 1)).mean(axis=1)
    best = int(np.argmin(np.where(np.isnan(scores), np.inf, scores)))
    return float(alphas[best]), scores, total


def update_rankrls(store, base_model, seen_groups, alphas, *, folds=DEFAULT_FOLDS, max_rows=DEFAULT_BLOCK_ROWS,
                   params=None):
    """Statistics of the base model + statistics of groups ``seen_groups:`` → the new RankRLS.

    ``base_model=None`` (or ``seen_groups=0``): from scratch.  Only the new
    groups are read.  The fold statistics are accumulated (one pass), their
    sum is the full statistics, λ is chosen from them and the model solved.
    """
    from streamrank.rankrls.selection import accumulate_folds

    if base_model is not None and getattr(base_model, "fold_stats_", None) is None:
        raise ValueError("the current RankRLS model holds no fold statistics; run with --full once")
    model = sr.RankRLS(**dict(params or {}, solver="primal")) if base_model is None else base_model
    model.solver = "primal"
    new = GroupRange(store, seen_groups, store.n_groups)
    folds_now = None
    if base_model is not None:
        folds_now = [st.copy() for st in base_model.fold_stats_]
        folds = len(folds_now)
    if new.n_rows:
        add = accumulate_folds(model, new, folds, max_rows)
        folds_now = add if folds_now is None else [a.merge(b) for a, b in zip(folds_now, add)]
    if folds_now is None:
        raise ValueError("no data: the store is empty")
    best, scores, total = select_alpha(folds_now, alphas)
    model.alpha = best
    model._fit_statistics(total, y_1d=(store.n_outputs == 1))
    model.fold_stats_ = folds_now
    return model, {"alphas": [float(a) for a in alphas], "cv_squared": [float(s) for s in scores],
                   "alpha": best, "new_rows": new.n_rows, "new_groups": new.n_groups}


# ---------------------------------------------------------- sparse kernel
KERNEL_STATS = "statistics.npz"


def kernel_fold_statistics(model, source, n_folds, max_rows=DEFAULT_BLOCK_ROWS):
    """Per-fold statistics of Φ = k(X, basis_) over ``source`` (one pass; folds by query id)."""
    from streamrank.rankrls._statistics import RankStatistics
    from streamrank.rankrls.selection import _split_by_fold, fold_of

    spec, Xb = model._spec(), model.basis_
    folds = [RankStatistics(Xb.shape[0], source.n_outputs, group_weight=model.group_weight, ties=model.ties)
             for _ in range(n_folds)]
    for block in source.blocks(max_rows=max_rows, split_groups=True):
        for f, X, Y, gp, size, off, gid, _ in _split_by_fold(block, fold_of(block.qid, n_folds)):
            folds[f].add_block(spec(X, Xb), Y, gp, group_size=size, group_offset=off, group_id=gid)
    for st in folds:
        st.check_complete()
    return folds


def select_alpha_kernel(fold_stats, K_RR, alphas):
    """λ of sparse RankRLS by k-fold CV from fold statistics only.

    Without fold f: ``A_f(λ) = (G − G_f + λ K_RR)⁻¹ (B − B_f)`` (§3.5), its loss on
    fold f ``A_fᵀ G_f A_f − 2 A_fᵀ B_f + yᵀL_f y``; summed over folds / pairs.
    """
    import scipy.linalg

    def fold_loss(G, B, st, alphas):
        return np.stack([st.loss(scipy.linalg.lstsq(G + a * K_RR, B, check_finite=False)[0]) for a in alphas])

    return _select_by_fold_loss(fold_stats, alphas, fold_loss)


def update_kernel(store, base_model, base_dir, seen, alphas, *, folds=DEFAULT_FOLDS, max_rows=DEFAULT_BLOCK_ROWS,
                  params=None):
    """Sparse KernelRankRLS: basis fixed at the first (or --full) night; fold statistics of Φ kept beside
    the model; a night adds only the new groups' statistics.  Returns (model, selection, arrays to save)."""
    from streamrank.rankrls._statistics import RankStatistics

    if base_model is None:
        model = sr.KernelRankRLS(**(params or {"n_basis": 100})).fit(store, max_rows=max_rows)  # basis
        fold_stats = kernel_fold_statistics(model, store, folds, max_rows)
        new = store
    else:
        model = base_model
        with np.load(Path(base_dir) / KERNEL_STATS, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        n_folds = int(arrays["n_folds"])
        fold_stats = [RankStatistics.from_arrays(arrays, group_weight=model.group_weight, ties=model.ties,
                                                 prefix=f"fold{f}_") for f in range(n_folds)]
        new = GroupRange(store, seen, store.n_groups)
        if new.n_rows:
            for a, b in zip(fold_stats, kernel_fold_statistics(model, new, n_folds, max_rows)):
                a.merge(b)
    best, scores, total = select_alpha_kernel(fold_stats, model._spec()(model.basis_), alphas)
    model.alpha = best
    model._fit_statistics(total, model.basis_, store, max_rows)
    arrays = {"n_folds": np.array(len(fold_stats))}
    for f, st in enumerate(fold_stats):
        arrays.update(st.to_arrays(f"fold{f}_"))
    return model, {"alphas": [float(a) for a in alphas], "cv_squared": [float(x) for x in scores],
                   "alpha": best, "new_rows": new.n_rows, "new_groups": new.n_groups}, arrays


# ------------------------------------------------------------------- sgd
def read_tuple_day(path):
    """One day of tuples: ``.npz`` with ``Q``, ``D`` (dense or CSR parts ``Q_data``, ``Q_indices``,
    ``Q_indptr``, ``Q_shape``), ``tuples`` (rows local to this file's Q and D), optional ``magnitudes``;
    or a TupleStore."""
    p = Path(path)
    if p.is_dir():
        ts = sr.TupleStore.open(p)
        tup, mag = ts.read_tuples()
        return ts.Q, ts.D, tup, mag
    with np.load(p, allow_pickle=False) as z:
        def mat(name):
            if name in z.files:
                return sp.csr_matrix(z[name])
            parts = [f"{name}_{k}" for k in ("data", "indices", "indptr", "shape")]
            if all(k in z.files for k in parts):
                return sp.csr_matrix((z[parts[0]], z[parts[1]], z[parts[2]]), shape=tuple(z[parts[3]]))
            raise ValueError(f"{p}: a tuple day needs {name} (dense) or {', '.join(parts)}")
        if "tuples" not in z.files:
            raise ValueError(f"{p}: a tuple day needs an array 'tuples' (l, 3)")
        mag = z["magnitudes"] if "magnitudes" in z.files else None
        return mat("Q"), mat("D"), z["tuples"], mag


def ingest_tuples(store_path, files):
    """Append each tuple day to a TupleStore (created from the first); idempotent by content hash."""
    def add(store, f, bid):
        Q, D, tup, mag = read_tuple_day(f)
        if store is None:
            store = sr.TupleStore.create(Path(store_path), Q.shape[1], D.shape[1])
        return store, store.append(Q, D, tup, magnitudes=mag, batch_id=bid)

    return [{"batch_id": bid, "file": str(f), "appended": appended, "tuples": list(e["tuples"]),
             "rows": list(e["tuples"])}
            for f, bid, appended, e in _append_each(store_path, files, sr.TupleStore, "log", add)]


def tuple_range(store, t0, t1):
    """``(Q, D_pos, D_neg)`` of tuples t0:t1 of a TupleStore."""
    batch = store.take(int(t0), int(t1))
    return batch.Q, batch.D_pos, batch.D_neg


def update_sgd(store, base_model, seen, *, params=None, batch=4096):
    """Resume SGD (``partial_fit``, shrinkage state intact) on tuples ``seen:`` of the store."""
    model = sr.SparseSGDRanker(**(params or {"refit": False})) if base_model is None else base_model
    n = store.n_tuples
    for a in range(seen, n, batch):
        model.partial_fit(*tuple_range(store, a, min(a + batch, n)))
    return model, {"new_tuples": n - seen, "t": model.t_, "nnz": model.nnz_}


def update_pairwise(store, base_model, seen, *, params=None, max_rows=DEFAULT_BLOCK_ROWS):
    """Resume PairwiseSGDRanker: ``partial_fit`` on each block of the new groups (pairs sampled within
    groups, one pair per row; step counter, L1 window and sampling counter intact)."""
    model = sr.PairwiseSGDRanker(**(params or {})) if base_model is None else base_model
    new = GroupRange(store, seen, store.n_groups)
    for block in new.blocks(max_rows=max_rows):
        model.partial_fit(block.X, block.y, block.row_qid())
    return model, {"new_rows": new.n_rows, "new_groups": new.n_groups, "t": model.t_}


def validate_tuples(model, store, t0, t1):
    """Tuple error (fraction of tuples ranked wrongly or tied) on tuples t0:t1."""
    from streamrank.metrics import tuple_error

    Q, Dp, Dn = tuple_range(store, t0, t1)
    return {"tuple_error": float(tuple_error(model.score(Q, Dp), model.score(Q, Dn)))}


# -------------------------------------------------------------- validate
def validate(model, source, *, k=10, max_rows=DEFAULT_BLOCK_ROWS):
    """NDCG@k and disagreement of ``model`` on ``source`` (one streaming pass)."""
    from streamrank.metrics import evaluate

    res = evaluate(source, model, k=k, metrics=("ndcg", "disagreement"), max_rows=max_rows)
    return {name: float(r.value) for name, r in res.items()}


def _run_key(base, total, log, learner, alphas, full, folds):
    h = hashlib.sha256(json.dumps({
        "base": base, "total": total, "learner": learner,
        "alphas": [float(a) for a in alphas], "full": bool(full), "folds": folds,
        "log": log[-1]["checksum"] if log else None,
    }, sort_keys=True).encode())
    return h.hexdigest()[:16]


def run_night(store_path, new_files, models_dir, *, learner="rankrls", alphas=None, full=False, keep=None,
              tolerance=0.005, folds=DEFAULT_FOLDS, validation=None, k=10, max_rows=DEFAULT_BLOCK_ROWS,
              plot=True, out=None, learner_params=None):
    """One night; returns the run report (also written to ``DIR/reports/``).

    ``learner_params``: constructor parameters of a new sparse-kernel model
    (e.g. ``{"n_basis": 500, "gamma": 0.1, "random_state": 0}``).
    """
    out = sys.stdout if out is None else out
    if learner not in LEARNERS:
        raise ValueError(f"--learner must be one of {LEARNERS}, got {learner!r}")
    tuples = learner == "sgd-bilinear"
    unit = "tuples" if tuples else "groups"
    from streamrank.rankrls.linear import DEFAULT_ALPHAS

    alphas = np.asarray(DEFAULT_ALPHAS if alphas is None else alphas, dtype=np.float64)
    models_dir = Path(models_dir)
    models_dir.mkdir(parents=True, exist_ok=True)
    _clean_partial(models_dir)
    started = _now()
    report = {"started": started, "store": str(store_path), "models": str(models_dir), "learner": learner}

    # 1. ingest
    if tuples:
        report["ingest"] = ingest_tuples(store_path, new_files)
        store = sr.TupleStore.open(store_path)
        total, log = store.n_tuples, store.log
    else:
        report["ingest"] = ingest(store_path, new_files, sparse=False)
        store = sr.GroupStore.open(store_path)
        total, log = store.n_groups, store.batches

    # 2. update
    cur = current_version(models_dir)
    cur_meta = read_version(models_dir, cur) if cur else None
    base = None if (full or cur is None) else cur
    seen = 0 if base is None else int(cur_meta["data"][unit][1])
    if seen > total:
        raise ValueError(f"the current model saw {seen} {unit} but the store has {total}: "
                         "wrong --store for these --models?")
    key = _run_key(base, total, log, learner, alphas, full, folds)
    report["key"] = key
    versions = list_versions(models_dir)
    metas = {v: read_version(models_dir, v) for v in versions}
    reuse = next((v for v in versions if metas[v].get("key") == key), None)
    if base is not None and seen == total:
        report.update(status="up-to-date", version=cur, promoted=False, current=cur)
        return _finish(report, models_dir, keep, plot, out)
    if reuse is not None:  # a previous run trained it but died before promoting
        name, meta = reuse, metas[reuse]
        report["reused"] = True
    else:
        base_model = sr.load(models_dir / base) if base is not None else None
        extra = None
        last = log[-1]
        cur_model = sr.load(models_dir / cur) if cur else None
        if tuples:
            model, sel = update_sgd(store, base_model, seen)
            data = {"tuples": [0, total], "new_tuples": sel["new_tuples"]}
            vdesc = {"batch_id": last["batch_id"], "tuples": last["tuples"]}
            metrics = validate_tuples(model, store, *last["tuples"])
            cur_metrics = validate_tuples(cur_model, store, *last["tuples"]) if cur else None
            mk, higher = "tuple_error", False
        else:
            if learner == "rankrls":
                model, sel = update_rankrls(store, base_model, seen, alphas, folds=folds, max_rows=max_rows,
                                            params=learner_params)
            elif learner == "sgd-pairwise":
                model, sel = update_pairwise(store, base_model, seen, params=learner_params, max_rows=max_rows)
            else:
                model, sel, extra = update_kernel(store, base_model, models_dir / base if base else None, seen,
                                                  alphas, folds=folds, max_rows=max_rows, params=learner_params)
            data = {"rows": [0, store.n_rows], "groups": [0, total], "new_rows": sel["new_rows"],
                    "new_groups": sel["new_groups"]}
            # 3. validate on the newest day (or a fixed validation store)
            if validation is not None:
                vsrc = sr.GroupStore.open(validation)
                vdesc = {"store": str(validation)}
            else:
                vsrc = GroupRange(store, *last["groups"])
                vdesc = {"batch_id": last["batch_id"], "groups": last["groups"], "rows": last["rows"]}
            metrics = validate(model, vsrc, k=k, max_rows=max_rows)
            cur_metrics = validate(cur_model, vsrc, k=k, max_rows=max_rows) if cur else None
            mk, higher = f"ndcg@{k}", True
        data.update(batches=len(log), last_batch=last["batch_id"])
        if cur_metrics is None:
            promote = True
        elif higher:
            promote = not (metrics[mk] < cur_metrics[mk] - tolerance)
        else:
            promote = not (metrics[mk] > cur_metrics[mk] + tolerance)
        seq = 1 + max((int(m.get("seq", 0)) for m in metas.values()), default=0)
        name = f"v{seq:04d}"
        meta = {
            "version": name, "seq": seq, "key": key, "created": _now(), "learner": learner,
            "class": type(model).__name__, "params": sr.persistence._jsonable(model.get_params()),
            "base": base, "mode": "full" if base is None else "incremental", "data": data,
            "selection": sel, "validation": vdesc, "metrics": metrics, "current_metrics": cur_metrics,
            "promotion_metric": mk, "tolerance": tolerance, "promote": bool(promote), "previous": cur,
        }
        _write_version(models_dir, name, model, meta, extra)
    # 4. promote
    if meta["promote"]:
        switch_current(models_dir, name)
    report.update(status="promoted" if meta["promote"] else "rejected", version=name,
                  promoted=bool(meta["promote"]), current=current_version(models_dir),
                  alpha=meta["selection"].get("alpha"), metrics=meta["metrics"],
                  current_metrics=meta["current_metrics"], data=meta["data"], mode=meta["mode"])
    return _finish(report, models_dir, keep, plot, out)


def _finish(report, models_dir, keep, plot, out):
    if keep is not None:
        report["pruned"] = prune(models_dir, keep)
    report["finished"] = _now()
    rdir = Path(models_dir) / "reports"
    rdir.mkdir(exist_ok=True)
    stamp = report["started"].replace(":", "").replace("-", "").replace(".", "")
    tmp = rdir / f".{stamp}.json.tmp"
    with open(tmp, "w") as fh:
        json.dump(report, fh, indent=1, sort_keys=True)
    os.replace(tmp, rdir / f"{stamp}.json")
    if plot:
        report["plot"] = _plot(models_dir)
    out.write(summary_line(report) + "\n")
    out.flush()
    return report


def summary_line(report) -> str:
    ing = report.get("ingest", [])
    new = sum(b["rows"][1] - b["rows"][0] for b in ing if b["appended"])
    dup = sum(1 for b in ing if not b["appended"])
    head = f"nightly {report['learner']}: ingested {sum(b['appended'] for b in ing)} batch(es) (+{new} rows"
    head += f", {dup} already in the store)" if dup else ")"
    if report["status"] == "up-to-date":
        return head + f"; model up to date, current={report['current']}"
    m, c = report.get("metrics") or {}, report.get("current_metrics")
    mk = next((x for x in m if x.startswith("ndcg")), next(iter(m), None))
    val = f"{mk} {m[mk]:.4f}" if mk else ""
    if c and mk:
        val += f" (current {c[mk]:.4f})"
    alpha = f" alpha={report['alpha']:.4g}" if report.get("alpha") is not None else ""
    return (head + f"; {report['mode']} {report['version']}{alpha} {val} -> "
            f"{report['status']}; current={report['current']}")


def _plot(models_dir):
    path = Path(models_dir) / "metrics.png"
    tmp = path.with_name(".metrics.png.tmp")
    try:  # the library's plot of the run reports, when streamrank.plot provides it
        from streamrank.plot import nightly_history
    except (ImportError, AttributeError):
        nightly_history = None
    if nightly_history is not None:
        import matplotlib.pyplot as plt

        fig = nightly_history(models_dir)
        fig.savefig(tmp, format="png")
        plt.close(fig)
        os.replace(tmp, path)
        return str(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    vs = list_versions(models_dir)
    metas = [read_version(models_dir, v) for v in vs]
    if not metas:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in sorted({k for m in metas for k in (m.get("metrics") or {})}):
        ax.plot([m["seq"] for m in metas], [(m.get("metrics") or {}).get(name, np.nan) for m in metas],
                marker="o", label=name)
    ax.set_xlabel("version")
    ax.set_title("validation metrics over nights")
    ax.legend()
    fig.savefig(tmp, format="png", dpi=80)
    plt.close(fig)
    os.replace(tmp, path)
    return str(path)


# ------------------------------------------------------------------- CLI
def _parse_alphas(text):
    """``--alphas GRID``: :func:`streamrank.cli.parse_grid` (the ``streamrank`` command's syntax), plus
    this pipeline's older ``LO:HI`` (powers of two 2^int(log2 LO) … 2^int(log2 HI))."""
    from streamrank.cli import UsageError, parse_grid

    try:
        return parse_grid(text, plain_range=True)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(f"--alphas: {exc}") from None


def build_parser():
    p = argparse.ArgumentParser(prog="nightly.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True, help="GroupStore of all logs so far (created if missing)")
    p.add_argument("--new", nargs="+", required=True, metavar="DAYFILE",
                   help="the new day's data: LETOR/svmlight text, .npz with X, y, qid, or a zarr store")
    p.add_argument("--models", required=True, metavar="DIR", help="model directory (versions + current)")
    p.add_argument("--learner", default="rankrls", choices=LEARNERS)
    p.add_argument("--alphas", type=_parse_alphas, default=None, metavar="GRID",
                   help="λ grid as for 'streamrank fit': 'a,b,c', '2^-15:2^15[:STEP]', 'LO:HI:N' "
                        "(log-spaced), or 'LO:HI' (powers of two) (default 2^-15 … 2^15)")
    p.add_argument("--full", action="store_true", help="retrain from scratch on all data")
    p.add_argument("--keep", type=int, default=None, metavar="N", help="keep only the newest N versions")
    p.add_argument("--tolerance", type=float, default=0.005, help="allowed NDCG@10 drop for promotion")
    p.add_argument("--folds", type=int, default=DEFAULT_FOLDS, help="folds (by query) for λ selection")
    p.add_argument("--validation", default=None, metavar="STORE",
                   help="fixed validation store (default: the newest day)")
    p.add_argument("--max-rows", type=int, default=DEFAULT_BLOCK_ROWS, help="block budget (rows)")
    p.add_argument("--no-plot", action="store_true", help="do not write metrics.png")
    p.add_argument("--group-weight", default="pair", choices=("pair", "query", "size"),
                   help="rankrls: weight of each query's pairs (fixed at the first night)")
    p.add_argument("--ties", default="include", choices=("include", "exclude"), help="rankrls: tied pairs")
    p.add_argument("--n-basis", type=int, default=500, help="sparse-kernel: basis rows (fixed at the first night)")
    p.add_argument("--kernel", default="rbf", help="sparse-kernel: kernel name")
    p.add_argument("--gamma", type=float, default=1.0, help="sparse-kernel: kernel width")
    p.add_argument("--seed", type=int, default=0,
                   help="sparse-kernel: seed of the basis reservoir; sgd-pairwise: seed of the pair sampling")
    return p


def _learner_params(args):
    if args.learner == "sparse-kernel":
        return {"n_basis": args.n_basis, "kernel": args.kernel, "gamma": args.gamma, "random_state": args.seed}
    if args.learner == "sgd-pairwise":
        return {"random_state": args.seed}
    if args.learner == "rankrls":
        return {"group_weight": args.group_weight, "ties": args.ties}
    return None


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    run_night(args.store, args.new, args.models, learner=args.learner, alphas=args.alphas, full=args.full,
              keep=args.keep, tolerance=args.tolerance, folds=args.folds, validation=args.validation,
              max_rows=args.max_rows, plot=not args.no_plot,
              learner_params=_learner_params(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
