"""The bad-input table: cases × public entry points, and the expected outcome of each.

A *case* turns the clean data (X, y, qid) into a bad (or merely unusual)
variant and says what must happen: ``Err(types, *words)`` — raise one of
``types`` with a message containing every word (the argument's name and, where
there is one, the row) — or ``SAME`` — be handled: give the result of the
clean input (up to float32 storage / summation order).

An *entry point* is ``run(X, y, qid, tmp) -> ndarray`` (a fit followed by a
prediction on the clean X, the rows read back from a store, a metric ...);
``kinds`` says which inputs it takes, so that a case about ``qid`` is not
run against ``predict``.

``python -m tests.hardening.badinput_table`` prints the table of outcomes.
"""
from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np
import scipy.sparse as sp

N_ROWS, N_FEAT = 30, 4
BAD_ROW = 7            # row that holds the bad value in the X / y cases
NONCONTIG_ROW = 24     # row where a query id reappears


def clean():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N_ROWS, N_FEAT))
    y = np.round(X @ np.array([1.0, -0.5, 0.25, 0.0]) + 0.3 * rng.normal(size=N_ROWS), 1)
    qid = np.repeat(np.arange(10, 15), 6)  # 5 groups of 6 rows
    return X, y, qid


@dataclasses.dataclass(frozen=True)
class Err:
    types: tuple
    words: tuple = ()

    def __init__(self, types, *words):
        object.__setattr__(self, "types", types if isinstance(types, tuple) else (types,))
        object.__setattr__(self, "words", words)

    def describe(self):
        return "/".join(t.__name__ for t in self.types) + (f" [{', '.join(self.words)}]" if self.words else "")


SAME = "same"
NA = None


@dataclasses.dataclass
class Case:
    name: str
    make: object          # (X, y, qid) -> (X, y, qid)
    expect: object        # Err | SAME
    needs: str            # which input the case touches: "X", "y", "qid"
    overrides: dict = dataclasses.field(default_factory=dict)  # entry name -> Err | SAME | NA


def _set(a, idx, v):
    a = np.array(a, dtype=np.float64)
    a[idx] = v
    return a


def _noncontig_qid(q):
    q = q.copy()
    q[NONCONTIG_ROW:] = q[0]   # the first query's id comes back at row 24
    return q


def _dask(X, y, qid, chunk=4):
    import dask.array as da

    return da.from_array(X, chunks=(chunk, X.shape[1])), da.from_array(y, chunks=chunk), \
        da.from_array(qid, chunks=chunk)


ROW = f"row {BAD_ROW}"
VE, TE = ValueError, TypeError

CASES = [
    Case("nan_X", lambda X, y, q: (_set(X, (BAD_ROW, 0), np.nan), y, q), Err(VE, "X", ROW), "X"),
    Case("inf_X", lambda X, y, q: (_set(X, (BAD_ROW, 0), np.inf), y, q), Err(VE, "X", ROW), "X"),
    Case("neginf_X_csr", lambda X, y, q: (sp.csr_matrix(_set(X, (BAD_ROW, 0), -np.inf)), y, q),
         Err(VE, "X", ROW), "X"),
    Case("nan_y", lambda X, y, q: (X, _set(y, BAD_ROW, np.nan), q), Err(VE, "y", ROW), "y"),
    Case("inf_y", lambda X, y, q: (X, _set(y, BAD_ROW, -np.inf), q), Err(VE, "y", ROW), "y"),
    Case("empty", lambda X, y, q: (X[:0], y[:0], q[:0]), Err(VE, "empty|0 rows"), "X"),
    Case("zero_features", lambda X, y, q: (X[:, :0], y, q), Err(VE, "X", "feature"), "X"),
    Case("y_too_short", lambda X, y, q: (X, y[:-1], q), Err(VE, "y", "29", "30"), "y"),
    Case("qid_too_short", lambda X, y, q: (X, y, q[:-1]), Err(VE, "qid", "29", "30"), "qid"),
    Case("qid_not_contiguous", lambda X, y, q: (X, y, _noncontig_qid(q)),
         Err(VE, "qid", "contiguous", f"row {NONCONTIG_ROW}"), "qid"),
    Case("qid_negative", lambda X, y, q: (X, y, q - 100), SAME, "qid"),
    Case("qid_fractional", lambda X, y, q: (X, y, _set(q, BAD_ROW, 12.5)), Err(VE, "qid", ROW), "qid"),
    Case("qid_nan", lambda X, y, q: (X, y, _set(q, BAD_ROW, np.nan)), Err(VE, "qid", ROW), "qid"),
    Case("qid_integral_float", lambda X, y, q: (X, y, q.astype(np.float64)), SAME, "qid"),
    # string query ids are query ids (issue 18): the same groups, the same results; dates are not ids
    Case("qid_str", lambda X, y, q: (X, y, q.astype(str)), SAME, "qid"),
    Case("qid_datetime", lambda X, y, q: (X, y, q.astype("datetime64[D]")), Err(TE, "qid", "dtype"), "qid"),
    Case("qid_2d", lambda X, y, q: (X, y, q[:, None]), Err(VE, "qid", "1-D"), "qid"),
    Case("y_3d", lambda X, y, q: (X, y[:, None, None], q), Err(VE, "y", "shape"), "y"),
    Case("y_column", lambda X, y, q: (X, y[:, None], q), SAME, "y"),
    Case("y_multioutput", lambda X, y, q: (X, np.c_[y, -y], q), SAME, "y"),
    Case("y_str", lambda X, y, q: (X, y.astype(str), q), Err(TE, "y", "dtype"), "y"),
    Case("X_object", lambda X, y, q: (X.astype(object), y, q), Err(TE, "X", "dtype"), "X"),
    Case("X_str", lambda X, y, q: (X.astype(str), y, q), Err(TE, "X", "dtype"), "X"),
    Case("X_complex", lambda X, y, q: (X.astype(complex), y, q), Err(TE, "X", "complex"), "X"),
    Case("X_1d", lambda X, y, q: (X[:, 0], y, q), Err(VE, "X", "2-D"), "X"),
    Case("X_3d", lambda X, y, q: (X[:, :, None], y, q), Err(VE, "X", "2-D"), "X"),
    Case("X_int", lambda X, y, q: ((X * 8).astype(np.int64), y, q), SAME, "X"),
    Case("X_bool", lambda X, y, q: (X > 0, y, q), SAME, "X"),
    Case("X_float32", lambda X, y, q: (X.astype(np.float32), y, q), SAME, "X"),
    Case("X_readonly", lambda X, y, q: (_ro(X), _ro(y), _ro(q)), SAME, "X"),
    Case("X_fortran", lambda X, y, q: (np.asfortranarray(X), y, q), SAME, "X"),
    Case("X_noncontiguous", lambda X, y, q: (np.repeat(X, 2, axis=1)[:, ::2], y[::-1][::-1], q), SAME, "X"),
    Case("X_csr", lambda X, y, q: (sp.csr_matrix(X), y, q), SAME, "X"),
    Case("X_csr_readonly", lambda X, y, q: (_ro_csr(sp.csr_matrix(X)), y, q), SAME, "X"),
    Case("X_csr_unsorted", lambda X, y, q: (_unsorted_csr(X), y, q), SAME, "X"),
    Case("X_csc", lambda X, y, q: (sp.csc_matrix(X), y, q), SAME, "X"),
    Case("X_coo", lambda X, y, q: (sp.coo_matrix(X), y, q), SAME, "X"),
    Case("X_coo_array", lambda X, y, q: (sp.coo_array(X), y, q), SAME, "X"),
    Case("X_lil", lambda X, y, q: (sp.lil_matrix(X), y, q), SAME, "X"),
    Case("X_csr_int64_indices", lambda X, y, q: (_int64_csr(X), y, q), SAME, "X"),
    # column ids beyond int32: the stores keep int32 column indices and must refuse them
    # (learners would need 2**31 coefficients: not run against them)
    Case("X_csr_column_beyond_int32", lambda X, y, q: (_huge_column_csr(X), y, q),
         Err(VE, "n_features", "int32"), "X"),
    Case("X_dask_chunks_split_groups", lambda X, y, q: _dask(X, y, q), SAME, "X"),
]


def _ro(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


def _ro_csr(M):
    for a in (M.data, M.indices, M.indptr):
        a.flags.writeable = False
    return M


def _unsorted_csr(X):
    M = sp.csr_matrix(X)
    # reverse the column order inside every row (still a valid, unsorted CSR)
    idx, dat = M.indices.copy(), M.data.copy()
    for r in range(M.shape[0]):
        a, b = M.indptr[r], M.indptr[r + 1]
        idx[a:b], dat[a:b] = idx[a:b][::-1], dat[a:b][::-1]
    U = sp.csr_matrix((dat, idx, M.indptr.copy()), shape=M.shape)
    U.has_sorted_indices = False
    return U


def _int64_csr(X):
    M = sp.csr_matrix(X)
    return sp.csr_matrix((M.data, M.indices.astype(np.int64), M.indptr.astype(np.int64)), shape=M.shape)


def _huge_column_csr(X):
    """A CSR whose column indices do not fit in int32 (n_features = 2**31 + 4)."""
    M = sp.csr_matrix(X)
    idx = M.indices.astype(np.int64) + 2**31
    return sp.csr_matrix((M.data, idx, M.indptr.astype(np.int64)), shape=(M.shape[0], 2**31 + N_FEAT))


def normalise(expect):
    return expect


def check(outcome_exc, result, reference, expect):
    """Return None if the outcome matches ``expect``, else a message."""
    if isinstance(expect, Err):
        if outcome_exc is None:
            return f"expected {expect.describe()}, got a result"
        if not isinstance(outcome_exc, expect.types):
            return f"expected {expect.describe()}, got {type(outcome_exc).__name__}: {outcome_exc}"
        msg = str(outcome_exc)
        missing = [w for w in expect.words
                   if not any(re.search(r"\b" + re.escape(a) + (r"(?!\d)" if a[-1].isdigit() else ""), msg)
                              for a in w.split("|"))]
        if missing:
            return f"message lacks {missing}: {type(outcome_exc).__name__}: {msg}"
        return None
    if outcome_exc is not None:
        return f"expected to be handled, got {type(outcome_exc).__name__}: {outcome_exc}"
    r, ref = np.asarray(result, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if r.shape != ref.shape:
        return f"result shape {r.shape} != clean {ref.shape}"
    if not np.all(np.isfinite(r)):
        return "result is not finite"
    tol = 1e-5 * max(1.0, float(np.abs(ref).max(initial=0)))
    if not np.allclose(r, ref, rtol=1e-5, atol=tol):
        return f"result differs from the clean input's by {float(np.abs(r - ref).max()):.3g}"
    return None


# ------------------------------------------------------------------ entry points
def canon(X, y, qid):
    """The well-formed equivalent of a SAME case's input (the reference for it)."""
    from streamrank._validation import is_dask

    if is_dask(X):
        X, y, qid = X.compute(), y.compute(), qid.compute()
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        X.sort_indices()
    else:
        X = np.array(X, dtype=np.float64, order="C")
    y = np.array(y, dtype=np.float64)
    qid = None if qid is None else np.array(qid, dtype=np.int64)
    return X, y, qid


def _dense(X):
    return X.toarray() if sp.issparse(X) else np.asarray(X)


def _n_out(y):
    y = np.asarray(y) if not hasattr(y, "compute") else y
    return 1 if y.ndim < 2 or y.shape[1] == 1 else y.shape[1]


def _rows_dump(blocks):
    """Every row as (features..., targets...) — CSR as (row, column, value) triples."""
    parts = []
    for b in blocks:
        y = np.asarray(b.y, dtype=np.float64).reshape(b.n_rows, -1)
        if sp.issparse(b.X):
            C = b.X.tocoo()
            parts.append(np.c_[C.row + b.start, C.col, C.data].ravel())
            parts.append(y.ravel())
        else:
            parts.append(np.c_[np.asarray(b.X, dtype=np.float64), y].ravel())
    return np.concatenate(parts) if parts else np.zeros(0)


def _store_dump(store):
    return _rows_dump(store.blocks(max_rows=8))


def run_store(sparse):
    def run(X, y, qid, tmp):
        import streamrank as sr

        path = tmp / f"store-{next(_counter)}.zarr"
        nf = X.shape[1] if getattr(X, "ndim", 0) == 2 and X.shape[1] > 0 else N_FEAT
        store = sr.GroupStore.create(path, nf, sparse=sparse, n_outputs=_n_out(y) if np.ndim(y) == 2 else 1)
        if sparse and isinstance(X, np.ndarray) and X.ndim == 2 and X.dtype.kind in "fiub":
            X = sp.csr_matrix(X)  # the case is about the values, not the format
        store.append(X, y, qid, batch_id="b")
        return _store_dump(sr.GroupStore.open(path))
    return run


def run_source(X, y, qid, tmp):
    import streamrank as sr

    return _rows_dump(sr.as_source(X, y, qid).blocks(max_rows=8))


def _fit_predict(make):
    def run(X, y, qid, tmp):
        model = make().fit(X, y, qid)
        return model.predict(clean()[0])
    return run


def run_rankrls_partial(X, y, qid, tmp):
    import streamrank as sr

    m = sr.RankRLS(alpha=1.0, solver="primal")
    m.partial_fit(X, y, qid)
    Xc, yc, qc = clean()   # a second, clean day: the state must still be consistent
    m.partial_fit(Xc, np.c_[yc, -yc] if np.ndim(y) == 2 and np.shape(y)[1] == 2 else yc, qc + 1000)
    return m.predict(Xc)


def run_pairwise_partial(X, y, qid, tmp):
    import streamrank as sr

    m = sr.PairwiseSGDRanker(eta0=0.05, l1=0.0)
    m.partial_fit(X, y, qid)
    return m.predict(clean()[0])


def run_transductive(X, y, qid, tmp):
    import streamrank as sr

    Xc = clean()[0]
    return sr.TransductiveRankRLS(kernel="rbf", gamma=0.1).fit_predict(X, y, qid, Xc[:6], np.full(6, 999))


_fitted = {}


def _fitted_model(name):
    import streamrank as sr

    if name not in _fitted:
        X, y, q = clean()
        _fitted[name] = {
            "rankrls": lambda: sr.RankRLS(alpha=1.0).fit(X, y, q),
            "kernel": lambda: sr.KernelRankRLS(kernel="rbf", gamma=0.1).fit(X, y, q),
            "pairwise": lambda: sr.PairwiseSGDRanker(eta0=0.05).fit(X, y, q),
            "bilinear": lambda: sr.SparseSGDRanker(eta0=1.0).partial_fit(X, np.roll(X, 1, 0), X),
        }[name]()
    return _fitted[name]


def run_predict(name):
    def run(X, y, qid, tmp):
        m = _fitted_model(name)
        if name == "bilinear":
            return m.predict(X, X)
        return m.predict(X)
    return run


def run_bilinear_partial(X, y, qid, tmp):
    import streamrank as sr

    m = sr.SparseSGDRanker(eta0=1.0, init="zeros")
    Xc = clean()[0]
    n = np.shape(X)[0]
    m.partial_fit(X, np.roll(Xc, 1, 0)[:n], Xc[:n])
    return m.W_.toarray()


def run_tuple_store(X, y, qid, tmp):
    import streamrank as sr

    path = tmp / f"tuples-{next(_counter)}.zarr"
    nf = X.shape[1] if getattr(X, "ndim", 0) == 2 and X.shape[1] > 0 else N_FEAT
    store = sr.TupleStore.create(path, nf, N_FEAT)
    n = X.shape[0]
    t = np.c_[np.arange(n), np.arange(n) % N_ROWS, (np.arange(n) + 1) % N_ROWS]
    store.append(X, clean()[0], t, batch_id="b")
    s = sr.TupleStore.open(path)
    return np.c_[_dense(s.Q)]


def run_metric(fn):
    def run(X, y, qid, tmp):
        import streamrank as sr

        score = X[:, 0] if getattr(X, "ndim", 0) == 2 and not sp.issparse(X) and X.shape[1] else X
        out = np.atleast_1d(getattr(sr.metrics, fn)(y, score, qid, per_query=True))
        # a skipped query (NDCG: ideal DCG <= 0, e.g. only negative labels in its ideal top k) is NaN by
        # contract; mark it so that skipping exactly the clean input's queries compares equal
        return np.where(np.isnan(out), -1.0, out) if fn == "ndcg" else out
    return run


def run_err(X, y, qid, tmp):
    """ERR needs grades in [0, max_grade]: the table's signed labels enter as |y| (NaN and inf stay bad)."""
    import streamrank as sr

    score = X[:, 0] if getattr(X, "ndim", 0) == 2 and not sp.issparse(X) and X.shape[1] else X
    ya = np.asarray(y) if not sp.issparse(y) else y
    if getattr(ya, "dtype", None) is not None and ya.dtype.kind in "fi":
        y = np.abs(ya)
    return np.atleast_1d(sr.metrics.err(y, score, qid, max_grade=10, per_query=True))


def run_auc(X, y, qid, tmp):
    import streamrank as sr

    score = X[:, 0] if getattr(X, "ndim", 0) == 2 and not sp.issparse(X) and X.shape[1] else X
    return np.atleast_1d(sr.metrics.auc(np.asarray(y) > 0 if np.asarray(y).dtype.kind == "f" else y, score))


_counter = itertools.count()


@dataclasses.dataclass
class Entry:
    name: str
    run: object
    takes: str                                   # inputs it takes, among "X", "y", "qid"
    names: dict = dataclasses.field(default_factory=dict)  # case word -> argument name here
    overrides: dict = dataclasses.field(default_factory=dict)  # case name -> Err | SAME | NA


_SPARSE_CASES = ("neginf_X_csr", "X_csr", "X_csr_readonly", "X_csr_unsorted", "X_csc", "X_coo",
                 "X_coo_array", "X_lil", "X_csr_int64_indices", "X_csr_column_beyond_int32")
_DENSE_ONLY = {c: Err(TE, "X", "sparse") for c in _SPARSE_CASES if c not in ("neginf_X_csr",)}
_NOT_SCORES = {c: NA for c in _SPARSE_CASES + ("X_1d", "X_3d", "zero_features", "X_complex",
                                                "X_dask_chunks_split_groups")}

_EMPTY_OK = {"empty": SAME}   # an empty batch / prediction on 0 rows is well defined
_ONE_D = {"y_multioutput": Err(VE, "y_true", "1-D")}

ENTRIES = [
    Entry("GroupStore.append (dense)", run_store(False), "X y qid",
          overrides=dict(_DENSE_ONLY, neginf_X_csr=Err(TE, "X", "sparse"), **_EMPTY_OK)),
    Entry("GroupStore.append (csr)", run_store(True), "X y qid",
          overrides=dict({c: Err(TE, "X", "sparse") for c in ("X_object", "X_str", "X_complex", "X_1d", "X_3d",
                                                              "X_dask_chunks_split_groups")}, **_EMPTY_OK)),
    Entry("as_source().blocks", run_source, "X y qid", overrides=dict(_EMPTY_OK)),
    Entry("RankRLS.fit (primal)", _fit_predict(lambda: __import__("streamrank").RankRLS(solver="primal")),
          "X y qid"),
    Entry("RankRLS.fit (cg)", _fit_predict(lambda: __import__("streamrank").RankRLS(solver="cg", tol=1e-12)),
          "X y qid"),
    Entry("RankRLS.partial_fit", run_rankrls_partial, "X y qid"),
    Entry("KernelRankRLS.fit (dual)",
          _fit_predict(lambda: __import__("streamrank").KernelRankRLS(kernel="rbf", gamma=0.1)), "X y qid"),
    Entry("KernelRankRLS.fit (n_basis)",
          _fit_predict(lambda: __import__("streamrank").KernelRankRLS(kernel="rbf", gamma=0.1, n_basis=30)),
          "X y qid"),
    Entry("TransductiveRankRLS.fit_predict", run_transductive, "X y qid",
          names={"X": "X_lab", "y": "y_lab", "qid": "qid_lab"}),
    Entry("PairwiseSGDRanker.fit", _fit_predict(lambda: __import__("streamrank").PairwiseSGDRanker(eta0=0.05)),
          "X y qid"),
    Entry("PairwiseSGDRanker.partial_fit", run_pairwise_partial, "X y qid"),
    Entry("SparseSGDRanker.partial_fit", run_bilinear_partial, "X", names={"X": "Q"}),
    Entry("TupleStore.append", run_tuple_store, "X", names={"X": "Q", "n_features": "n_query_features"}, overrides=dict(_EMPTY_OK)),
    Entry("RankRLS.predict", run_predict("rankrls"), "X", overrides=dict(_EMPTY_OK)),
    Entry("KernelRankRLS.predict", run_predict("kernel"), "X", overrides=dict(_EMPTY_OK)),
    Entry("PairwiseSGDRanker.predict", run_predict("pairwise"), "X", overrides=dict(_EMPTY_OK)),
    Entry("SparseSGDRanker.score", run_predict("bilinear"), "X", names={"X": "Q"}),
    Entry("metrics.ndcg", run_metric("ndcg"), "X y qid",  names={"X": "y_score", "y": "y_true"},
          overrides=dict(_NOT_SCORES, **_EMPTY_OK, **_ONE_D)),
    Entry("metrics.disagreement", run_metric("disagreement"), "X y qid",
          names={"X": "y_score", "y": "y_true"}, overrides=dict(_NOT_SCORES, **_EMPTY_OK, **_ONE_D)),
    Entry("metrics.mean_average_precision", run_metric("mean_average_precision"), "X y qid",
          names={"X": "y_score", "y": "y_true"}, overrides=dict(_NOT_SCORES, **_EMPTY_OK, **_ONE_D)),
    Entry("metrics.precision", run_metric("precision"), "X y qid",
          names={"X": "y_score", "y": "y_true"}, overrides=dict(_NOT_SCORES, **_EMPTY_OK, **_ONE_D)),
    Entry("metrics.recall", run_metric("recall"), "X y qid",
          names={"X": "y_score", "y": "y_true"}, overrides=dict(_NOT_SCORES, **_EMPTY_OK, **_ONE_D)),
    Entry("metrics.reciprocal_rank", run_metric("reciprocal_rank"), "X y qid",
          names={"X": "y_score", "y": "y_true"}, overrides=dict(_NOT_SCORES, **_EMPTY_OK, **_ONE_D)),
    Entry("metrics.err", run_err, "X y qid",
          names={"X": "y_score", "y": "y_true"}, overrides=dict(_NOT_SCORES, **_EMPTY_OK, **_ONE_D)),
]


_HUGE_OK = ("GroupStore.append (csr)", "TupleStore.append", "as_source().blocks")


def expectation(entry: Entry, case: Case):
    if case.needs not in entry.takes.split():
        return NA
    if case.name == "X_csr_column_beyond_int32" and entry.name not in _HUGE_OK:
        return NA
    if case.name == "X_csr_column_beyond_int32" and entry.name == "as_source().blocks":
        return SAME
    if case.name in entry.overrides:
        return entry.overrides[case.name]
    if case.name in case.overrides:
        return case.overrides[case.name]
    e = case.expect
    if isinstance(e, Err) and entry.names:
        e = Err(e.types, *[entry.names.get(w, w) for w in e.words])
    return e


def outcome(entry: Entry, case: Case, tmp):
    """(expect, problem or None, short outcome text)."""
    expect = expectation(entry, case)
    if expect is NA:
        return NA, None, "n/a"
    X, y, q = case.make(*clean())
    exc = result = ref = None
    try:
        result = entry.run(X, y, q, tmp)
    except Exception as e:  # noqa: BLE001 - the table records every outcome
        exc = e
    if expect == SAME and exc is None:
        ref = entry.run(*canon(X, y, q), tmp)
        r = np.asarray(result)
        if np.ndim(ref) + 1 == r.ndim and r.shape[-1] != np.shape(ref)[-1]:
            r = r[..., 0]
        result = r
    problem = check(exc, result, ref, expect)
    text = "handled" if exc is None else f"{type(exc).__name__}: {str(exc)[:110]}"
    return expect, problem, text


def main():  # pragma: no cover - prints the table for the report
    import pathlib
    import tempfile
    import warnings

    warnings.simplefilter("ignore")
    tmp = pathlib.Path(tempfile.mkdtemp())
    bad = 0
    for entry in ENTRIES:
        for case in CASES:
            expect, problem, text = outcome(entry, case, tmp)
            if expect is NA:
                continue
            flag = "FAIL" if problem else "ok  "
            bad += bool(problem)
            print(f"{flag} | {entry.name} | {case.name} | {text}" + (f" || {problem}" if problem else ""))
    print(f"{bad} failing")


if __name__ == "__main__":
    main()
