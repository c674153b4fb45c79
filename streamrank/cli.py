"""The ``streamrank`` command line.

::

    streamrank ingest   SRC... --store PATH [--format letor|npz|zarr] [--batch-id ID]
    streamrank info     PATH
    streamrank fit      --store PATH --model OUT --learner LEARNER [options] [--alpha A | --alphas GRID --cv K]
    streamrank evaluate --model M --store PATH [--metrics ndcg@10,disagreement,map,auc]
    streamrank predict  --model M --store PATH --out SCORES.npy|SCORES.zarr
    streamrank cv       --store PATH --learner LEARNER --alphas GRID --folds K|query
    streamrank plot     --model M --out PNG

Learners: ``rankrls`` (RankRLS, primal statistics), ``cg`` (RankRLS, conjugate
gradient), ``kernel`` (KernelRankRLS, exact dual), ``sparse-kernel``
(KernelRankRLS with ``--n-basis`` basis rows), ``sgd-bilinear``
(SparseSGDRanker on a *tuple* store), ``sgd-pairwise`` (PairwiseSGDRanker).

λ grids (``--alphas GRID``)
---------------------------
* a comma list ``0.01,0.1,1,10`` (items may be powers: ``2^-3,2^0,2^3``);
* ``2^A:2^B[:STEP]`` — powers of two 2^A, 2^(A+STEP), …, 2^B (inclusive;
  e.g. ``2^-15:2^15``, the papers' grid); ``10^A:10^B[:STEP]`` likewise;
* ``LO:HI:N`` — N values spaced evenly on a log scale from LO to HI.

Progress and messages
---------------------
Long operations (ingest, every pass of a fit, evaluate, predict) show a tqdm
bar on a terminal and one plain log line every 10 s (``STREAMRANK_PROGRESS_SECONDS``)
when stderr is not a terminal (cron).  ``--quiet`` silences progress and log
messages (results still go to stdout); ``--verbose`` adds debug messages and
the traceback of an error.

Exit codes
----------
=====  ==================================================================
0      success
1      unexpected internal error (rerun with --verbose and report it)
2      usage error: unknown option or learner, bad GRID, bad --out suffix
3      a path given does not exist (store, model, source file, tar member)
4      invalid data or format: not a streamrank store/model, newer format
       version, corrupt file, parse error (file:line), wrong store kind
5      cannot write: the output exists and is not replaceable, or another
       process is appending to the store (one writer at a time)
6      unsupported combination (e.g. --cv with --learner cg)
130    interrupted (Ctrl-C / SIGINT; 143 for SIGTERM): nothing half-written
       is left — models are written to a temporary directory and renamed,
       store appends are atomic (an interrupted ingest resumes where it
       stopped when run again: committed chunks are skipped by batch id)
=====  ==================================================================
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import signal
import sys
import time
import traceback
import uuid
from pathlib import Path

import numpy as np

__all__ = ["main", "build_parser", "parse_grid", "EXIT_CODES"]

EXIT_OK, EXIT_BUG, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_DATA, EXIT_WRITE, EXIT_UNSUPPORTED = 0, 1, 2, 3, 4, 5, 6
EXIT_SIGINT, EXIT_SIGTERM = 130, 143
EXIT_CODES = {
    0: "success", 1: "unexpected internal error", 2: "usage error", 3: "path not found",
    4: "invalid data or format", 5: "cannot write output / store locked", 6: "unsupported combination",
    130: "interrupted (SIGINT)", 143: "terminated (SIGTERM)",
}

LEARNERS = ("rankrls", "cg", "kernel", "sparse-kernel", "sgd-bilinear", "sgd-pairwise")
FORMATS = ("letor", "npz", "zarr")
METRICS = ("ndcg@10", "disagreement", "map", "auc")
DEFAULT_MAX_ROWS = 65_536

log = logging.getLogger("streamrank")


class UsageError(Exception):
    """A bad command-line value found after parsing (exit code 2)."""


class Unsupported(Exception):
    """A combination of options streamrank does not do (exit code 6)."""


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread like KeyboardInterrupt."""


# --------------------------------------------------------------------- grids
def _number(text: str) -> float:
    t = text.strip()
    if "^" in t:
        base, exp = t.split("^", 1)
        return float(base) ** float(exp)
    return float(t)


def parse_grid(text: str) -> np.ndarray:
    """Parse a λ grid: ``a,b,c`` | ``2^A:2^B[:STEP]`` | ``10^A:10^B[:STEP]`` | ``LO:HI:N`` (log-spaced)."""
    s = str(text).strip()
    try:
        if ":" in s:
            parts = s.split(":")
            if len(parts) not in (2, 3):
                raise ValueError
            a, b = parts[0].strip(), parts[1].strip()
            if "^" in a and "^" in b:
                ba, ea = a.split("^", 1)
                bb, eb = b.split("^", 1)
                if float(ba) != float(bb):
                    raise ValueError
                step = float(parts[2]) if len(parts) == 3 else 1.0
                if step <= 0:
                    raise ValueError
                exps = np.arange(float(ea), float(eb) + step / 2, step)
                vals = float(ba) ** exps
            else:
                if len(parts) != 3:
                    raise ValueError
                n = int(parts[2])
                if n < 1:
                    raise ValueError
                vals = np.geomspace(_number(a), _number(b), n)
        else:
            vals = np.asarray([_number(x) for x in s.split(",") if x.strip()], dtype=np.float64)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise UsageError(f"bad GRID {text!r}: use a comma list '0.1,1,10', powers '2^-15:2^15[:STEP]' "
                         "or 'LO:HI:N' (N log-spaced values)") from None
    vals = np.asarray(vals, dtype=np.float64)
    if vals.size == 0 or not np.all(np.isfinite(vals)) or np.any(vals <= 0):
        raise UsageError(f"bad GRID {text!r}: every value must be a finite number > 0")
    return vals


def _grid_type(text):
    try:
        return parse_grid(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _folds_type(text):
    if text == "query":
        return "query"
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2 or 'query', got {text!r}") from None
    if k < 2:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2 or 'query', got {text!r}")
    return k


def _positive_float(text):
    try:
        v = _number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return v


# ------------------------------------------------------------------ helpers
def _progress(args, total=None, unit="rows", desc=None):
    from ._progress import Progress

    return Progress(total, unit=unit, desc=desc or args.command, quiet=args.quiet)


def _resolve_pointer(path) -> Path:
    """A nightly ``DIR/current`` pointer file -> the version directory it names."""
    p = Path(path)
    if p.is_file() and p.name == "current":
        target = p.read_text().strip()
        if target:
            return p.parent / target
    return p


def _kind_of(path) -> str:
    """'group', 'tuple', 'model' or raise (FileNotFoundError / StoreFormatError)."""
    from .io.schema import GROUP_FORMAT, TUPLE_FORMAT, StoreFormatError, read_attrs

    p = _resolve_pointer(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist")
    if p.is_file():
        raise StoreFormatError(f"{p} is a file, not a streamrank store or model (a zarr directory)")
    attrs = read_attrs(p)
    if attrs.get("streamrank") == "model":
        return "model"
    fmt = attrs.get("format")
    if fmt == GROUP_FORMAT:
        return "group"
    if fmt == TUPLE_FORMAT:
        return "tuple"
    raise StoreFormatError(f"{p} is a zarr group but neither a streamrank store nor a model")


def _open_store(path, *, want=None):
    """Open a GroupStore or TupleStore read-only; ``want`` = 'group' | 'tuple' checks the kind."""
    from .io.group_store import GroupStore
    from .io.schema import StoreFormatError
    from .io.tuple_store import TupleStore

    kind = _kind_of(path)
    if kind == "model":
        raise StoreFormatError(f"{path} is a saved model, not a store; pass it as --model")
    if want is not None and kind != want:
        if want == "tuple":
            raise StoreFormatError(f"{path} is a scored-group store; this learner needs a tuple store of "
                                   "(query, preferred item, other item) tuples (ingest one with --format zarr)")
        raise StoreFormatError(f"{path} is a tuple store; this command needs a scored-group store "
                               "(ingest LETOR text, .npz or a GroupStore)")
    return GroupStore.open(path) if kind == "group" else TupleStore.open(path)


def _load_model(path):
    from . import persistence

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no model at {p}")
    if p.is_dir() and (p / "zarr.json").exists():
        from .io.schema import read_attrs

        attrs = read_attrs(p)
        if attrs.get("streamrank") != "model" and attrs.get("format"):
            raise persistence.ModelFormatError(f"{p} is a streamrank store, not a model; pass it as --store")
    return persistence.load(p)


def _model_meta(path) -> dict:
    """The attributes of a saved model's zarr group (no model built)."""
    from .io.schema import read_attrs

    return read_attrs(_resolve_pointer(path))


def _dir_size(path) -> int:
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return f"{n} B"  # pragma: no cover


def _jsonable(obj):
    from .persistence import _jsonable as js

    obj = js(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_jsonable(v) for v in obj]
    return obj


class _SignalsDeferred:
    """Hold SIGINT/SIGTERM back for a few system calls; re-raise them on exit (main thread only).

    The Python-level handlers are swapped for ones that only record the signal
    (a thread signal mask would not do: BLAS threads could take the signal).
    """

    def __enter__(self):
        self._pending = []
        self._old = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, lambda s, f: self._pending.append(s))
            except (ValueError, OSError):  # not the main thread
                pass
        return self

    def __exit__(self, *exc):
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        if self._pending and exc[0] is None:
            sig = self._pending[0]
            handler = self._old.get(sig)
            if callable(handler):
                handler(sig, None)
            elif sig == signal.SIGINT:
                raise KeyboardInterrupt
        return False


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move a complete directory ``tmp`` to ``out``, replacing an old one only once the new one is whole.

    Replacing a directory takes two renames (old aside, new in); Ctrl-C is held
    back between them, so an interrupt leaves the old or the new model at
    ``out``, never neither.
    """
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; refusing to replace it")
    if out.exists():
        old = out.with_name(f".{out.name}.{uuid.uuid4().hex}.old")
        try:
            with _SignalsDeferred():
                os.replace(out, old)
                try:
                    os.replace(tmp, out)
                except BaseException:
                    os.replace(old, out)         # put the old model back
                    raise
        finally:
            if old.exists() and out.exists():
                shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


def _check_model_out(out) -> None:
    """A model may replace a model, never a store or any other file (checked before and after fitting)."""
    from .io.schema import StoreFormatError

    out = Path(out)
    if out.exists() and out.is_dir() and (out / "zarr.json").exists():
        try:
            kind = _kind_of(out)
        except StoreFormatError:
            kind = "other"
        if kind != "model":
            raise FileExistsError(f"{out} is a streamrank store or another zarr group; refusing to overwrite "
                                  "it with a model (choose another --model)")
    elif out.exists() and (out.is_file() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not a streamrank model; refusing to overwrite it")


def _save_model(model, out, cli_meta: dict) -> None:
    """``sr.save`` into a temporary directory, add the command's record, rename into place (atomic)."""
    import zarr

    from . import persistence

    out = Path(out)
    _check_model_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex}.partial")
    try:
        persistence.save(model, tmp)
        root = zarr.open_group(str(tmp), mode="r+")
        root.attrs["cli"] = _jsonable(cli_meta)
        _replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _say(args, text: str) -> None:
    """A result line on stdout."""
    print(text, flush=True)


# ------------------------------------------------------------------- ingest
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
        return "zarr"
    if member is None and p.suffix == ".npz":
        return "npz"
    return "letor"


def _default_batch_id(src, member, extra="") -> str:
    import hashlib

    st = os.stat(src)
    key = f"{os.path.abspath(src)}|{member}|{st.st_size}|{st.st_mtime_ns}|{extra}"
    return f"{Path(src).name}{':' + member if member else ''}@" + hashlib.sha256(key.encode()).hexdigest()[:12]


def _open_group_target(path, n_features, *, sparse, n_outputs=1, feature_names=None):
    from .io.group_store import GroupStore

    p = Path(path)
    if p.exists() and (p / "zarr.json").exists():
        store = _open_store(p, want="group")
        store = GroupStore.open(p, mode="a")
        if store.n_features != n_features:
            raise ValueError(f"the source has {n_features} features but the store {p} holds {store.n_features}")
        return store, False
    if p.exists() and (p.is_file() or any(p.iterdir())):
        raise FileExistsError(f"{p} exists and is not a streamrank store; choose another --store")
    return GroupStore.create(p, n_features, sparse=sparse, n_outputs=n_outputs,
                             feature_names=feature_names, overwrite=p.exists()), True


def _ingest_letor(args, src, member, counts):
    import tarfile

    from .io.svmlight import iter_svmlight, open_text_bytes

    store = None
    if Path(args.store).exists() and (Path(args.store) / "zarr.json").exists():
        store, _ = _open_group_target(args.store, _open_store(args.store, want="group").n_features,
                                      sparse=args.sparse)
    n_features = store.n_features if store is not None else args.features
    sparse = store.sparse if store is not None else args.sparse
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
                                   null_value=args.null_value)
            for i, (X, y, qid) in enumerate(chunks):
                if qid is None:
                    raise ValueError(f"{name}: LETOR lines must carry qid: (got a line without it)")
                stop = False
                if args.limit is not None and seen + len(y) >= args.limit:
                    cut = max(args.limit - seen, 1)
                    ends = np.flatnonzero(qid[cut:] != qid[cut - 1])
                    cut = cut + int(ends[0]) if ends.size else len(qid)
                    X, y, qid = X[:cut], y[:cut], qid[:cut]
                    stop = True
                if store is None:
                    store, _ = _open_group_target(args.store, X.shape[1], sparse=sparse)
                done = store.append(X, y, qid, batch_id=f"{base_id}#{i}")
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
    if store is None:
        if n_features is None:
            raise ValueError(f"{name}: no data lines (and --features not given); nothing to ingest")
        _open_group_target(args.store, n_features, sparse=sparse)


def _ingest_npz(args, src, counts):
    import scipy.sparse as sp

    try:
        z = np.load(src, allow_pickle=False)
    except Exception as exc:  # zipfile.BadZipFile, ValueError, OSError
        raise ValueError(f"{src} is not a .npz archive of X, y, qid ({type(exc).__name__}); "
                         "use --format letor for text") from None
    with z:
        if not hasattr(z, "files"):
            raise ValueError(f"{src} is a .npy array, not a .npz archive with X, y, qid")
        missing = [k for k in ("X", "y", "qid") if k not in z.files]
        if missing:
            raise ValueError(f"{src}: a .npz to ingest needs arrays X, y, qid; missing {missing}")
        X, y, qid = z["X"], z["y"], z["qid"]
    if args.sparse and not sp.issparse(X):
        X = sp.csr_matrix(X)
    n_out = 1 if np.ndim(y) == 1 else int(np.shape(y)[1])
    store, _ = _open_group_target(args.store, int(np.shape(X)[1]), sparse=sp.issparse(X), n_outputs=n_out)
    if store.sparse != sp.issparse(X):
        X = sp.csr_matrix(X) if store.sparse else X.toarray()
    with _progress(args, len(y), desc=f"ingest {Path(src).name}") as bar:
        done = store.append(X, y, qid, batch_id=args.batch_id or _default_batch_id(src, None))
        bar.update(len(y))
    counts["rows" if done else "skipped_rows"] += len(y)
    counts["batches" if done else "skipped"] += 1


def _ingest_zarr(args, src, counts):
    from .io.tuple_store import TupleStore

    kind = _kind_of(src)
    if kind == "model":
        raise ValueError(f"{src} is a saved model, not a store to ingest")
    source = _open_store(src)
    if kind == "group":
        store, _ = _open_group_target(args.store, source.n_features, sparse=source.sparse,
                                      n_outputs=source.n_outputs, feature_names=source.feature_names)
        tag = source.batches[-1]["checksum"][-12:] if source.batches else "empty"
        base_id = args.batch_id or f"{Path(src).name}@{tag}"
        with _progress(args, source.n_rows, desc=f"ingest {Path(src).name}") as bar:
            for i, block in enumerate(source.blocks(max_rows=args.max_rows)):
                done = store.append(block.X, block.y, block.row_qid(), batch_id=f"{base_id}#{i}")
                counts["rows" if done else "skipped_rows"] += block.n_rows
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
        tup, mag = source._read_tuples(0, source.n_tuples)
        done = target.append(source.Q, source.D, tup, magnitudes=mag,
                             batch_id=args.batch_id or f"{Path(src).name}@{tag}")
        bar.update(source.n_tuples)
    counts["tuples" if done else "skipped_tuples"] += source.n_tuples
    counts["batches" if done else "skipped"] += 1


def cmd_ingest(args) -> int:
    counts = {"rows": 0, "skipped_rows": 0, "batches": 0, "skipped": 0, "tuples": 0, "skipped_tuples": 0}
    for src in args.sources:
        path, member = _split_member(src)
        if not os.path.exists(path):
            raise FileNotFoundError(f"source {path} does not exist")
        fmt = args.format or _detect_format(path, member)
        if fmt == "letor":
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
    store = _open_store(args.store)
    if hasattr(store, "n_tuples"):
        _say(args, f"ingested {counts['tuples']:,} tuples ({counts['batches']} batch(es), "
                   f"{counts['skipped']} already in the store) into {args.store}: now {store.n_tuples:,} tuples")
    else:
        _say(args, f"ingested {counts['rows']:,} rows ({counts['batches']} batch(es), {counts['skipped']} "
                   f"already in the store) into {args.store}: now {store.n_rows:,} rows, "
                   f"{store.n_groups:,} groups, {store.n_features} features")
    return EXIT_OK


# --------------------------------------------------------------------- info
def cmd_info(args) -> int:
    kind = _kind_of(args.path)
    size = _dir_size(_resolve_pointer(args.path))
    out: dict = {"path": str(args.path), "kind": kind, "size_on_disk": size}
    if kind == "model":
        meta = _model_meta(args.path)
        model = _load_model(args.path)
        out.update(format_version=meta.get("format_version"), **{"class": meta.get("class")},
                   params=meta.get("params"))
        for attr in ("n_features_in_", "n_outputs_", "n_query_features_", "n_item_features_", "t_",
                     "nnz_", "solver_", "n_iter_"):
            try:
                v = getattr(model, attr)
            except Exception:
                continue
            out[attr] = _jsonable(v)
        cli = meta.get("cli") or {}
        if cli:
            out["trained"] = {k: cli[k] for k in ("learner", "store", "rows", "groups", "seconds", "created")
                              if k in cli}
            if cli.get("cv"):
                cv = cli["cv"]
                out["cv"] = {"best_alpha": cv.get("best_alpha"), "scoring": cv.get("scoring"),
                             "folds": cv.get("folds"), "n_alphas": len(cv.get("alphas", []))}
    else:
        store = _open_store(args.path)
        log_ = store.log
        out.update(format=store._attrs.get("format"), format_version=store.format_version,
                   batches=len(log_), last_batch=(log_[-1].get("batch_id") if log_ else None),
                   last_append=(log_[-1].get("time") if log_ else None), created=store._attrs.get("created"))
        if kind == "group":
            out.update(rows=store.n_rows, groups=store.n_groups, features=store.n_features,
                       outputs=store.n_outputs, sparse=store.sparse, nnz=store.nnz)
        else:
            out.update(tuples=store.n_tuples, queries=store.n_queries, items=store.n_items,
                       query_features=store.n_query_features, item_features=store.n_item_features)
    if args.json:
        print(json.dumps(_jsonable(out), indent=1, sort_keys=True))
        return EXIT_OK
    width = max(len(k) for k in out)
    for k, v in out.items():
        if k == "size_on_disk":
            v = f"{_human(v)} ({v:,} bytes)"
        elif isinstance(v, int) and not isinstance(v, bool):
            v = f"{v:,}"
        elif isinstance(v, (dict, list)):
            v = json.dumps(_jsonable(v), sort_keys=True)
        print(f"{k:<{width}}  {v}")
    return EXIT_OK


# ---------------------------------------------------------------------- fit
def _estimator(args):
    import streamrank as sr

    L = args.learner
    alpha = args.alpha
    if L in ("rankrls", "cg"):
        return sr.RankRLS(alpha=alpha, solver="primal" if L == "rankrls" else "cg",
                          group_weight=args.group_weight, ties=args.ties, tol=args.tol, max_iter=args.max_iter)
    if L in ("kernel", "sparse-kernel"):
        return sr.KernelRankRLS(kernel=args.kernel, gamma=args.gamma, degree=args.degree, coef0=args.coef0,
                                alpha=alpha, n_basis=args.n_basis if L == "sparse-kernel" else None,
                                group_weight=args.group_weight, ties=args.ties, random_state=args.seed)
    if L == "sgd-bilinear":
        kw = dict(eta0=args.eta0, l1=args.l1, shrink_every=args.shrink_every, init=args.init,
                  refit=not args.no_refit, random_state=args.seed)
        return sr.SparseSGDRanker(**{k: v for k, v in kw.items() if v is not None})
    try:
        cls = sr.PairwiseSGDRanker
    except (AttributeError, ImportError, ModuleNotFoundError):
        raise Unsupported("--learner sgd-pairwise is not available in this streamrank build "
                          "(streamrank.sgd.pairwise is missing)") from None
    kw = dict(eta0=args.eta0, l1=args.l1, shrink_every=args.shrink_every, random_state=args.seed)
    names = cls._get_param_names()
    if "l2" in names:
        kw["l2"] = args.l2
    if "loss" in names:
        kw["loss"] = args.loss
    return cls(**{k: v for k, v in kw.items() if k in names and v is not None})


def _cv_record(res, learner) -> dict:
    return {"alphas": [float(a) for a in res.alphas], "scores": [float(s) for s in res.scores],
            "best_alpha": float(res.best_alpha), "best_index": int(res.best_index), "scoring": res.scoring,
            "folds": res.folds, "greater_is_better": bool(res.greater_is_better), "learner": learner}


def _run_cv(model, source, args, folds, check_only=False):
    if args.learner in ("cg", "sgd-bilinear", "sgd-pairwise"):
        raise Unsupported(f"cross-validation over --alphas is done from statistics and needs --learner "
                          f"rankrls, kernel or sparse-kernel; {args.learner} fits one --alpha "
                          f"(for {args.learner}, run fit once per value)")
    if args.learner == "sparse-kernel" and folds != "query":
        raise Unsupported("sparse-kernel cross-validation is leave-query-out only: use --cv query")
    if check_only:
        return None
    return model.cross_validate(source, alphas=args.alphas, folds=folds, scoring=args.scoring)


def _preflight(args, cv_folds):
    """Refuse what cannot work before any pass over the data."""
    if cv_folds is not None:
        _run_cv(None, None, args, cv_folds, check_only=True)
        from .rankrls.selection import _parse_scoring

        try:
            _parse_scoring(args.scoring)
        except ValueError as exc:
            raise UsageError(f"--scoring: {exc}") from None
    if getattr(args, "model", None):
        _check_model_out(args.model)


def _fit_model(args, *, cv_folds=None):
    """Fit (and cross-validate) per ``args``; returns (model, record dict)."""
    from ._progress import ProgressSource, ProgressTuples

    _preflight(args, cv_folds)
    model = _estimator(args)
    record: dict = {"learner": args.learner, "store": os.path.abspath(args.store)}
    t0 = time.perf_counter()
    if args.learner == "sgd-bilinear":
        store = _open_store(args.store, want="tuple")
        steps = args.steps or store.n_tuples
        val = None
        if args.validation:
            vs = _open_store(args.validation, want="tuple")
            tup, _ = vs._read_tuples(0, vs.n_tuples)
            val = (vs.Q[tup[:, 0]], vs.D[tup[:, 1]], vs.D[tup[:, 2]])
        every = args.checkpoint_every or max(1, steps // 20)
        total = steps * (2 if model.refit else 1)
        with _progress(args, total, unit="tuples", desc="fit sgd-bilinear") as bar:
            model.fit(ProgressTuples(store, bar), n_steps=steps, validation=val, checkpoint_every=every,
                      batch_size=args.batch_size)
        record.update(tuples=store.n_tuples, steps=steps)
    else:
        store = _open_store(args.store, want="group")
        with _progress(args, store.n_rows, desc=f"fit {args.learner}") as bar:
            source = ProgressSource(store, bar)
            if cv_folds is not None:
                res = _run_cv(model, source, args, cv_folds)
                record["cv"] = _cv_record(res, args.learner)
                if args.learner in ("kernel", "sparse-kernel"):
                    pass  # cross_validate refits with the best alpha
            elif args.learner in ("kernel", "sparse-kernel"):
                model.fit(source, max_rows=args.max_rows) if args.learner == "sparse-kernel" else model.fit(source)
            elif args.learner == "sgd-pairwise":
                model.fit(source, n_pairs=args.n_pairs, max_rows=args.max_rows, batch_size=args.batch_size)
                record["pairs"] = int(model.t_)
            else:
                model.fit(source, max_rows=args.max_rows)
        record.update(rows=store.n_rows, groups=store.n_groups, features=store.n_features)
        if getattr(model, "cg_info_", None):
            info = model.cg_info_
            record["curve"] = {"x": list(range(1, len(info["residuals"]) + 1)), "y": info["residuals"],
                               "xlabel": "CG iteration", "ylabel": "max relative residual", "log_y": True}
    record["seconds"] = round(time.perf_counter() - t0, 3)
    record["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record["params"] = model.get_params()
    return model, record


def cmd_fit(args) -> int:
    if args.alphas is not None and args.alpha_given:
        raise UsageError("give either --alpha A or --alphas GRID (with --cv), not both")
    folds = args.cv if args.alphas is not None else None
    if args.alphas is None and args.cv_given:
        raise UsageError("--cv needs --alphas GRID (the values to choose from)")
    model, record = _fit_model(args, cv_folds=folds)
    record["command"] = "fit"
    _save_model(model, args.model, record)
    alpha = getattr(model, "alpha", None)
    extra = ""
    if "cv" in record:
        cv = record["cv"]
        how = "leave-one-query-out" if cv["folds"] == "query" else f"{cv['folds']}-fold"
        extra = f"; chose alpha={cv['best_alpha']:.6g} by {how} CV ({cv['scoring']} " \
                f"{cv['scores'][cv['best_index']]:.6g})"
    elif alpha is not None:
        extra = f"; alpha={alpha:.6g}"
    n = f"{record['rows']:,} rows" if "rows" in record else f"{record.get('steps', 0):,} tuple steps"
    _say(args, f"fitted {type(model).__name__} ({args.learner}) on {n} in {record['seconds']:.2f} s"
               f"{extra}; saved to {args.model}")
    return EXIT_OK


# ----------------------------------------------------------------------- cv
def cmd_cv(args) -> int:
    args.alpha = float(args.alphas[0])
    model, record = _fit_model(args, cv_folds=args.folds)
    cv = record["cv"]
    arrow = "higher" if cv["greater_is_better"] else "lower"
    how = "leave-one-query-out" if cv["folds"] == "query" else f"{cv['folds']}-fold cross-validation by query"
    _say(args, f"# {args.learner}: {how}, {cv['scoring']} ({arrow} is better)")
    _say(args, f"{'alpha':>14}  {cv['scoring']:>14}")
    for i, (a, s) in enumerate(zip(cv["alphas"], cv["scores"])):
        mark = "  <- best" if i == cv["best_index"] else ""
        _say(args, f"{a:>14.6g}  {s:>14.6g}{mark}")
    _say(args, f"best alpha = {cv['best_alpha']:.6g}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(_jsonable(cv), fh, indent=1)
    if args.model:
        record["command"] = "cv"
        _save_model(model, args.model, record)
        _say(args, f"saved the model refitted with alpha={cv['best_alpha']:.6g} to {args.model}")
    if args.plot:
        from . import _plot_selection

        _plot_selection.regularization_path(cv, args.plot)
        _say(args, f"wrote {args.plot}")
    return EXIT_OK


# ------------------------------------------------------------ evaluate/predict
def _parse_metrics(text):
    names = [m.strip().lower() for m in text.split(",") if m.strip()]
    k = None
    out = []
    for m in names:
        if m.startswith("ndcg"):
            rest = m[4:]
            if rest in ("", "@"):
                k = 10
            elif rest.startswith("@") and rest[1:].isdigit() and int(rest[1:]) > 0:
                if k is not None and k != int(rest[1:]):
                    raise UsageError("one NDCG cut-off per run (e.g. --metrics ndcg@10,map)")
                k = int(rest[1:])
            else:
                raise UsageError(f"bad metric {m!r}: use ndcg@K with K a positive integer")
            out.append("ndcg")
        elif m in ("disagreement", "map", "auc", "tuple_error"):
            out.append(m)
        else:
            raise UsageError(f"unknown metric {m!r}; choose from ndcg@K, disagreement, map, auc")
    if not out:
        raise UsageError("--metrics is empty")
    return out, (k or 10)


def _tuple_scores(model, store, args, bar):
    for batch in store.batches(batch_size=args.max_rows, shuffle_buffer=0):
        yield model.score(batch.Q, batch.D_pos), model.score(batch.Q, batch.D_neg)
        bar.update(len(batch))


def cmd_evaluate(args) -> int:
    from .metrics import RankingEvaluator, auc

    model = _load_model(args.model)
    kind = _kind_of(args.store)
    if type(model).__name__ == "SparseSGDRanker" or kind == "tuple":
        if kind != "tuple" or not hasattr(model, "score"):
            raise ValueError(f"{type(model).__name__} scores (query, item) tuples and is evaluated on a tuple "
                             "store" if kind != "tuple" else
                             f"{args.store} is a tuple store; only an sgd-bilinear model can score it")
        store = _open_store(args.store, want="tuple")
        wrong = n = 0
        with _progress(args, store.n_tuples, unit="tuples", desc="evaluate") as bar:
            for sp_, sn in _tuple_scores(model, store, args, bar):
                wrong += int(np.count_nonzero(sp_ <= sn))
                n += len(sp_)
        res = {"tuple_error": float(wrong / n) if n else float("nan")}
        _report_metrics(args, res, {"tuple_error": n})
        return EXIT_OK
    metrics, k = _parse_metrics(args.metrics)
    store = _open_store(args.store, want="group")
    _check_features(model, store)
    ranking = tuple(m for m in metrics if m in ("ndcg", "disagreement", "map"))
    ev = RankingEvaluator(k, ranking) if ranking else None
    ys, ss = [], []
    with _progress(args, store.n_rows, desc="evaluate") as bar:
        for block in store.blocks(max_rows=args.max_rows):
            s = np.asarray(model.predict(block.X), dtype=np.float64)
            y = np.asarray(block.y)
            if s.ndim == 2 and s.shape[1] == 1:
                s = s[:, 0]
            if y.ndim == 2 or s.ndim == 2:
                y = y.reshape(block.n_rows, -1)[:, args.output]
                s = s.reshape(block.n_rows, -1)[:, args.output]
            if ev is not None:
                ev.update(y, s, block.group_ptr, qid=block.qid)
            if "auc" in metrics:
                ys.append(y)
                ss.append(s)
            bar.update(block.n_rows)
    values, counts = {}, {}
    if ev is not None:
        for name, r in ev.result().items():
            values[name] = r.value
            counts[name] = r.n_queries
    if "auc" in metrics:
        values["auc"] = float(auc(np.concatenate(ys), np.concatenate(ss)))
        counts["auc"] = None
    _report_metrics(args, values, counts)
    return EXIT_OK


def _report_metrics(args, values, counts):
    if args.json:
        print(json.dumps(_jsonable({"model": args.model, "store": args.store, "metrics": values,
                                    "n_queries": counts}), sort_keys=True))
        return
    for name, v in values.items():
        c = counts.get(name)
        what = f"  ({c:,} queries)" if c is not None and name != "tuple_error" else (
            f"  ({c:,} tuples)" if c is not None else "  (one global group)")
        print(f"{name:<14} {v:.6f}{what}", flush=True)


def _check_features(model, store):
    nf = getattr(model, "n_features_in_", None)
    if nf is not None and int(nf) != store.n_features:
        raise ValueError(f"the model was trained on {nf} features but {store.path} has {store.n_features}")


def cmd_predict(args) -> int:
    out = Path(args.out)
    if out.suffix not in (".npy", ".zarr"):
        raise UsageError(f"--out must end with .npy or .zarr, got {args.out!r}")
    model = _load_model(args.model)
    kind = _kind_of(args.store)
    tuples = kind == "tuple"
    if tuples and not hasattr(model, "score"):
        raise ValueError(f"{args.store} is a tuple store; only an sgd-bilinear model scores tuples")
    if not tuples and type(model).__name__ == "SparseSGDRanker":
        raise ValueError("an sgd-bilinear model scores (query, item) tuples: pass a tuple store as --store")
    store = _open_store(args.store)
    if not tuples:
        _check_features(model, store)
    n = store.n_tuples if tuples else store.n_rows
    n_out = 2 if tuples else int(getattr(model, "n_outputs_", 1) or 1)
    shape = (n,) if n_out == 1 else (n, n_out)
    if out.exists() and out.is_dir() and not (out / "zarr.json").exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not a zarr array; refusing to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{uuid.uuid4().hex}.partial{out.suffix}")
    try:
        if out.suffix == ".npy":
            arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float64, shape=shape)
        else:
            import zarr

            root = zarr.open_group(str(tmp), mode="w")
            chunk = (min(max(n, 1), 1 << 20),) + ((n_out,) if n_out > 1 else ())
            arr = root.create_array("score", shape=shape, chunks=chunk, dtype="float64")
            root.attrs.update({"streamrank": "scores", "model": str(args.model), "store": str(args.store),
                               "columns": ["score_pos", "score_neg"] if tuples else None})
            if not tuples:
                root.create_array("qid", shape=(store.n_groups,), dtype="int64",
                                  chunks=(max(store.n_groups, 1),))[...] = np.asarray(store.qid)
                root.create_array("group_ptr", shape=(store.n_groups + 1,), dtype="int64",
                                  chunks=(store.n_groups + 1,))[...] = store.group_ptr
        with _progress(args, n, unit="tuples" if tuples else "rows", desc="predict") as bar:
            if tuples:
                t = 0
                for sp_, sn in _tuple_scores(model, store, args, bar):
                    arr[t:t + len(sp_)] = np.column_stack([sp_, sn])
                    t += len(sp_)
            else:
                for block in store.blocks(max_rows=args.max_rows):
                    s = np.asarray(model.predict(block.X), dtype=np.float64).reshape((block.n_rows,) + shape[1:])
                    arr[block.start:block.stop] = s
                    bar.update(block.n_rows)
        if out.suffix == ".npy":
            arr.flush()
            del arr
            os.replace(tmp, out)
        else:
            _replace_dir(tmp, out)
    finally:
        if tmp.exists():
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink()
    _say(args, f"wrote {n:,} scores{' (score_pos, score_neg per tuple)' if tuples else ''} to {out}")
    return EXIT_OK


# --------------------------------------------------------------------- plot
def cmd_plot(args) -> int:
    from . import _plot_selection as P

    src = Path(args.model)
    if not src.exists():
        raise FileNotFoundError(f"no model or model directory at {src}")
    kind = args.kind
    nightly = src.is_dir() and ((src / "reports").is_dir() or (src / "current").is_file())
    meta = None
    if not nightly:
        if _kind_of(src) != "model":
            raise ValueError(f"{src} is a store, not a model; plot takes --model M (or a nightly model directory)")
        meta = _model_meta(src)
    cli = (meta or {}).get("cli") or {}
    if kind == "auto":
        if nightly:
            kind = "nightly"
        elif cli.get("cv"):
            kind = "path"
        elif meta.get("class") in ("SparseSGDRanker", "PairwiseSGDRanker"):
            kind = "learning-curve"
        elif cli.get("curve"):
            kind = "curve"
        else:
            raise ValueError(f"{src} holds nothing to plot: fit with --alphas GRID --cv K to record a λ path, "
                             "or use an sgd model (learning curve) or a nightly model directory")
    size = dict(figsize=(args.width / args.dpi, args.height / args.dpi), dpi=args.dpi)
    if kind == "nightly":
        if not nightly:
            raise ValueError(f"{src} is not a nightly model directory (no reports/ or current)")
        P.nightly_history(src, args.out, **size)
    elif kind == "path":
        if not cli.get("cv"):
            raise ValueError(f"{src} has no cross-validation record; fit it with --alphas GRID --cv K")
        P.regularization_path(cli["cv"], args.out, **size)
    elif kind == "curve":
        if not cli.get("curve"):
            raise ValueError(f"{src} has no convergence record (only --learner cg records one)")
        P.convergence(cli["curve"], args.out, **size)
    else:
        model = _load_model(src)
        try:
            from .plot import learning_curve
        except ImportError:
            raise Unsupported("sr.plot.learning_curve is not available in this build") from None
        if not getattr(model, "history_", None):
            raise ValueError(f"{src} has no training history; fit with --checkpoint-every N")
        _call_sized(learning_curve, model, args.out, size)
    _say(args, f"wrote {args.out} ({kind})")
    return EXIT_OK


def _call_sized(fn, model, out, size):
    import inspect

    params = inspect.signature(fn).parameters
    kw = {k: v for k, v in size.items() if k in params}
    fn(model, out, **kw)


# ------------------------------------------------------------------- parser
EXAMPLES = {
    "ingest": """examples:
  streamrank ingest /data/MQ2008_QueryLevelNorm.tar.gz:MQ2008/Fold1/train.txt --store train.zarr
  streamrank ingest day1.txt.gz day2.npz --store logs.zarr
  streamrank ingest tuples_today.zarr --store tuples.zarr --format zarr

SRC is LETOR/svmlight text (plain, .gz, or ARCHIVE.tar.gz:MEMBER), a .npz with
arrays X, y, qid, or a zarr store (GroupStore, or a TupleStore — tuples for
sgd-bilinear can only be ingested from a TupleStore, i.e. --format zarr).
Each chunk is one atomic append with batch id ID#i (default ID: file name +
hash of path, size, mtime): ingesting the same source again adds nothing, and
an interrupted ingest continues where it stopped.""",
    "info": """examples:
  streamrank info train.zarr
  streamrank info model.zarr --json""",
    "fit": """examples:
  streamrank fit --store train.zarr --model m.zarr --learner rankrls --alphas 2^-10:2^10 --cv 5
  streamrank fit --store train.zarr --model m.zarr --learner cg --alpha 1 --tol 1e-8
  streamrank fit --store train.zarr --model k.zarr --learner sparse-kernel --n-basis 500 --gamma 0.05
  streamrank fit --store tuples.zarr --model w.zarr --learner sgd-bilinear --steps 100000 --l1 1e-5

GRID: '0.1,1,10' | '2^-15:2^15[:STEP]' | '10^-3:10^3' | 'LO:HI:N' (log-spaced).
--cv K chooses alpha by K-fold CV by query (or 'query': leave-one-query-out)
from the learner's statistics (rankrls, kernel, sparse-kernel only).""",
    "evaluate": """examples:
  streamrank evaluate --model m.zarr --store test.zarr
  streamrank evaluate --model m.zarr --store test.zarr --metrics ndcg@5,map,auc --json
  streamrank evaluate --model w.zarr --store test_tuples.zarr     # tuple error""",
    "predict": """examples:
  streamrank predict --model m.zarr --store test.zarr --out scores.npy
  streamrank predict --model m.zarr --store test.zarr --out scores.zarr   # + qid, group_ptr""",
    "cv": """examples:
  streamrank cv --store train.zarr --learner rankrls --alphas 2^-15:2^15 --folds 5
  streamrank cv --store train.zarr --learner kernel --alphas 1e-3:1e3:7 --folds query --scoring ndcg@10 --plot path.png""",
    "plot": """examples:
  streamrank plot --model m.zarr --out path.png          # λ path of a model fitted with --alphas/--cv
  streamrank plot --model w.zarr --out curve.png         # learning curve of an sgd model
  streamrank plot --model nightly_models/ --out nights.png   # history of the nightly pipeline""",
}


def _common(p):
    g = p.add_argument_group("output")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress or log messages (results still printed)")
    g.add_argument("-v", "--verbose", action="store_true", help="debug messages; tracebacks on errors")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line + the usage hint, exit code 2
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _SetFlag(argparse.Action):
    """Store the value and remember that the option was given."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, self.dest + "_given", True)


def _learner_options(p, *, cv_option: bool):
    p.add_argument("--learner", required=True, choices=LEARNERS, metavar="LEARNER",
                   help="one of: " + ", ".join(LEARNERS))
    if cv_option:
        p.add_argument("--alpha", type=_positive_float, default=1.0, action=_SetFlag,
                       help="regularization λ (default 1)")
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS, help="block budget in rows (default 65536)")
    p.add_argument("--scoring", default="squared",
                   help="CV score: squared (least-squares ranking loss, default), disagreement, ndcg@K")
    r = p.add_argument_group("RankRLS (rankrls, cg, kernel, sparse-kernel)")
    r.add_argument("--group-weight", choices=("pair", "query", "size"), default="pair",
                   help="weight of a query's pairs (default pair)")
    r.add_argument("--ties", choices=("include", "exclude"), default="include")
    r.add_argument("--tol", type=_positive_float, default=1e-6, help="cg: relative residual tolerance")
    r.add_argument("--max-iter", type=int, default=None, help="cg: iteration limit")
    k = p.add_argument_group("kernels (kernel, sparse-kernel)")
    k.add_argument("--kernel", choices=("rbf", "linear", "poly"), default="rbf")
    k.add_argument("--gamma", type=_positive_float, default=1.0)
    k.add_argument("--degree", type=int, default=2)
    k.add_argument("--coef0", type=float, default=0.0)
    k.add_argument("--n-basis", type=int, default=256, help="sparse-kernel: basis rows (default 256)")
    s = p.add_argument_group("SGD (sgd-bilinear, sgd-pairwise)")
    s.add_argument("--eta0", type=_positive_float, default=None, help="step size C of eta_t = C/sqrt(t)")
    s.add_argument("--l1", type=float, default=None, help="cumulative L1 strength (default: the learner's)")
    s.add_argument("--l2", type=float, default=None, help="sgd-pairwise: L2 strength (default 0)")
    s.add_argument("--loss", choices=("hinge", "logistic"), default=None, help="sgd-pairwise loss (default hinge)")
    s.add_argument("--shrink-every", type=int, default=None, help="T: soft-threshold every T steps (default 100)")
    s.add_argument("--init", choices=("identity", "zeros"), default=None, help="sgd-bilinear W_0 (default identity)")
    s.add_argument("--no-refit", action="store_true", help="sgd-bilinear: skip the refit on the support")
    s.add_argument("--steps", type=int, default=None, help="sgd-bilinear: SGD steps (default: one pass)")
    s.add_argument("--n-pairs", type=int, default=None,
                   help="sgd-pairwise: pairs sampled within queries (default: one per row)")
    s.add_argument("--batch-size", type=int, default=1024)
    s.add_argument("--checkpoint-every", type=int, default=None,
                   help="sgd-bilinear: record history every N steps (default steps/20)")
    s.add_argument("--validation", default=None, metavar="TUPLESTORE",
                   help="sgd-bilinear: tuple store whose tuple error is recorded in the history")
    p.add_argument("--seed", type=int, default=0, help="random seed (basis sample, tuple order)")


def build_parser() -> argparse.ArgumentParser:
    top = _Parser(prog="streamrank", description="streamrank: learning to rank from data that does not fit in "
                  "memory.\n\n" + "\n".join(
        __doc__.split("::\n\n")[1].split("\n\n")[0].splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items())
        + "\nRun 'streamrank COMMAND --help' for each command's options and an example.")
    top.add_argument("--version", action="version", version=_version())
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    fmt = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser("ingest", help="append LETOR text, .npz or zarr stores to a store", epilog=EXAMPLES["ingest"],
                       formatter_class=fmt, description="Append data to a GroupStore (or TupleStore), atomically.")
    p.add_argument("sources", nargs="+", metavar="SRC")
    p.add_argument("--store", required=True, help="store to append to (created if missing)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="letor (svmlight text), npz (X, y, qid) or zarr (a store); default: by the path")
    p.add_argument("--batch-id", default=None, metavar="ID", help="batch id in the store's append log")
    p.add_argument("--features", type=int, default=None, help="number of features (default: inferred)")
    p.add_argument("--sparse", action="store_true", help="store X as CSR (new stores)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="stop after about N rows (whole queries)")
    p.add_argument("--chunk-mb", type=float, default=8.0, help="text parsed per append (MB, default 8)")
    p.add_argument("--null-value", type=float, default=None, help="value for NULL features (LETOR 3.0)")
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS, help="rows per append when copying a store")
    _common(p)
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("info", help="describe a store or a saved model", epilog=EXAMPLES["info"], formatter_class=fmt,
                       description="Rows, groups, features, size on disk, batches appended and format version "
                                   "of a store; class, parameters and training record of a model.")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--json", action="store_true", help="print JSON")
    _common(p)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("fit", help="fit a learner on a store and save the model", epilog=EXAMPLES["fit"],
                       formatter_class=fmt, description="Fit a learner on a store and save it with sr.save "
                                                        "(atomic: the model appears complete or not at all).")
    p.add_argument("--store", required=True)
    p.add_argument("--model", required=True, metavar="OUT", help="where to save the model (a zarr directory)")
    _learner_options(p, cv_option=True)
    p.add_argument("--alphas", type=_grid_type, default=None, metavar="GRID", help="λ grid to choose from by CV")
    p.add_argument("--cv", type=_folds_type, default=5, action=_SetFlag, metavar="K|query",
                   help="folds by query for --alphas (default 5)")
    _common(p)
    p.set_defaults(func=cmd_fit, alpha_given=False, cv_given=False)

    p = sub.add_parser("evaluate", help="ranking metrics of a model on a store", epilog=EXAMPLES["evaluate"],
                       formatter_class=fmt, description="Stream a store through a model; print the mean "
                                                        "metrics over queries (AUC: one global group).")
    p.add_argument("--model", required=True, metavar="M")
    p.add_argument("--store", required=True)
    p.add_argument("--metrics", default="ndcg@10,disagreement,map", help="comma list of ndcg@K, disagreement, map, auc")
    p.add_argument("--output", type=int, default=0, help="score column for multi-output stores")
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS)
    p.add_argument("--json", action="store_true", help="print JSON")
    _common(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("predict", help="write the scores of every row of a store", epilog=EXAMPLES["predict"],
                       formatter_class=fmt, description="Scores in store row order, float64, written atomically.")
    p.add_argument("--model", required=True, metavar="M")
    p.add_argument("--store", required=True)
    p.add_argument("--out", required=True, metavar="SCORES", help="SCORES.npy or SCORES.zarr")
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS)
    _common(p)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("cv", help="cross-validate λ over a grid", epilog=EXAMPLES["cv"], formatter_class=fmt,
                       description="Group cross-validation of a grid of λ from one pass of statistics; "
                                   "prints the score of every λ and the best.")
    p.add_argument("--store", required=True)
    _learner_options(p, cv_option=False)
    p.add_argument("--alphas", type=_grid_type, required=True, metavar="GRID")
    p.add_argument("--folds", type=_folds_type, default=5, metavar="K|query", help="K folds by query, or 'query'")
    p.add_argument("--model", default=None, metavar="OUT", help="also save the model refitted with the best λ")
    p.add_argument("--json", default=None, metavar="FILE", help="write the scores as JSON")
    p.add_argument("--plot", default=None, metavar="PNG", help="write the λ path plot")
    _common(p)
    p.set_defaults(func=cmd_cv)

    p = sub.add_parser("plot", help="plot a λ path, learning curve or nightly history", epilog=EXAMPLES["plot"],
                       formatter_class=fmt, description="Write a PNG (needs matplotlib: the plot extra).")
    p.add_argument("--model", required=True, metavar="M", help="a saved model, or a nightly model directory")
    p.add_argument("--out", required=True, metavar="PNG")
    p.add_argument("--kind", choices=("auto", "path", "learning-curve", "curve", "nightly"), default="auto")
    p.add_argument("--width", type=int, default=800, help="pixels (default 800)")
    p.add_argument("--height", type=int, default=500, help="pixels (default 500)")
    p.add_argument("--dpi", type=int, default=100)
    _common(p)
    p.set_defaults(func=cmd_plot)
    return top


def _version():
    from . import __version__

    return f"streamrank {__version__}"


# --------------------------------------------------------------------- main
def _exit_code(exc) -> int:
    from .io.schema import StoreFormatError
    from .persistence import ModelFormatError

    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, Unsupported) or isinstance(exc, NotImplementedError):
        return EXIT_UNSUPPORTED
    if isinstance(exc, FileNotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(exc, (FileExistsError, PermissionError, IsADirectoryError)):
        return EXIT_WRITE
    if isinstance(exc, RuntimeError) and "one writer at a time" in str(exc):
        return EXIT_WRITE
    if isinstance(exc, (StoreFormatError, ModelFormatError, ValueError, TypeError, KeyError, OSError)):
        return EXIT_DATA
    return EXIT_BUG


def _setup_logging(args):
    level = logging.ERROR if args.quiet else (logging.DEBUG if args.verbose else logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("streamrank: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def _show_warning(args):
    """Warnings as one ``streamrank: warning: ...`` line (none with --quiet; the source line with --verbose)."""
    import warnings

    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if args.verbose:
            return default(message, category, filename, lineno, file, line)
        if not args.quiet:
            print(f"streamrank: warning: {message}", file=sys.stderr, flush=True)

    return show


def _on_sigterm(signum, frame):
    raise _Terminated()


def main(argv=None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return int(exc.code or 0)
    import warnings

    saved_log = (list(log.handlers), log.level, log.propagate)
    _setup_logging(args)
    old = None
    try:
        old = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (e.g. called from a test thread)
        pass
    try:
        with warnings.catch_warnings():
            if not args.verbose:
                warnings.simplefilter("ignore", category=RuntimeWarning)
            warnings.showwarning = _show_warning(args)
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"streamrank {args.command}: interrupted; nothing half-written was left (stores keep their "
              "last commit, models are written whole or not at all)", file=sys.stderr, flush=True)
        return EXIT_SIGINT
    except _Terminated:
        print(f"streamrank {args.command}: terminated (SIGTERM); nothing half-written was left",
              file=sys.stderr, flush=True)
        return EXIT_SIGTERM
    except Exception as exc:  # noqa: BLE001 - every error becomes one line and an exit code
        code = _exit_code(exc)
        if args.verbose:
            traceback.print_exc(file=sys.stderr)
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, KeyError):
            msg = f"missing entry {msg}"
        hint = {EXIT_BUG: f" [{type(exc).__name__}; unexpected: rerun with --verbose and report it]",
                EXIT_NOT_FOUND: " (check the path)"}.get(code, "")
        if code == EXIT_DATA and not args.verbose:
            hint = " (--verbose for details)"
        print(f"streamrank {args.command}: error: {msg}{hint}", file=sys.stderr, flush=True)
        return code
    finally:
        log.handlers[:], log.level, log.propagate = saved_log
        if old is not None:
            try:
                signal.signal(signal.SIGTERM, old)
            except ValueError:
                pass


def _console():  # pragma: no cover - the installed script calls main() and exits
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
