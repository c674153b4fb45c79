"""Synthetic ranking data from a hidden model: LETOR-like groups and planted bilinear tuples.

LETOR-like groups
-----------------
A query group has ``n_g`` rows (drawn from ``group_size``).  Features are
query-dependent as in LETOR: ``x = mu_q + e`` with a per-query offset
``mu_q ~ N(0, 0.5^2 I)`` and ``e ~ N(0, I)`` (drawn in float32, the
stored precision; labels are computed from the stored features).  The hidden relevance is
``f(x) + noise`` with

* linear: ``f(x) = w . x``, ``|w| = 1``;
* nonlinear (``nonlinear=True``): ``f(x) = sin(2 a . x) + (b . x)^2 / 2 + (w . x) / 2``
  (``a``, ``b``, ``w`` unit vectors), which a linear ranker cannot fit;

and ``noise ~ N(0, noise^2)``.  Labels are graded 0-4 by thresholds fixed at
the quantiles of the hidden relevance that give grade frequencies of about
50 / 30 / 12 / 5 / 3 % (so some queries have no relevant row, as in LETOR).
The hidden model depends only on ``model_seed`` (and the shape options), the
rows on ``random_state``: a train and a test set drawn with two
``random_state`` values share the model.

Data are generated in fixed *superblocks* of 1,024 groups, each from its own
generator ``default_rng([random_state, superblock])``, so the rows do not
depend on ``chunk_rows`` and memory is bounded by the chunk size whatever
``n_rows`` is.

Planted bilinear tuples
-----------------------
Query and item vectors are sparse, non-negative, L2-normalised, in the same
``n_features``-dimensional space, each about a *topic* (a random set of
features; a vector takes most of its nonzeros from its topic).  The planted
``W`` (sparse, ``n_features x n_features``) links each topic's features to
the features of a related topic, plus a weak diagonal.  A tuple
``(q, d+, d-)`` orders two items by the planted score ``q^T W d`` (pairs
whose scores are within ``margin`` are rejected), mimicking the
(query, relevant, irrelevant) tuples of the sparse-SGD paper (Chen, Bai, Qi,
Lin & Carbonell, "Learning Preferences with Millions of Parameters by
Enforcing Sparsity", ICDM 2010, §IV).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import scipy.sparse as sp


__all__ = [
    "LetorLikeModel",
    "letor_like_model",
    "letor_like_chunks",
    "make_letor_like",
    "write_letor_like_store",
    "PlantedBilinear",
    "planted_W",
    "planted_bilinear_chunks",
    "planted_bilinear",
    "write_planted_bilinear_store",
]

_SUPERBLOCK = 1024
_GRADE_FREQ = np.array([0.50, 0.30, 0.12, 0.05, 0.03])


def _check_int(v, name, lo=0):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return int(v)


def _check_group_size(group_size):
    if isinstance(group_size, (int, np.integer)):
        lo = hi = int(group_size)
    else:
        try:
            lo, hi = (int(v) for v in group_size)
        except (TypeError, ValueError):
            raise ValueError(f"group_size must be an int or a (min, max) pair, got {group_size!r}") from None
    if lo < 1 or hi < lo:
        raise ValueError(f"group_size must satisfy 1 <= min <= max, got ({lo}, {hi})")
    return lo, hi


# ------------------------------------------------------------ LETOR-like groups
@dataclass(frozen=True)
class LetorLikeModel:
    """The hidden model of :func:`letor_like_chunks` (see the module docstring)."""

    w: np.ndarray
    a: np.ndarray | None
    b: np.ndarray | None
    thresholds: np.ndarray
    noise: float
    query_scale: float = 0.5

    @property
    def nonlinear(self) -> bool:
        return self.a is not None

    @property
    def n_features(self) -> int:
        return len(self.w)

    def relevance(self, X) -> np.ndarray:
        """Noise-free hidden relevance ``f(x)`` of each row (float64)."""
        dt = np.float32 if X.dtype == np.float32 else np.float64  # float32 features: sgemv, no copy
        if self.nonlinear:
            P = np.asarray(X @ np.stack([self.w, self.a, self.b], axis=1).astype(dt), dtype=np.float64)
            Xw, Xa, Xb = P[:, 0], P[:, 1], P[:, 2]
        else:
            return np.asarray(X @ self.w.astype(dt), dtype=np.float64).ravel()
        return np.sin(2.0 * Xa) + 0.5 * Xb**2 + 0.5 * Xw

    def grade(self, latent) -> np.ndarray:
        """Labels 0-4 from hidden relevance plus noise."""
        return np.searchsorted(self.thresholds, latent, side="right").astype(np.float64)


def _unit(rng, n):
    v = rng.normal(size=n)
    return v / np.linalg.norm(v)


def letor_like_model(n_features: int, *, nonlinear: bool = False, noise: float = 0.5,
                     model_seed: int = 0) -> LetorLikeModel:
    """The hidden model for ``n_features`` features, reproducible from ``model_seed``."""
    n_features = _check_int(n_features, "n_features", 1)
    if not np.isfinite(noise) or noise < 0:
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
    rng = np.random.default_rng([int(model_seed), 7919, int(nonlinear)])
    w = _unit(rng, n_features)
    a = _unit(rng, n_features) if nonlinear else None
    b = _unit(rng, n_features) if nonlinear else None
    m = LetorLikeModel(w, a, b, np.zeros(4), float(noise))
    # thresholds at the quantiles of the hidden relevance (+ noise) of a fixed sample
    n = 20_000
    mu = rng.normal(scale=m.query_scale, size=(n // 20, n_features)).repeat(20, axis=0)
    X = mu + rng.normal(size=(n, n_features))
    latent = m.relevance(X) + rng.normal(scale=noise, size=n)
    thresholds = np.quantile(latent, np.cumsum(_GRADE_FREQ)[:-1])
    return LetorLikeModel(w, a, b, thresholds, float(noise))


def _superblock(model, b, n_groups, group_size, random_state, density):
    rng = np.random.default_rng([int(random_state), int(b)])
    lo, hi = group_size
    sizes = rng.integers(lo, hi + 1, size=n_groups)
    m = int(sizes.sum())
    nf = model.n_features
    mu = rng.standard_normal((n_groups, nf), dtype=np.float32)
    mu *= np.float32(model.query_scale)
    X = rng.standard_normal((m, nf), dtype=np.float32)
    X += np.repeat(mu, sizes, axis=0)
    if density < 1.0:
        X *= rng.random((m, nf), dtype=np.float32) < density
    # labels from the stored float32 features, so model.relevance(X) is exactly their noise-free part
    latent = model.relevance(X) + rng.normal(scale=model.noise, size=m)
    y = model.grade(latent)
    qid = np.repeat(np.arange(b * _SUPERBLOCK, b * _SUPERBLOCK + n_groups, dtype=np.int64), sizes)
    return X, y, qid, sizes


def letor_like_chunks(n_rows: int, n_features: int = 46, *, group_size=(5, 40), nonlinear: bool = False,
                      noise: float = 0.5, density: float = 1.0, sparse: bool = False,
                      chunk_rows: int = 100_000, random_state: int = 0, model_seed: int = 0,
                      qid_offset: int = 1) -> Iterator[tuple]:
    """Yield ``(X, y, qid)`` chunks of whole groups, ``n_rows`` rows in total.

    Parameters
    ----------
    n_rows : int
        Total rows (the last group is shortened to hit it exactly).
    n_features : int
    group_size : int or (min, max)
        Rows per query, uniform in [min, max].
    nonlinear : bool
        Use the nonlinear hidden model.
    noise : float
        Standard deviation of the label noise.
    density : float in (0, 1]
        Fraction of nonzero features (entries dropped at random).
    sparse : bool
        Yield ``X`` as CSR (float32) instead of a dense float32 array.
    chunk_rows : int
        Rows per chunk (whole groups; a chunk holds at most
        ``max(chunk_rows, max group size)`` rows).
    random_state : int
        Seed of the rows (the data).
    model_seed : int
        Seed of the hidden model (shared by train and test sets).
    qid_offset : int
        Query ids are ``qid_offset + group number``.

    ``y`` is float64 in {0, 1, 2, 3, 4}; ``qid`` int64, contiguous groups.
    """
    n_rows = _check_int(n_rows, "n_rows", 0)
    chunk_rows = _check_int(chunk_rows, "chunk_rows", 1)
    gs = _check_group_size(group_size)
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density!r}")
    model = letor_like_model(n_features, nonlinear=nonlinear, noise=noise, model_seed=model_seed)
    buf_X, buf_y, buf_q = [], [], []
    buffered = 0
    produced = 0
    b = 0

    def emit(parts_X, parts_y, parts_q):
        X = np.concatenate(parts_X) if len(parts_X) > 1 else parts_X[0]
        y = np.concatenate(parts_y) if len(parts_y) > 1 else parts_y[0]
        q = np.concatenate(parts_q) if len(parts_q) > 1 else parts_q[0]
        return (sp.csr_matrix(X) if sparse else X), y, q + qid_offset

    while produced + buffered < n_rows:
        X, y, q, sizes = _superblock(model, b, _SUPERBLOCK, gs, random_state, density)
        b += 1
        need = n_rows - produced - buffered
        if len(y) > need:
            X, y, q = X[:need], y[:need], q[:need]
        # cut the superblock at group boundaries into pieces that fill chunks
        starts = np.concatenate(([0], np.cumsum(sizes)))
        starts = starts[starts < len(y)]
        pos = 0
        while pos < len(y):
            room = chunk_rows - buffered
            # last group start <= pos + room (whole groups only)
            cut_at = starts[starts <= pos + room]
            end = int(cut_at[-1]) if cut_at.size else pos
            if pos + room >= len(y):
                end = len(y)
            if end <= pos:
                if buffered:
                    yield emit(buf_X, buf_y, buf_q)
                    produced += buffered
                    buf_X, buf_y, buf_q, buffered = [], [], [], 0
                    continue
                # a single group larger than chunk_rows
                nxt = starts[starts > pos]
                end = int(nxt[0]) if nxt.size else len(y)
            buf_X.append(X[pos:end])
            buf_y.append(y[pos:end])
            buf_q.append(q[pos:end])
            buffered += end - pos
            pos = end
            if buffered >= chunk_rows:
                yield emit(buf_X, buf_y, buf_q)
                produced += buffered
                buf_X, buf_y, buf_q, buffered = [], [], [], 0
    if buffered:
        yield emit(buf_X, buf_y, buf_q)


def make_letor_like(n_rows: int, n_features: int = 46, *, return_model: bool = False, **kwargs):
    """In-memory ``(X, y, qid)`` (and the :class:`LetorLikeModel` if ``return_model``).

    Keyword arguments as :func:`letor_like_chunks`; same rows for the same seeds.
    """
    kwargs.setdefault("chunk_rows", max(int(n_rows), 1))
    parts = list(letor_like_chunks(n_rows, n_features, **kwargs))
    sparse = kwargs.get("sparse", False)
    if parts:
        X = sp.vstack([p[0] for p in parts], format="csr") if sparse else np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        qid = np.concatenate([p[2] for p in parts])
    else:
        X = sp.csr_matrix((0, n_features), dtype=np.float32) if sparse else np.zeros((0, n_features), np.float32)
        y, qid = np.zeros(0), np.zeros(0, np.int64)
    if return_model:
        model = letor_like_model(n_features, nonlinear=kwargs.get("nonlinear", False),
                                 noise=kwargs.get("noise", 0.5), model_seed=kwargs.get("model_seed", 0))
        return X, y, qid, model
    return X, y, qid


def write_letor_like_store(path, n_rows: int, n_features: int = 46, *, overwrite: bool = False,
                           progress=None, **kwargs):
    """Write :func:`letor_like_chunks` to a new :class:`~streamrank.GroupStore` at ``path``.

    Each chunk is one append with ``batch_id="synthetic-<i>"``.  ``progress``
    is an optional callable ``progress(rows_written)``.  Returns the store
    (open for reading).
    """
    from ..io.group_store import GroupStore

    store = GroupStore.create(path, n_features, sparse=kwargs.get("sparse", False), overwrite=overwrite)
    written = 0
    for i, (X, y, qid) in enumerate(letor_like_chunks(n_rows, n_features, **kwargs)):
        store.append(X, y, qid, batch_id=f"synthetic-{i}")
        written += len(y)
        if progress is not None:
            progress(written)
    return GroupStore.open(path)


# ------------------------------------------------------------ bilinear tuples
def _topics(rng, n_features, n_topics, topic_size):
    return [rng.choice(n_features, size=topic_size, replace=False) for _ in range(n_topics)]


def planted_W(n_features: int, *, n_topics: int = 20, topic_size: int | None = None,
              link_density: float = 0.05, diagonal: float = 0.1, model_seed: int = 0):
    """The planted sparse ``W`` (CSR float64, n_features x n_features) and its topics.

    Returns ``(W, topics, related)``: ``topics[t]`` the feature indices of
    topic t, ``related[t]`` the topic whose items queries of topic t prefer.
    Row features of topic t connect to column features of ``related[t]``
    with probability ``link_density`` (weights ``|N(0,1)| + 0.5``); plus
    ``diagonal * I``.  Reproducible from ``model_seed``.
    """
    n_features = _check_int(n_features, "n_features", 2)
    n_topics = _check_int(n_topics, "n_topics", 1)
    rng = np.random.default_rng([int(model_seed), 104729])
    topic_size = topic_size or max(2, min(n_features, 2 * n_features // n_topics))
    topics = _topics(rng, n_features, n_topics, topic_size)
    related = rng.permutation(n_topics)
    rows, cols, vals = [], [], []
    for t in range(n_topics):
        r, c = topics[t], topics[related[t]]
        mask = rng.random((len(r), len(c))) < link_density
        i, j = np.nonzero(mask)
        rows.append(r[i])
        cols.append(c[j])
        vals.append(np.abs(rng.normal(size=len(i))) + 0.5)
    W = sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(n_features, n_features)).tocsr()
    W.sum_duplicates()
    if diagonal:
        W = (W + diagonal * sp.eye(n_features, format="csr")).tocsr()
    return W, topics, related


def _sparse_vectors(rng, n, n_features, topics, topic_of, nnz, in_topic=0.8):
    """n sparse non-negative L2-normalised rows (float32 CSR), most nonzeros from their topic."""
    tarr = np.asarray(topics)                       # (n_topics, topic_size)
    k_in = max(1, int(round(nnz * in_topic)))
    cols_in = tarr[np.asarray(topic_of)[:, None], rng.integers(0, tarr.shape[1], (n, k_in))]
    cols_out = rng.integers(0, n_features, (n, max(0, nnz - k_in)))
    cols = np.concatenate((cols_in, cols_out), axis=1)
    vals = np.abs(rng.normal(size=cols.shape)) + 0.1
    rows = np.repeat(np.arange(n), cols.shape[1])
    M = sp.csr_matrix((vals.ravel(), (rows, cols.ravel())), shape=(n, n_features))  # sums duplicates
    M.sort_indices()
    norms = np.sqrt(np.asarray(M.multiply(M).sum(axis=1)).ravel())
    M = sp.csr_matrix(sp.diags(1.0 / norms) @ M)
    M.sort_indices()
    return M.astype(np.float32)


def _bilinear_scores(QW, qi, D, di):
    """``(QW[qi[j]] . D[di[j]])`` for every j, in float64, with bounded memory.

    ``QW = Q @ W`` (CSR); rows of QW are densified a block of queries at a
    time (about 32 MiB) and gathered at the nonzeros of the item rows.
    """
    n_features = QW.shape[1]
    out = np.zeros(len(qi), dtype=np.float64)
    order = np.argsort(qi, kind="stable")
    qs = qi[order]
    step = max(1, (1 << 22) // max(n_features, 1))
    for b0 in range(0, QW.shape[0], step):
        a, b = np.searchsorted(qs, [b0, b0 + step])
        if a == b:
            continue
        sel = order[a:b]
        dense = QW[b0:b0 + step].toarray()
        Ds = D[di[sel]]
        row = np.repeat(np.arange(len(sel)), np.diff(Ds.indptr))
        prod = Ds.data * dense[qi[sel][row] - b0, Ds.indices]
        out[sel] = np.bincount(row, weights=prod, minlength=len(sel))
    return out


def planted_bilinear_chunks(n_tuples: int, n_features: int = 1000, *, n_queries: int | None = None,
                            n_items: int | None = None, nnz: int = 20, n_topics: int = 20,
                            margin: float = 1e-3, chunk_tuples: int = 100_000, random_state: int = 0,
                            model_seed: int = 0, W=None) -> Iterator[tuple]:
    """Yield ``(Q, D, tuples)`` chunks, tuple indices local to each chunk.

    Each chunk draws its own query and item vectors (``n_queries`` /
    ``n_items`` per chunk; default one query per 10 tuples and one item per
    5) and ``chunk_tuples`` tuples over them: a query of topic t, one item
    from the related topic's pool half of the time, the other at random,
    ordered by the planted score ``q^T W d``.  ``Q``, ``D`` are float32 CSR;
    ``tuples`` int64 (l, 3) = (query row, preferred item row, other item row).
    """
    n_tuples = _check_int(n_tuples, "n_tuples", 0)
    chunk_tuples = _check_int(chunk_tuples, "chunk_tuples", 1)
    if W is None:
        W, topics, related = planted_W(n_features, n_topics=n_topics, model_seed=model_seed)
    else:
        _, topics, related = planted_W(n_features, n_topics=n_topics, model_seed=model_seed)
        W = sp.csr_matrix(W)
    n_topics = len(topics)
    done = 0
    c = 0
    while done < n_tuples:
        rng = np.random.default_rng([int(random_state), 15485863, c])
        c += 1
        want = min(chunk_tuples, n_tuples - done)
        nq = n_queries or max(1, want // 10)
        nd = n_items or max(2, want // 5)
        q_topic = rng.integers(0, n_topics, nq)
        d_topic = rng.integers(0, n_topics, nd)
        Q = _sparse_vectors(rng, nq, n_features, topics, q_topic, nnz)
        D = _sparse_vectors(rng, nd, n_features, topics, d_topic, nnz)
        QW = sp.csr_matrix(Q.astype(np.float64) @ W)
        d_order = np.argsort(d_topic, kind="stable")
        d_start = np.searchsorted(d_topic[d_order], np.arange(n_topics + 1))
        d_count = np.diff(d_start)
        out = []
        got = 0
        tries = 0
        while got < want:
            tries += 1
            if tries > 50:
                raise RuntimeError("could not draw enough tuples with distinct planted scores; "
                                   "lower margin or raise nnz")
            k = 2 * (want - got) + 16
            qi = rng.integers(0, nq, k)
            d1 = rng.integers(0, nd, k)
            # half of the first items from the pool of the query topic's related topic
            rt = related[q_topic[qi]]
            near = (rng.random(k) < 0.5) & (d_count[rt] > 0)
            pick = d_start[rt] + (rng.random(k) * d_count[rt]).astype(np.int64)
            d1[near] = d_order[np.minimum(pick[near], nd - 1)]
            d2 = rng.integers(0, nd, k)
            s1 = _bilinear_scores(QW, qi, D, d1)
            s2 = _bilinear_scores(QW, qi, D, d2)
            ok = (np.abs(s1 - s2) > margin) & (d1 != d2)
            pos = np.where(s1 > s2, d1, d2)[ok]
            neg = np.where(s1 > s2, d2, d1)[ok]
            t = np.stack([qi[ok], pos, neg], axis=1).astype(np.int64)[: want - got]
            out.append(t)
            got += len(t)
        done += want
        yield Q, D, np.concatenate(out)


@dataclass
class PlantedBilinear:
    """Planted-W tuples in memory: ``train`` (a tuple source), ``test`` (Q, D_pos, D_neg)."""

    W: sp.csr_matrix
    Q: sp.csr_matrix
    D: sp.csr_matrix
    tuples: np.ndarray
    test: tuple
    train: object

    @property
    def n_features(self) -> int:
        return self.W.shape[0]


def planted_bilinear(n_features: int = 1000, n_train: int = 100_000, n_test: int = 10_000, *,
                     nnz: int = 20, n_topics: int = 20, random_state: int = 0, model_seed: int = 0,
                     **kwargs) -> PlantedBilinear:
    """Train tuples (one chunk, as a tuple source) and row-aligned test tuples from the same W.

    ``test`` holds ``(Q, D_pos, D_neg)`` CSR matrices with one row per test
    tuple, drawn from fresh query and item vectors.
    """
    W, _, _ = planted_W(n_features, n_topics=n_topics, model_seed=model_seed)
    common = dict(nnz=nnz, n_topics=n_topics, model_seed=model_seed, W=W, **kwargs)
    Q, D, t = next(planted_bilinear_chunks(n_train, n_features, chunk_tuples=max(n_train, 1),
                                           random_state=random_state, **common)) if n_train else (
        sp.csr_matrix((0, n_features), dtype=np.float32), sp.csr_matrix((0, n_features), dtype=np.float32),
        np.zeros((0, 3), np.int64))
    if n_test:
        Qt, Dt, tt = next(planted_bilinear_chunks(n_test, n_features, chunk_tuples=n_test,
                                                  random_state=int(random_state) + 1_000_003, **common))
        test = (Qt[tt[:, 0]], Dt[tt[:, 1]], Dt[tt[:, 2]])
    else:
        e = sp.csr_matrix((0, n_features), dtype=np.float32)
        test = (e, e, e)
    from ..io.tuples import as_tuple_source

    return PlantedBilinear(W=W, Q=Q, D=D, tuples=t, test=test, train=as_tuple_source(Q, D, t))


def write_planted_bilinear_store(path, n_tuples: int, n_features: int = 1000, *, overwrite: bool = False,
                                 progress=None, **kwargs):
    """Write :func:`planted_bilinear_chunks` to a new :class:`~streamrank.TupleStore`.

    Returns ``(store, W)``; ``W`` is reproducible with :func:`planted_W`.
    """
    from ..io.tuple_store import TupleStore

    store = TupleStore.create(path, n_features, n_features, overwrite=overwrite)
    done = 0
    for i, (Q, D, t) in enumerate(planted_bilinear_chunks(n_tuples, n_features, **kwargs)):
        store.append(Q, D, t, batch_id=f"planted-{i}")
        done += len(t)
        if progress is not None:
            progress(done)
    W, _, _ = planted_W(n_features, n_topics=kwargs.get("n_topics", 20), model_seed=kwargs.get("model_seed", 0))
    return TupleStore.open(path), W
