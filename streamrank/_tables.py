"""Tables in, by name (DESIGN §6): pandas DataFrames and pyarrow Tables as ``X``.

* :func:`split_table` turns ``(table, y, qid)`` into arrays plus the feature
  names: ``y`` and ``qid`` may be column names of the table (those columns
  are then not features), Series/arrays, or ``None``.  A column named
  ``qid``, ``query_id`` or ``group`` while ``qid`` is not given is refused —
  a query id never trains as a feature by accident.
* :func:`table_for_predict` matches a table's columns to a model's
  ``feature_names_in_`` by name: reordered when in another order, a clear
  error naming missing or extra columns.

pandas and pyarrow are never imported here unless the caller already passed
one of their objects (the optional ``parquet`` extra).
"""
from __future__ import annotations

import numpy as np

__all__ = ["QID_COLUMN_NAMES", "is_table", "split_table", "table_for_predict", "table_columns",
           "require_pyarrow"]

#: Column names taken for query ids; never features unless the user names qid= explicitly.
QID_COLUMN_NAMES = ("qid", "query_id", "group")


def require_pyarrow(what: str = "Parquet input"):
    """Import pyarrow (and pyarrow.parquet/dataset) or raise one line naming the extra."""
    try:
        import pyarrow  # noqa: F401
        import pyarrow.dataset  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ImportError(f"{what} needs pyarrow: pip install 'streamrank[parquet]'") from None
    return pyarrow


def _kind(X) -> str | None:
    mod = type(X).__module__
    name = type(X).__name__
    if mod.startswith("pandas") and name == "DataFrame":
        return "pandas"
    if mod.startswith("pyarrow") and name in ("Table", "RecordBatch"):
        return "arrow"
    return None


def is_table(X) -> bool:
    """True for a pandas DataFrame, a pyarrow Table or RecordBatch."""
    return _kind(X) is not None


def table_columns(X) -> list:
    """Column names of a table, in order."""
    return list(X.columns) if _kind(X) == "pandas" else list(X.column_names)


def _column(X, name):
    if _kind(X) == "pandas":
        return X[name]
    return X.column(name)


def _numeric_column(X, name, n) -> np.ndarray:
    """One feature column as a 1-D numeric numpy array; nulls/strings refused naming the column."""
    col = _column(X, name)
    if _kind(X) == "arrow":
        import pyarrow as pa
        import pyarrow.compute as pc

        if col.null_count:
            row = int(pc.index(pc.is_null(col), True).as_py())
            raise ValueError(f"X column {name!r} is null at row {row}; expected a number in every row")
        t = col.type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                or pa.types.is_decimal(t)):
            raise TypeError(f"X column {name!r} has type {t}; expected numbers (a query id or label column "
                            f"belongs in qid=/y=, e.g. qid={name!r})")
        a = col.to_numpy() if not pa.types.is_decimal(t) else col.cast(pa.float64()).to_numpy()
        return np.asarray(a)
    a = col.to_numpy()
    if a.dtype.kind not in "fiub":
        if a.dtype.kind == "O":
            try:
                return np.asarray(a, dtype=np.float64)
            except (TypeError, ValueError):
                pass
        raise TypeError(f"X column {name!r} has dtype {col.dtype}; expected numbers (a query id or label "
                        f"column belongs in qid=/y=, e.g. qid={name!r})")
    return a


def _aux(X, v, what):
    """y/qid given as a column name -> that column (and the name to drop from the features).

    A pandas Series taken from X itself (``df["label"]``: its name is a column
    of X holding the same values) counts as that column: it is not a feature.
    """
    if _kind(X) == "pandas" and type(v).__name__ == "Series" and v.name in set(X.columns):
        col = X[v.name]
        if col is v or (len(col) == len(v) and col.index.equals(v.index) and col.equals(v)):
            v = v.name
    if isinstance(v, str):
        cols = table_columns(X)
        if v not in cols:
            raise KeyError(f"{what}={v!r} is not a column of X; columns: {cols[:8]}"
                           f"{' ...' if len(cols) > 8 else ''}")
        col = _column(X, v)
        if _kind(X) == "arrow":
            col = col.combine_chunks() if hasattr(col, "combine_chunks") else col
        return col, v
    return v, None


def _dense(X, names, n):
    """The named columns as one C-ordered array: float32 when every column is float32, else float64."""
    cols = [_numeric_column(X, c, n) for c in names]
    dtype = np.float32 if cols and all(c.dtype == np.float32 for c in cols) else np.float64
    out = np.empty((n, len(cols)), dtype=dtype)
    for j, c in enumerate(cols):
        out[:, j] = c
    return out


def _names_of(cols):
    """Feature names when every column name is a string (scikit-learn's rule), else None."""
    return [str(c) for c in cols] if cols and all(isinstance(c, str) for c in cols) else None


def split_table(X, y=None, qid=None, *, need_y: bool = True):
    """``(X array, y, qid, feature_names)`` from a table and column names / arrays.

    Raises ``ValueError`` when ``qid`` is None and the table has a column
    named ``qid``, ``query_id`` or ``group`` (any case).
    """
    n = X.num_rows if _kind(X) == "arrow" else len(X)
    y, y_col = _aux(X, y, "y")
    qid, q_col = _aux(X, qid, "qid")
    drop = {c for c in (y_col, q_col) if c is not None}
    cols = [c for c in table_columns(X) if c not in drop]
    hit = [c for c in cols if isinstance(c, str) and c.lower() in QID_COLUMN_NAMES]
    if hit and qid is not None:
        raise ValueError(
            f"X has a column named {hit[0]!r} besides the qid= given: a query id must not be trained on as a "
            f"feature. Pass qid={hit[0]!r} to use that column, or drop or rename it if it really is a feature")
    if q_col is None and qid is None:
        if hit:
            raise ValueError(
                f"X has a column named {hit[0]!r} but qid= was not given: a query id must not be trained on "
                f"as a feature. Pass qid={hit[0]!r} to group rows by it (the column is then not a feature), "
                f"or drop or rename the column if it really is a feature")
    if y is None and need_y:
        raise TypeError("fit(X, y, qid) needs y: an array, or the name of X's label column (y='label')")
    if len(set(map(str, cols))) != len(cols):
        raise ValueError("X has repeated column names; feature columns must be unique")
    return _dense(X, cols, n), y, qid, _names_of(cols)


def missing_and_extra(have, want) -> tuple[list, list]:
    """Names of ``want`` absent from ``have``, and names of ``have`` not in ``want`` (each in its order)."""
    have_set, want_set = set(have), set(want)
    return [f for f in want if f not in have_set], [c for c in have if c not in want_set]


def reorder_by_name(Xa, names, want, mismatch: str, extra_label: str = "unexpected", shown: int = 8):
    """The columns of ``Xa`` (named ``names``) in the order of ``want``; ``mismatch`` opens the error."""
    missing, extra = missing_and_extra(names, want)
    if missing or extra:
        raise ValueError(f"{mismatch}: missing {missing[:shown]}, {extra_label} {extra[:shown]}")
    pos = {c: j for j, c in enumerate(names)}
    return np.ascontiguousarray(Xa[:, [pos[f] for f in want]])


def table_for_predict(X, feature_names, n_features: int, who: str) -> np.ndarray:
    """A table's feature columns in the model's order (matched by name when the model has names)."""
    cols = table_columns(X)
    n = X.num_rows if _kind(X) == "arrow" else len(X)
    if feature_names is None:
        hit = [c for c in cols if isinstance(c, str) and c.lower() in QID_COLUMN_NAMES]
        if hit and len(cols) != n_features:
            raise ValueError(f"X has a column named {hit[0]!r}; drop the query id column before predict")
        if len(cols) != n_features:
            raise ValueError(f"X has {len(cols)} columns, but {who} was fitted with {n_features} features "
                             "(fitted without feature names, so columns are taken by position)")
        return _dense(X, cols, n)
    want = [str(f) for f in feature_names]
    have = [str(c) for c in cols]
    missing, extra = missing_and_extra(have, want)
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing column(s) {missing[:8]}{' ...' if len(missing) > 8 else ''}")
        if extra:
            parts.append(f"unexpected column(s) {extra[:8]}{' ...' if len(extra) > 8 else ''}")
        raise ValueError(f"X does not have the features {who} was fitted with: {'; '.join(parts)} "
                         "(select the model's columns: X[list(model.feature_names_in_)])")
    if len(set(have)) != len(have):
        raise ValueError("X has repeated column names; feature columns must be unique")
    by_name = {str(c): c for c in cols}
    return _dense(X, [by_name[f] for f in want], n)
