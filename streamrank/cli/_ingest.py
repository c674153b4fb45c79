"""``streamrank ingest``: LETOR text, Parquet, .npz, zarr stores -> a store, in atomic appends."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .._itertools import with_last
from ._common import EXIT_OK, UsageError, _progress, _say
from ._formats import detect_format
from ._row_columns import named_columns, refuse_columns
from ._stores import (_kind_of, _open_store,
                      url_options)


def _split_member(src: str):
    """``archive.tar.gz:member`` -> (archive, member); other paths -> (src, None)."""
    if os.path.exists(src):
        return src, None
    for ext in (".tar.gz:", ".tgz:", ".tar.bz2:", ".tar.xz:", ".tar:"):
        i = src.find(ext)
        if i >= 0:
            return src[: i + len(ext) - 1], src[i + len(ext):]
    return src, None


def _detect_format(src: str, member) -> str:
    p = Path(src)
    if p.is_dir():
        if (p / "zarr.json").exists() or not any(p.rglob("*.parquet")):
            return "zarr"
        return "parquet"
    if member is None and p.suffix == ".npz":
        return "npz"
    if member is None and (p.suffix in (".parquet", ".pq") or "*" in src or "?" in src):
        return "parquet"
    return "letor"


def _ingest_parquet(args, src, counts):
    """Parquet: a file, a directory or a glob of part files -> one batch, in chunks of whole queries."""
    from ..io.parquet import ingest_parquet, parquet_files

    if not args.label or not args.qid:
        raise ValueError(f"{src} is Parquet: name the label and query id columns with --label COL --qid COL")
    features = args.features
    if isinstance(features, int):
        raise ValueError("--features for Parquet is a list of column names (--features a,b,c), not a count")
    files = parquet_files(src)
    chunk_rows = max(1, int(args.max_rows))
    with _progress(args, None, desc=f"ingest {Path(src).name}") as bar:
        got = ingest_parquet(args.store, files, label=args.label, qid=args.qid, features=features,
                             feature_prefix=args.features_from_prefix, sparse=args.sparse, chunk_rows=chunk_rows,
                             batch_id=args.batch_id, group_identity=args.group_identity, progress=bar.update,
                             docid=getattr(args, "docid_column", None), storage_options=url_options(args.store),
                             columns=named_columns(args))
    for k in ("rows", "skipped_rows", "batches", "skipped"):
        counts[k] += got[k]


def _default_batch_id(src, member, extra="") -> str:
    import hashlib

    st = os.stat(src)
    key = f"{os.path.abspath(src)}|{member}|{st.st_size}|{st.st_mtime_ns}|{extra}"
    return f"{Path(src).name}{':' + member if member else ''}@" + hashlib.sha256(key.encode()).hexdigest()[:12]


def _partial_commit_error(exc, name, store, qid, lines, counts, base_id, default_id):
    """The append error of a chunk, saying what this run committed before it and how to resume."""
    from ..io.groups import offending_row

    row = offending_row(store, qid)
    where = f" (line {int(lines[row])})" if lines is not None and len(lines) > row else ""
    exc = _rows_as_lines(exc, lines)
    if not counts["batches"]:
        return ValueError(f"{name}{where}: {exc}")
    resume = f"re-run with --batch-id {base_id} (same --chunk-mb) " if default_id else "re-run "
    line = f"line {int(lines[row])}" if where else "the offending line"
    return ValueError(f"{name}{where}: {exc}; committed {counts['rows']:,} rows in {counts['batches']} "
                      f"batch(es) before it (they stay in the store); {resume}after fixing {line} resumes")


def _rows_as_lines(exc, lines):
    """The store counts a chunk's rows from 0; a text file's user counts lines from 1: 'row R' -> 'line L'."""
    import re

    if lines is None:
        return exc

    def line(m):
        r = int(m.group(2))
        return f"line {int(lines[r])}" if 0 <= r < len(lines) else m.group(0)
    return re.sub(r"\b(row) (\d+)\b", line, str(exc))


def _open_group_target(path, n_features, *, sparse, n_outputs=1, feature_names=None, docids=False,
                       group_identity="batch", row_columns=()):
    from ..io.group_store import GroupStore
    from ._stores import STORAGE_OPTIONS, _is_url

    if _is_url(path):                        # a store on object storage: open it to append, else create it
        try:
            store = GroupStore.open(path, mode="a", storage_options=STORAGE_OPTIONS)
        except FileNotFoundError:
            return GroupStore.create(path, n_features, sparse=sparse, n_outputs=n_outputs, feature_names=feature_names,
                                     docids=docids, group_identity=group_identity, row_columns=row_columns,
                                     storage_options=STORAGE_OPTIONS), True
        if store.n_features != n_features:
            raise ValueError(f"the source has {n_features} features but the store {path} holds {store.n_features}")
        return store, False
    p = Path(path)
    if p.exists() and (p / "zarr.json").exists():
        store = _open_store(p, want="group")
        store = GroupStore.open(p, mode="a")
        if store.n_features != n_features:
            raise ValueError(f"the source has {n_features} features but the store {p} holds {store.n_features}")
        return store, False
    if p.exists() and (p.is_file() or any(p.iterdir())):
        raise FileExistsError(f"{p} exists and is not a streamrank store; choose another --store")
    return GroupStore.create(p, n_features, sparse=sparse, n_outputs=n_outputs, feature_names=feature_names,
                             overwrite=p.exists(), docids=docids, group_identity=group_identity,
                             row_columns=row_columns), True


def _ingest_letor(args, src, member, counts):
    from ..io.docids import take_docids

    import tarfile

    from ..io.svmlight import iter_svmlight, open_text_bytes

    store = None
    if Path(args.store).exists() and (Path(args.store) / "zarr.json").exists():
        store, _ = _open_group_target(args.store, _open_store(args.store, want="group").n_features,
                                      sparse=args.sparse)
    if isinstance(args.features, list):
        raise ValueError("--features COL,COL,... names Parquet columns; for text give the number of features")
    wanted = getattr(args, "n_features", None)       # --n-features N: pad to N on purpose
    if store is not None and wanted is not None and wanted != store.n_features:
        raise ValueError(f"--n-features {wanted}, but the store {args.store} holds {store.n_features} features")
    n_features = store.n_features if store is not None else wanted
    sparse = store.sparse if store is not None else args.sparse
    refuse_columns(args, store, "LETOR text")
    ids = _docid_stream(args, store, src, member)   # doc ids (streamrank.io.docids), or None
    tf = None
    close = True
    if member is not None or src.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")):
        if member is None:
            raise ValueError(f"{src} is a tar archive: name the member as {src}:PATH/IN/ARCHIVE.txt")
        tf = tarfile.open(src, "r:*")
        try:
            info = tf.getmember(member)
        except KeyError:
            names = [n for n in tf.getnames() if n.endswith(".txt")][:6]
            tf.close()
            raise FileNotFoundError(f"{src} has no member {member!r}; e.g. {names}") from None
        f = tf.extractfile(info)
        if f is None:
            tf.close()
            raise ValueError(f"{src}:{member} is not a regular file")
        total, name = info.size, f"{src}:{member}"
    else:
        f, name, close = open_text_bytes(src)
        total = None if isinstance(f, __import__("gzip").GzipFile) else os.path.getsize(src)
    base_id = args.batch_id or _default_batch_id(src, member, f"{args.limit}|{args.chunk_mb}|{sparse}")
    seen = 0
    pos = 0
    try:
        with _progress(args, total, unit="B", desc=f"ingest {Path(name).name}") as bar:
            chunks = iter_svmlight(f, n_features=n_features, dense=not sparse,
                                   chunk_bytes=int(args.chunk_mb * 2**20), name=name,
                                   null_value=args.null_value,
                                   max_features=getattr(args, "max_features", 1 << 24))
            if store is not None and wanted is None:
                chunks = _blame_the_store(chunks, args.store, n_features)
            for i, chunk in enumerate(chunks):
                X, y, qid = chunk
                lines = chunk.lines
                if qid is None:
                    raise ValueError(f"{name}: LETOR lines must carry qid: (got a line without it)")
                stop = False
                if args.limit is not None and seen + len(y) >= args.limit:
                    cut = max(args.limit - seen, 1)
                    ends = np.flatnonzero(qid[cut:] != qid[cut - 1])
                    cut = cut + int(ends[0]) if ends.size else len(qid)
                    X, y, qid = X[:cut], y[:cut], qid[:cut]
                    lines = None if lines is None else lines[:cut]
                    stop = True
                if i == 0 and wanted is None and n_features is not None:
                    _check_feature_count(chunk, n_features, name, args.store)
                if store is None:
                    store, _ = _open_group_target(args.store, X.shape[1], sparse=sparse, docids=ids is not None,
                                                  group_identity=args.group_identity)
                docid = None if ids is None else take_docids(ids, qid, name, lines)
                try:
                    done = store.append(X, y, qid, batch_id=f"{base_id}#{i}", docid=docid)
                except ValueError as exc:
                    raise _partial_commit_error(exc, name, store, qid, lines, counts, base_id,
                                                args.batch_id is None) from None
                counts["rows" if done else "skipped_rows"] += len(y)
                counts["batches" if done else "skipped"] += 1
                seen += len(y)
                try:
                    now = f.tell()
                except (OSError, ValueError):
                    now = pos
                bar.update(max(now - pos, 0))
                pos = now
                if stop:
                    break
    finally:
        if close:
            f.close()
        if tf is not None:
            tf.close()
        if ids is not None:
            ids.close()
    if store is None:
        if n_features is None:
            raise ValueError(f"{name}: no data lines (and --features not given); nothing to ingest")
        _open_group_target(args.store, n_features, sparse=sparse, docids=ids is not None,
                           group_identity=args.group_identity)


def _blame_the_store(chunks, store, n_features):
    """The text's chunks; a feature index beyond an existing store's width is said to be the store's limit (the
    text itself may be well formed: it was meant for another store)."""
    try:
        yield from chunks
    except ValueError as exc:
        if "feature index out of range" not in str(exc):
            raise
        raise ValueError(f"the existing store {store} holds {n_features} features, and {exc}: this text has more; "
                         "ingest it into another --store") from None


def _check_feature_count(chunk, n_features, name, target) -> None:
    """The text must reach the target's feature count on its own: a 45-feature file is not padded into a
    46-feature store (or model) unless ``--n-features`` says so.  Judged on the first chunk (before any append):
    its largest feature index."""
    seen = int(getattr(chunk, "n_features_seen", n_features))
    if seen < n_features:
        raise ValueError(f"{name} has {seen} features (its largest feature index, in its first chunk) but "
                         f"{target} has {n_features}; pass --n-features {n_features} to pad the missing features "
                         "with zeros on purpose")


def _docid_stream(args, store, src, member):
    """LETOR doc ids read beside the parser (a second reader of the same text), when kept.

    A new store keeps them with ``--docids``; a store created with doc ids
    needs them on every append.
    """
    from ..io.docids import iter_letor_docids, open_text_source

    keep = store.has_docids if store is not None else bool(getattr(args, "docids", False))
    if store is not None and getattr(args, "docids", False) and not store.has_docids:
        raise ValueError(f"--docids: the store {args.store} was created without document ids; "
                         "ingest into a new store to keep them")
    if not keep:
        return None

    def gen():
        with open_text_source(src, member) as fh:
            yield from iter_letor_docids(fh)
    return gen()


def _ingest_npz(args, src, counts):
    """An ``.npz`` of X, y, qid, read ``--max-rows`` rows (whole queries) at a time (:func:`iter_npz`).

    One append per chunk: ``ID#0``, ``ID#1``, ... (a file of one chunk: ``ID``);
    a killed ingest leaves the committed chunks and a rerun skips them.
    """
    import scipy.sparse as sp
    from ..io.npz import iter_npz
    from ..io.row_columns import check_same_columns

    import zipfile

    if not zipfile.is_zipfile(src):
        raise ValueError(f"{src} is not a .npz archive of X, y, qid (a .npy array or another file); "
                         "use --format letor for text")
    base = args.batch_id or _default_batch_id(src, None)
    store = None
    rows = 0
    keep, cols = _npz_keeps_docids(args, src), named_columns(args)
    with _progress(args, None, desc=f"ingest {Path(src).name}") as bar:
        for i, (chunk, last) in enumerate(with_last(iter_npz(src, chunk_rows=args.max_rows, docids=keep,
                                                             columns=cols))):
            X, y, qid = chunk[:3]
            if store is None:
                n_out = 1 if np.ndim(y) == 1 else int(np.shape(y)[1])
                store, new = _open_group_target(args.store, int(np.shape(X)[1]), sparse=args.sparse,
                                                n_outputs=n_out, group_identity=args.group_identity, docids=keep,
                                                row_columns=tuple(cols))
                if not new:
                    check_same_columns(store, cols, args.store)
            if store.sparse:
                X = sp.csr_matrix(X)
            docid = [str(d) for d in chunk[3]] if keep else None
            done = store.append(X, y, qid, batch_id=base if (last and i == 0) else f"{base}#{i}", docid=docid,
                                **(chunk[-1] if cols else {}))
            counts["rows" if done else "skipped_rows"] += len(y)
            counts["batches" if done else "skipped"] += 1
            rows += len(y)
            bar.update(len(y))
    if store is None:
        raise ValueError(f"{src}: the archive holds no rows; nothing to ingest")


def _npz_keeps_docids(args, src) -> bool:
    """Whether an .npz ingest keeps the archive's ``docid`` array: ``--docids`` (new store) or a store with ids."""
    from ..io.npz import npz_has_docids

    p = Path(args.store)
    store = _open_store(p, want="group") if p.exists() and (p / "zarr.json").exists() else None
    has = npz_has_docids(src)
    if store is not None:
        if getattr(args, "docids", False) and not store.has_docids:
            raise ValueError(f"--docids: the store {args.store} was created without document ids; "
                             "ingest into a new store to keep them")
        if store.has_docids and not has:
            raise ValueError(f"the store {args.store} keeps document ids but {src} has no 'docid' array")
        return store.has_docids
    if getattr(args, "docids", False) and not has:
        raise ValueError(f"--docids: {src} has no 'docid' array (one string per row) to keep")
    return bool(getattr(args, "docids", False))


def _ingest_zarr(args, src, counts):
    from ..io.tuple_copy import copy_tuple_store
    from ..io.tuple_store import TupleStore

    kind = _kind_of(src)
    if kind == "model":
        raise ValueError(f"{src} is a saved model, not a store to ingest")
    source = _open_store(src)
    if kind == "group":
        ids = bool(getattr(source, "has_docids", False))   # a store's doc ids are copied with its rows
        store, _ = _open_group_target(args.store, source.n_features, sparse=source.sparse,
                                      group_identity=args.group_identity, docids=ids, row_columns=source.row_columns,
                                      n_outputs=source.n_outputs, feature_names=source.feature_names)
        lost = [c for c in store.row_columns if c not in source.row_columns]   # the source's extra ones are dropped
        if lost:
            raise ValueError(f"the store {args.store} keeps a {lost[0]!r} column but {src} has none")
        if store.has_docids and not ids:
            raise ValueError(f"the store {args.store} keeps document ids but {src} has none")
        ids = ids and store.has_docids       # into a store without ids: the source's ids are dropped
        tag = source.batches[-1]["checksum"][-12:] if source.batches else "empty"
        base_id = args.batch_id or f"{Path(src).name}@{tag}"
        # the source's batches stay batches (io/groups.py): a query recurring across them stays two groups
        batch_of_group = source.group_batches()
        with _progress(args, source.n_rows, desc=f"ingest {Path(src).name}") as bar:
            for i, block in enumerate(source.blocks(max_rows=args.max_rows)):
                g0 = block.group_start
                gb = batch_of_group[g0:g0 + block.n_groups]
                cuts = [0] + [g for g in range(1, len(gb)) if gb[g] != gb[g - 1]] + [len(gb)]
                for a, b in zip(cuts[:-1], cuts[1:]):
                    r0, r1 = int(block.group_ptr[a]), int(block.group_ptr[b])
                    X = block.X[r0:r1]
                    qid = np.repeat(block.qid[a:b], np.diff(block.group_ptr[a:b + 1]))
                    docid = source.docids(block.start + r0, block.start + r1) if ids else None
                    cols = {c: source.read_column(c, block.start + r0, block.start + r1) for c in store.row_columns}
                    done = store.append(X, block.y[r0:r1], qid, batch_id=f"{base_id}/{gb[a]}#{i}", docid=docid,
                                        **cols)
                    counts["rows" if done else "skipped_rows"] += r1 - r0
                    counts["batches" if done else "skipped"] += 1
                bar.update(block.n_rows)
        return
    # a tuple store: copied in one atomic append
    p = Path(args.store)
    if p.exists() and (p / "zarr.json").exists():
        _open_store(p, want="tuple")
        target = TupleStore.open(p, mode="a")
    elif p.exists() and (p.is_file() or any(p.iterdir())):
        raise FileExistsError(f"{p} exists and is not a streamrank store; choose another --store")
    else:
        target = TupleStore.create(p, source.n_query_features, source.n_item_features, overwrite=p.exists())
    tag = source.log[-1]["checksum"][-12:] if source.log else "empty"
    with _progress(args, source.n_tuples, unit="tuples", desc=f"ingest {Path(src).name}") as bar:
        copy_tuple_store(source, target, args.batch_id or f"{Path(src).name}@{tag}", counts,
                         rows_per_append=args.max_rows, progress=bar.update)


def cmd_ingest(args) -> int:
    counts = {"rows": 0, "skipped_rows": 0, "batches": 0, "skipped": 0, "tuples": 0, "skipped_tuples": 0}
    _n_features_option(args)
    # every source is checked (format by content) before the first append
    plan = []
    for src in args.sources:
        path, member = _split_member(src)
        plan.append((path, member, detect_format(path, member, args.format)))
    created = not os.path.lexists(args.store)
    try:
        for path, member, fmt in plan:
            if fmt == "parquet":
                _ingest_parquet(args, path, counts)
            elif fmt == "letor":
                if Path(path).is_dir():
                    raise ValueError(f"{path} is a directory; --format letor reads a text, .gz or tar file")
                _ingest_letor(args, path, member, counts)
            elif fmt == "npz":
                _ingest_npz(args, path, counts)
            else:
                if not Path(path).is_dir():
                    raise ValueError(f"{path} is not a zarr store (a directory); --format zarr copies a "
                                     "GroupStore or TupleStore")
                _ingest_zarr(args, path, counts)
    except BaseException:
        if created:
            _remove_if_empty(args.store)
        raise
    store = _open_store(args.store)
    if hasattr(store, "n_tuples"):
        _say(args, f"ingested {counts['tuples']:,} tuples ({counts['batches']} batch(es), "
                   f"{counts['skipped']} already in the store) into {args.store}: now {store.n_tuples:,} tuples")
    else:
        _say(args, f"ingested {counts['rows']:,} rows ({counts['batches']} batch(es), {counts['skipped']} "
                   f"already in the store) into {args.store}: now {store.n_rows:,} rows, "
                   f"{store.n_groups:,} groups, {store.n_features} features")
    return EXIT_OK


def _n_features_option(args) -> None:
    """``--n-features N`` (and the older ``--features N``): the text's feature count, on purpose."""
    n = getattr(args, "n_features", None)
    if isinstance(args.features, int):
        if n is not None and n != args.features:
            raise UsageError(f"--features {args.features} and --n-features {n} disagree")
        n = args.features
    if n is not None and n < 1:
        raise UsageError(f"--n-features must be >= 1, got {n}")
    args.n_features = n


def _remove_if_empty(path) -> None:
    """A store this ingest created and never committed a batch to is removed: a failed first ingest
    leaves nothing behind (a store with committed batches stays: re-running resumes it)."""
    import shutil

    from ..io.schema import read_attrs

    p = Path(path)
    if not p.is_dir():
        return
    try:
        committed = bool(_open_store(p).log)
    except Exception:  # noqa: BLE001 - half-created (no complete metadata): nothing was committed
        committed = (p / "zarr.json").exists() and bool(read_attrs(p).get("log"))
    if not committed:
        shutil.rmtree(p, ignore_errors=True)
