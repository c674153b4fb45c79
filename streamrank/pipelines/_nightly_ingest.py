"""Nightly pipeline, step 1: ingest day files into the store in bounded chunks, idempotently.

A day's ``batch_id`` is ``"sha256:<hex>"``, the hash of its content
(:func:`content_hash`, read in 1 MiB pieces).  The day is read in chunks of
whole query groups (:func:`iter_day`: svmlight/LETOR text through
:func:`streamrank.io.svmlight.iter_svmlight`, ``.npz`` through
:func:`streamrank.io.npz.iter_npz`, a GroupStore block by block), at most
``chunk_bytes`` of input at a time, and every chunk is one atomic append:

* the chunk starting at row r of the day gets ``"sha256:<hex>#<r>"``, the
  day's last chunk the plain ``"sha256:<hex>"`` — so the plain id in the log
  means *the whole day is in the store* (a one-chunk day is one batch with the
  plain id, as before), and a duplicated night is recognised without reading
  the file;
* a killed ingest leaves the store at its last committed chunk (each append
  is atomic; the next append cuts the torn tail).  The rerun finds the day's
  committed chunks, skips their rows (``#<r>`` ids are row offsets, so the
  chunk size may even change between runs) and appends the rest.
* a day that stopped at a bad line (an append refused a chunk: the chunks
  before it stay committed) resumes when the user fixes the line and re-runs
  the same night: the fixed file has another content hash ``H2``, but its
  first rows are compared with the rows the store holds of the incomplete
  newest day ``H1`` (values, labels and query ids, exactly); when they are
  the same, only the rest is appended, as ``"H1#<r>~H2"`` and finally
  ``"H1#~H2"`` (the day keeps its batch ``H1`` — the group identity of its
  queries — and ``~H2`` records the file that completed it, so the re-run
  after that is a no-op: every row once).  A file whose first rows differ is
  another day (ingested whole; the incomplete day stays as committed).

Memory is one chunk (two with the one-chunk lookahead that finds the last
one) plus the largest query, whatever the size of the day.

Tuple days (``--learner sgd-bilinear``): an ``.npz`` of ``Q``, ``D``,
``tuples`` is one append (read whole; ``Q``/``D`` of one day); a TupleStore
day is copied piece by piece (:func:`streamrank.io.tuple_copy.copy_tuple_store`,
ids ``"sha256:<hex>#<batch>.<piece>"``), resumable the same way.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import streamrank as sr
from streamrank._phases import phase
from streamrank.io import with_last

__all__ = ["content_hash", "iter_day", "read_day", "ingest", "day_entries", "day_base", "day_complete",
           "day_span", "newest_day",
           "read_tuple_day", "ingest_tuples", "verify_new"]

DEFAULT_CHUNK_BYTES = 8 << 20
logger = logging.getLogger(__name__)


_ARCHIVES = (".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")


def archive_member(path):
    """``(archive, member)`` of a day named ``ARCHIVE.tar.gz:MEMBER`` (as ``streamrank ingest`` takes it), else
    None; a missing archive or member is a FileNotFoundError naming it."""
    text = str(path)
    for ext in _ARCHIVES:
        i = text.find(ext + ":")
        if i > 0 and not Path(text).exists():
            archive, member = text[:i + len(ext)], text[i + len(ext) + 1:]
            if not Path(archive).is_file():
                raise FileNotFoundError(f"{archive} does not exist (the archive of the day {text})")
            import tarfile

            with tarfile.open(archive, "r:*") as tf:
                try:
                    tf.getmember(member)
                except KeyError:
                    raise FileNotFoundError(f"{archive} has no member {member!r}") from None
            return archive, member
    return None


def _open_member(archive, member):
    import tarfile

    tf = tarfile.open(archive, "r:*")
    f = tf.extractfile(member)
    if f is None:
        tf.close()
        raise ValueError(f"{archive}:{member} is not a regular file")
    return tf, f


def content_hash(path) -> str:
    """``sha256:<hex>`` of a day's content: file bytes (a member's, for ``ARCHIVE:MEMBER``), or a zarr store's
    logged batch checksums."""
    p = Path(path)
    h = hashlib.sha256()
    am = archive_member(path)
    if am is not None:
        tf, f = _open_member(*am)
        with tf, f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    elif p.is_dir():
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


def _rows_for(chunk_bytes, row_bytes):
    return max(1, int(chunk_bytes) // max(1, int(row_bytes)))


def _parquet_day(p, columns, sparse, chunk_bytes, feature_names):
    """A Parquet day (file or directory of part files) in chunks of whole queries, in the store's column order."""
    from streamrank.io.parquet import iter_parquet

    c = {"label": "label", "qid": "qid", "features": None, "feature_prefix": None, **(columns or {})}
    # a store with names takes its columns by name, in its order (a missing one is an error)
    feats = feature_names if feature_names is not None else c["features"]
    for ch in iter_parquet(p, label=c["label"], qid=c["qid"], features=feats,
                           feature_prefix=None if feats is not None else c["feature_prefix"],
                           sparse=sparse, chunk_rows=_parquet_rows(chunk_bytes), columns=c.get("row_columns")):
        yield _Chunk(ch.X, ch.y, ch.qid, ch.feature_names, ch.columns)


class _Chunk(tuple):
    """``(X, y, qid)`` with the feature names of a Parquet chunk and the day's row columns
    (``row_cols``: store column -> values, :mod:`streamrank.io.row_columns`; None: none)."""

    def __new__(cls, X, y, qid, feature_names=None, row_cols=None):
        t = super().__new__(cls, (X, y, qid))
        t.feature_names = feature_names
        t.row_cols = row_cols or None
        return t


def _parquet_rows(chunk_bytes):
    """Rows per Parquet chunk for an input budget of ``chunk_bytes`` (about 256 bytes a row)."""
    return max(1024, int(chunk_bytes) // 256)


def _is_parquet(p: Path) -> bool:
    return p.suffix in (".parquet", ".pq") or (p.is_dir() and not (p / "zarr.json").exists()
                                                and any(p.rglob("*.parquet")))


def iter_day(path, *, n_features=None, sparse=False, chunk_bytes=DEFAULT_CHUNK_BYTES, columns=None,
             feature_names=None):
    """One day's ``(X, y, qid)`` in chunks of whole query groups, about ``chunk_bytes`` of input each.

    ``.npz`` (``X``, ``y``, ``qid``), a GroupStore directory, Parquet (a file
    or a directory of part files; ``columns`` names the label, qid and feature
    columns, see :func:`streamrank.io.parquet.iter_parquet`; features are
    matched to ``feature_names``, the store's), or svmlight/LETOR
    text (plain or gzip; ``n_features`` None: inferred from the first chunk).
    ``X`` comes as CSR when ``sparse``, else dense.
    """
    p = Path(path)
    am = archive_member(path)

    def conv(X):
        if sparse and not sp.issparse(X):
            return sp.csr_matrix(X)
        if not sparse and sp.issparse(X):
            return X.toarray()
        return X

    if am is not None:                          # a member of a tar archive: LETOR text, read in place
        from streamrank.io.svmlight import iter_svmlight

        tf, f = _open_member(*am)
        with tf, f:
            for chunk in iter_svmlight(f, n_features=n_features, dense=not sparse, chunk_bytes=int(chunk_bytes),
                                       name=str(path)):
                if chunk.qid is None:
                    raise ValueError(f"{path}: the day file has no qid: fields; nightly logs need query ids")
                yield chunk
    elif _is_parquet(p):
        yield from _parquet_day(p, columns, sparse, chunk_bytes, feature_names)
    elif p.is_dir():
        store = sr.GroupStore.open(p)
        if not store.n_rows:
            raise ValueError(f"{p}: the day's store is empty")
        rows = _rows_for(chunk_bytes, 4 * store.n_features + 16)
        for b in store.blocks(max_rows=rows, prefetch=False):     # its row columns travel with the rows
            yield _Chunk(conv(b.X), b.y, b.row_qid(),
                         row_cols={c: store.read_column(c, b.start, b.stop) for c in store.row_columns})
    elif p.suffix == ".npz":
        from streamrank.io.npz import iter_npz

        named = (columns or {}).get("row_columns")
        for ch in iter_npz(p, chunk_bytes=chunk_bytes, columns=named):
            yield _Chunk(conv(ch[0]), ch[1], ch[2], row_cols=ch[3] if named else None)
    else:
        from streamrank.io.svmlight import iter_svmlight

        for chunk in iter_svmlight(str(p), n_features=n_features, dense=not sparse,
                                   chunk_bytes=int(chunk_bytes)):
            if chunk.qid is None:
                raise ValueError(f"{p}: the day file has no qid: fields; nightly logs need query ids")
            yield chunk   # (X, y, qid) with .lines: the text line of each row, for error messages


def read_day(path, *, n_features=None, sparse=False):
    """One day's ``(X, y, qid)`` read whole (the chunks of :func:`iter_day` joined; for small days)."""
    parts = list(iter_day(path, n_features=n_features, sparse=sparse))
    if not parts:
        raise ValueError(f"{path}: the day holds no rows")
    X = sp.vstack([a for a, _, _ in parts], format="csr") if sparse else np.concatenate([a for a, _, _ in parts])
    return X, np.concatenate([b for _, b, _ in parts]), np.concatenate([c for _, _, c in parts])


def _id(e) -> str:
    return str(e.get("batch_id") or "")


def day_base(log, bid) -> str:
    """The batch of the day that file content ``bid`` belongs to: ``bid``, or the day it resumed."""
    for e in log:
        i = _id(e)
        if "#" in i and i.endswith("~" + bid):
            return i.split("#", 1)[0]
    return bid


def day_complete(log, bid) -> bool:
    """Whether the whole of file content ``bid`` is in the store (its day's last chunk is committed)."""
    return any(_id(e) == bid or _id(e).endswith("#~" + bid) for e in log)


def day_entries(log, bid):
    """Log entries of the day of content hash ``bid`` (its chunks ``base#<row>[~bid]`` and the last one)."""
    base = day_base(log, bid)
    return [e for e in log if _id(e) == base or _id(e).startswith(base + "#")]


def day_span(entries, key="groups"):
    """``[first, last)`` of ``key`` over a day's entries (contiguous unless a crash interleaved days)."""
    if not entries:
        return None
    return [min(e[key][0] for e in entries), max(e[key][1] for e in entries)]


def newest_day(log):
    """The trailing run of log entries that belong to the newest day (same content hash), oldest first."""
    if not log:
        return []
    day = _id(log[-1]).split("#")[0]
    out = []
    for e in reversed(log):
        if _id(e).split("#")[0] != day:
            break
        out.append(e)
    return out[::-1]


def _store_at(store_path, storage_options=None):
    """``(location, exists?, open/create keyword arguments)`` of a store path or URL (object storage)."""
    from streamrank.io import is_url

    if is_url(store_path):
        from streamrank.io import open_location

        url = str(store_path)
        return url, open_location(url, storage_options).exists("zarr.json"), {"storage_options": storage_options}
    p = Path(store_path)
    return p, (p / "zarr.json").exists(), {}


def ingest(store_path, files, *, sparse=False, chunk_bytes=DEFAULT_CHUNK_BYTES, columns=None, storage_options=None,
           observe=None):
    """Append each day file to the store (created from the first chunk); idempotent by content hash.

    Returns one dict per file: ``batch_id`` (the day's hash), ``file``,
    ``appended`` (False: the whole day was already in the store), ``chunks``
    appended tonight, the ``rows`` and ``groups`` span of the day and
    ``batch_ids`` (every log entry of the day).  ``observe(content_hash)``: a profile
    (:class:`streamrank.pipelines._nightly_checks.DayProfile`) fed every chunk of the day as it is read —
    the data checks' statistics in the ingest's own pass (a day already whole in the store is not read).
    """
    store_path, exists, opts = _store_at(store_path, storage_options)    # a directory or a URL
    store = sr.GroupStore.open(store_path, mode="a", **opts) if exists else None
    out = []
    for f in files:
        bid = content_hash(f)
        log = store.batches if store is not None else []
        appended = 0
        if not day_complete(log, bid):
            base = day_base(log, bid)
            resumes = _incomplete_day(log) if base == bid and not day_entries(log, bid) else None
            if resumes is not None:        # a fixed file of the day that stopped at a bad line?
                try:
                    appended, store = _append_day(store, store_path, f, resumes, bid, log, sparse, chunk_bytes,
                                                  columns, same_prefix=True, opts=opts,
                                                  profile=observe(bid) if observe else None)
                except _PrefixDiffers:
                    logger.warning("%s: its first rows differ from the incomplete day %s in the store: "
                                   "ingested as a new day (the incomplete day stays as committed)", f, resumes)
                    resumes = None
            if resumes is None:
                appended, store = _append_day(store, store_path, f, base, bid, log, sparse, chunk_bytes, columns,
                                              opts=opts, profile=observe(bid) if observe else None)
        entries = day_entries(store.batches, bid)
        out.append({"batch_id": bid, "file": str(f), "appended": bool(appended), "chunks": appended,
                    "rows": day_span(entries, "rows"), "groups": day_span(entries, "groups"),
                    "batch_ids": [e["batch_id"] for e in entries]})
    return out


class _PrefixDiffers(Exception):
    """The file's first rows are not the committed rows of the day it would resume."""


def _incomplete_day(log):
    """The batch of the newest day if its last chunk was never committed (a bad line stopped it), else None."""
    day = newest_day(log)
    if not day:
        return None
    base = _id(day[0]).split("#")[0]
    if not base or any(_id(e) == base or "#~" in _id(e) for e in day):
        return None
    return base


def _append_day(store, store_path, f, base, bid, log, sparse, chunk_bytes, columns, same_prefix=False, opts=None,
                profile=None):
    """Append the rows of day file ``f`` that the store does not hold yet; ``(chunks appended, store)``.

    ``base``: the day's batch (``bid``, or the day this file resumes).  The
    day's committed rows are skipped; with ``same_prefix`` they are first
    compared with the file's (:class:`_PrefixDiffers` if they differ).  ``profile``: fed every chunk of
    the file (committed ones too: they are read anyway), for the data checks.
    """
    entries = day_entries(log, base)
    done = sum(e["rows"][1] - e["rows"][0] for e in entries)   # a killed run's / a stopped day's chunks
    day_r0 = min((e["rows"][0] for e in entries), default=0)
    appended = 0
    store_qid = store.qid if same_prefix and store is not None else None     # read once (string ids: all groups)
    r = 0   # row of the day at which the current chunk starts
    chunks = iter_day(f, n_features=store.n_features if store is not None else None,
                      sparse=store.sparse if store is not None else sparse, chunk_bytes=chunk_bytes,
                      columns=columns, feature_names=store.feature_names if store is not None else None)
    with phase(f"ingest {Path(f).name}", None, "rows") as ph:   # rows appended (or skipped: committed)
        for chunk, last in with_last(chunks):
            X, y, qid = chunk
            lines = getattr(chunk, "lines", None)
            cols = getattr(chunk, "row_cols", None) or {}
            k = len(y)
            if profile is not None:
                profile.add(X, y, qid, cols, getattr(chunk, "feature_names", None))
            if same_prefix and r < done:
                _compare_prefix(store, store_qid, day_r0 + r, X[: done - r], y[: done - r], qid[: done - r])
            if r + k <= done and not last:
                r += k
                continue
            if r < done:   # the committed part ends inside this chunk (another chunk size before)
                cut = done - r
                if cut >= k or qid[cut - 1] == qid[cut]:
                    if same_prefix:
                        raise _PrefixDiffers()
                    raise ValueError(f"{f}: the store holds {done} rows of this day, which do not end "
                                     "on a query boundary of the file; was the file changed?")
                X, y, qid, r = X[cut:], y[cut:], qid[cut:], done
                lines = None if lines is None else lines[cut:]
                cols = {c: v[cut:] for c, v in cols.items()}
            if store is None:
                store = sr.GroupStore.create(store_path, n_features=X.shape[1], sparse=sp.issparse(X),
                                             n_outputs=1 if np.ndim(y) == 1 else np.shape(y)[1],
                                             feature_names=getattr(chunk, "feature_names", None),
                                             row_columns=tuple(cols), **(opts or {}))
            if base == bid:
                batch_id = bid if last else f"{bid}#{r}"
            else:          # a fixed file completing day `base`: the same batch, and which file completed it
                batch_id = f"{base}#~{bid}" if last else f"{base}#{r}~{bid}"
            try:
                appended += bool(store.append(X, y, qid, batch_id=batch_id, **cols))
            except ValueError as exc:
                raise _partial_day_error(exc, f, store, base, qid, lines) from None
            r += len(y)
            ph.update(len(y))
    if store is None:
        raise ValueError(f"{f}: the day holds no rows")
    if same_prefix and r < done:
        raise _PrefixDiffers()
    return appended, store


def _compare_prefix(store, store_qid, r0, X, y, qid):
    """Raise :class:`_PrefixDiffers` unless rows ``r0...`` of the store are ``X, y, qid`` (as stored);
    ``store_qid``: ``store.qid``."""
    k = len(y)
    if k == 0:
        return
    if r0 + k > store.n_rows:
        raise _PrefixDiffers()
    SX, Sy = store._read_rows(r0, r0 + k)            # the BlockSource hook: checked rows
    gp = store.group_ptr
    g = np.searchsorted(gp, [r0, r0 + k - 1], side="right") - 1
    sizes = np.diff(np.clip(gp[g[0] : g[1] + 2], r0, r0 + k))
    sq = np.repeat(np.asarray(store_qid[g[0] : g[1] + 1]), sizes)
    try:
        if sp.issparse(X) != sp.issparse(SX) or X.shape != SX.shape:
            raise _PrefixDiffers()
        if sp.issparse(X):
            same_x = (sp.csr_matrix(X, dtype=np.float32) != SX).nnz == 0
        else:
            same_x = np.array_equal(np.asarray(X, dtype=np.float32), SX)
        same = (same_x and np.array_equal(np.asarray(y, dtype=np.float64).reshape(Sy.shape), Sy)
                and np.array_equal(np.asarray(qid).astype(sq.dtype), sq))
    except (ValueError, TypeError):        # another kind of qid / shape: not the same rows
        same = False
    if not same:
        raise _PrefixDiffers()


def _partial_day_error(exc, f, store, bid, qid, lines):
    """The append error of a day's chunk, naming the line and what of the day is already committed."""
    from streamrank.io.groups import offending_row

    row = offending_row(store, qid)
    where = f" (line {int(lines[row])})" if lines is not None and len(lines) > row else ""
    entries = day_entries(store.batches, bid)
    if not entries:
        return ValueError(f"{f}{where}: {exc}; nothing of this day was committed")
    rows = sum(e["rows"][1] - e["rows"][0] for e in entries)
    fix = f"fix line {int(lines[row])}" if where else "fix the file"
    return ValueError(f"{f}{where}: {exc}; committed {rows:,} rows of this day in {len(entries)} batch(es) "
                      f"before it (they stay in the store; a store has no undo): {fix} and re-run the same "
                      "night: it resumes after the committed rows")


# ------------------------------------------------------------------ tuples
def read_tuple_day(path):
    """One day of tuples from an ``.npz`` with ``Q``, ``D`` (dense or CSR parts ``Q_data``,
    ``Q_indices``, ``Q_indptr``, ``Q_shape``), ``tuples`` (rows local to this file's Q and D),
    optional ``magnitudes``."""
    p = Path(path)
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


def ingest_tuples(store_path, files, storage_options=None, observe=None):
    """Append each tuple day to a TupleStore (created from the first); idempotent by content hash.

    ``observe(content_hash)``: a profile fed an ``.npz`` day's tuples once they are appended (a TupleStore
    day is copied piece by piece and profiled from the store by the data checks)."""
    from streamrank.io.tuple_copy import copy_tuple_store

    store_path, exists, opts = _store_at(store_path, storage_options)    # a directory or a URL
    store = sr.TupleStore.open(store_path, mode="a", **opts) if exists else None
    out = []
    for f in files:
        bid = content_hash(f)
        log = store.log if store is not None else []
        appended = False
        if Path(f).is_dir():
            src = sr.TupleStore.open(f)
            if store is None:
                store = sr.TupleStore.create(store_path, src.n_query_features, src.n_item_features, **opts)
            counts = {"tuples": 0, "skipped_tuples": 0, "batches": 0, "skipped": 0}
            copy_tuple_store(src, store, bid, counts)
            appended = counts["batches"] > 0
        elif not any(e.get("batch_id") == bid for e in log):
            Q, D, tup, mag = read_tuple_day(f)
            if store is None:
                store = sr.TupleStore.create(store_path, Q.shape[1], D.shape[1], **opts)
            appended = store.append(Q, D, tup, magnitudes=mag, batch_id=bid)
            if appended and observe is not None:     # after the append: the store has checked the tuples
                t = np.asarray(tup, dtype=np.int64)
                observe(bid).add_tuples(Q[t[:, 0]], D[t[:, 1]], D[t[:, 2]], q_rows=t[:, 0])
        entries = day_entries(store.log, bid)
        span = day_span(entries, "tuples")
        out.append({"batch_id": bid, "file": str(f), "appended": bool(appended), "tuples": span, "rows": span,
                    "batch_ids": [e["batch_id"] for e in entries]})
    return out


# ------------------------------------------------------------------ verify
def verify_new(store, ingested, *, full=False, pieces=16):
    """Re-read tonight's new batches (and the batch before them, whose last chunk an append rewrote)
    against their logged checksums; ``full``: every batch of the store.  Returns the ids checked
    (or the count, for ``full``); raises ``StoreFormatError`` naming a damaged batch.

    The "verify" phase counts tonight's batches as they are re-read, in at most ``pieces`` calls of
    ``store.verify`` (each also re-checks the whole store's structure, which is cheap but not free);
    the whole store (``full``) is one call, a phase without a count."""
    if full:
        with phase("verify (re-read every batch against its checksum)"):
            return {"batches": store.verify(), "full": True}
    log = store.log
    new = {b for rec in ingested if rec["appended"] for b in rec["batch_ids"]}
    idx = [i for i, e in enumerate(log) if e.get("batch_id") in new]
    if idx and idx[0] > 0:
        new.add(log[idx[0] - 1].get("batch_id"))
    ids = [e.get("batch_id") for e in log if e.get("batch_id") in new]     # log order
    step = max(1, -(-len(ids) // max(1, pieces)))
    checked = 0
    with phase("verify (re-read the new batches against their checksums)", len(ids) or None, "batches") as ph:
        for a in range(0, len(ids), step):
            n = store.verify(batch_ids=set(ids[a:a + step]))
            checked += n
            ph.update(n)
    return {"batches": checked, "full": False}
