"""``streamrank evaluate`` (ranking metrics, tuple error) and ``streamrank predict`` (scores, written atomically)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from ._atomic import _npy_partial, _partial_sibling, _replace_dir, _sweep_npy_partials
from ._common import EXIT_OK, UsageError, _progress, _say, log
from ._file_source import open_data
from ._stores import _jsonable, _kind_of, _load_model, _open_store


def _parse_metrics(text):
    """--metrics text -> list of names for metrics.evaluate (auc and tuple_error kept by name).

    Checked with the kernel-free parser, so a bad name is answered before numba is imported."""
    from .._metric_names import parse_metrics

    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise UsageError("--metrics is empty")
    ranking = [m for m in names if m.lower() not in ("auc", "tuple_error")]
    if ranking:
        try:
            parse_metrics(ranking)
        except ValueError as e:
            raise UsageError(f"{e} (or auc)") from None
    return names


def _tuple_scores(model, store, args, bar):
    for batch in store.batches(batch_size=args.max_rows, shuffle_buffer=0):
        yield model.predict(batch.Q, batch.D_pos), model.predict(batch.Q, batch.D_neg)
        bar.update(len(batch))


def cmd_evaluate(args) -> int:
    if args.run is not None or args.qrels is not None:  # usage errors first: before importing the metrics' kernels
        if args.run is None or args.qrels is None:
            raise UsageError("--run and --qrels go together (a TREC run file and its judgments)")
        if args.model is not None or args.store is not None:
            raise UsageError("evaluate takes either --model and --store, or --run and --qrels")
    elif args.model is None or args.store is None:
        raise UsageError("evaluate needs --model and --store (or --run and --qrels)")
    names = _parse_metrics(args.metrics)
    from ..metrics import evaluate, evaluate_run

    options = dict(gain=args.gain, empty=args.empty)
    if args.ties is None:
        args.ties = "trec" if args.run is not None else "expected"
    if args.run is not None:
        bad = [m for m in names if m.lower() in ("auc", "tuple_error")]
        if bad:
            raise UsageError(f"{bad[0]} is not available for a run file")
        res = evaluate_run(args.run, args.qrels, ",".join(names), ties=args.ties, **options)
        _report_metrics(args, res, {"run": args.run, "qrels": args.qrels})
        return EXIT_OK
    if args.ties != "expected":
        raise UsageError("--ties trec needs document ids: evaluate a TREC run (--run, --qrels) instead")
    model = _load_model(args.model)
    kind, source = open_data(args.store, args, model)
    if kind == "file":
        with _progress(args, None, desc="evaluate") as bar:
            source.progress = bar
            res = evaluate(source, model, 10, metrics=names, max_rows=args.max_rows, output=args.output, **options)
        _report_metrics(args, res, {"model": args.model, "data": source.name})
        return EXIT_OK
    if type(model).__name__ == "SparseSGDRanker" or kind == "tuple":
        if kind != "tuple" or not hasattr(model, "score"):
            raise ValueError(f"{type(model).__name__} scores (query, item) tuples and is evaluated on a tuple "
                             "store" if kind != "tuple" else
                             f"{args.store} is a tuple store; only an sgd-bilinear model can score it")
        store = _open_store(args.store, want="tuple")
        wrong = n = 0
        with _progress(args, store.n_tuples, unit="tuples", desc="evaluate") as bar:
            for sp_, sn in _tuple_scores(model, store, args, bar):
                wrong += int(np.count_nonzero(~(sp_ > sn)))
                n += len(sp_)
        from ..metrics import MetricResult

        res = {"tuple_error": MetricResult("tuple_error", float(wrong / n) if n else float("nan"), n, 0)}
        _report_metrics(args, res, {"model": args.model, "store": args.store}, unit="tuples")
        return EXIT_OK
    store = _open_store(args.store, want="group")
    _check_features(model, store)
    with _progress(args, store.n_rows, desc="evaluate") as bar:
        res = evaluate(_Counted(store, bar), model, 10, metrics=names, max_rows=args.max_rows,
                       output=args.output, **options)
    _report_metrics(args, res, {"model": args.model, "store": args.store})
    return EXIT_OK


class _Counted:
    """The store's blocks, advancing the progress bar as each one is read."""

    def __init__(self, store, bar):
        self.store, self.bar = store, bar

    def blocks(self, max_rows):
        for block in self.store.blocks(max_rows=max_rows):
            yield block
            self.bar.update(block.n_rows)


def _report_metrics(args, res, where, unit="queries"):
    values = {name: r.value for name, r in res.items()}
    if args.json:
        counts = {name: (None if name == "auc" else r.n_queries) for name, r in res.items()}
        skipped = {name: (None if name == "auc" else r.n_skipped) for name, r in res.items()}
        print(json.dumps(_jsonable({**where, "metrics": values, "n_queries": counts, "n_skipped": skipped,
                                    "gain": args.gain, "empty": args.empty, "ties": args.ties}),
                         sort_keys=True))
        return
    for name, r in res.items():
        if name == "auc":
            what = "  (one global group)"
        elif unit == "tuples":
            what = f"  ({r.n_queries:,} tuples)"
        else:
            what = f"  ({r.n_queries:,} queries" + (f", {r.n_skipped:,} skipped)" if r.n_skipped else ")")
        print(f"{name:<14} {r.value:.6f}{what}", flush=True)


def _check_features(model, store):
    nf = getattr(model, "n_features_in_", None)
    if nf is not None and int(nf) != store.n_features:
        raise ValueError(f"the model was trained on {nf} features but {store.path} has {store.n_features}")


def cmd_predict(args) -> int:
    if args.out is None and getattr(args, "run", None) is None:
        raise UsageError("predict needs --out SCORES.npy|SCORES.zarr and/or --run RUN.trec")
    if getattr(args, "qrels", None) is not None and getattr(args, "run", None) is None:
        raise UsageError("--qrels writes the judgments beside a run: give --run RUN.trec too")
    if args.out is None:
        model = _load_model(args.model)
        kind, source = open_data(args.store, args, model, need_labels=False)
        if kind == "file":
            return _predict_file(args, model, source, None)
        return _predict_run(args, model)
    out = Path(args.out)
    if out.suffix not in (".npy", ".zarr"):
        raise UsageError(f"--out must end with .npy or .zarr, got {args.out!r}")
    model = _load_model(args.model)
    kind, source = open_data(args.store, args, model, need_labels=False)
    if kind == "file":
        return _predict_file(args, model, source, out)
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
    if out.suffix == ".npy":
        for p in _sweep_npy_partials(out):   # a full-size leftover of a killed predict
            log.info("removed %s, left by a predict that was killed", p)
    tmp = _partial_sibling(out) if out.suffix != ".npy" else _npy_partial(out)
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
                string_ids = getattr(store, "qid_kind", "int") == "str"   # kept as appended (io/groups.py)
                root.create_array("qid", shape=(store.n_groups,), dtype=str if string_ids else "int64",
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
    if getattr(args, "run", None) is not None:
        return _predict_run(args, model)
    return EXIT_OK


def _predict_run(args, model) -> int:
    """``--run``: the TREC run file of the store's queries (:mod:`streamrank.cli._run`)."""
    from ._common import Unsupported
    from ._run import write_run

    if _kind_of(args.store) == "tuple" or type(model).__name__ == "SparseSGDRanker":
        raise Unsupported("--run ranks the rows of a scored-group store; a tuple store has no queries to rank")
    store = _open_store(args.store, want="group")
    _check_features(model, store)
    with _progress(args, store.n_rows, unit="rows", desc="run") as bar:
        n = write_run(args.run, model, store, max_rows=args.max_rows, tag=args.run_tag,
                      output=getattr(args, "output", 0), progress=bar)
    ids = "doc ids from the store" if store.has_docids else "row numbers as doc ids (store without doc ids)"
    _say(args, f"wrote a run of {n:,} lines ({store.n_groups:,} queries; {ids}) to {args.run}")
    if getattr(args, "qrels", None) is not None:
        from ._run import write_qrels

        n = write_qrels(args.qrels, store, max_rows=args.max_rows, output=getattr(args, "output", 0))
        _say(args, f"wrote {n:,} judgments (the store's labels) to {args.qrels}")
    return EXIT_OK


def _predict_file(args, model, source, out) -> int:
    """predict from a text or Parquet file (:class:`~streamrank.cli._file_source.FileSource`): one streamed
    pass; the scores (8 bytes a row, not the features) are held until they are written atomically."""
    from ._common import Unsupported
    from ._run import check_tag, run_block_lines

    if getattr(args, "qrels", None) is not None:
        raise Unsupported(f"--qrels writes the labels of a store; ingest {args.store} first "
                          "(streamrank ingest FILE --store S --docids) and predict from the store")
    scores, qids, sizes = [], [], []
    run_tmp = fh = None
    if args.run is not None:
        from .._tempfiles import temp_sibling

        run_path = Path(args.run)
        run_path.parent.mkdir(parents=True, exist_ok=True)
        fd, run_tmp = temp_sibling(run_path)
        fh = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
    n_named = 0
    try:
        tag = check_tag(args.run_tag)
        source.with_docids = fh is not None
        with _progress(args, None, desc="predict") as bar:
            source.progress = bar
            for block, names in source.blocks_with_docids(max_rows=args.max_rows):
                s = np.asarray(model.predict(block.X), dtype=np.float64)
                scores.append(s)
                qids.append(np.asarray(block.qid))
                sizes.append(np.diff(block.group_ptr))
                if fh is not None:
                    fh.write(run_block_lines(block, s, names, tag, getattr(args, "output", 0)))
                    n_named += sum(1 for r, d in enumerate(names) if d != f"row{block.start + r}")
        if fh is not None:
            fh.close()
            fh = None
            os.replace(run_tmp, args.run)
    finally:
        if fh is not None:
            fh.close()
        if run_tmp is not None and os.path.exists(run_tmp):
            os.unlink(run_tmp)
    score = np.concatenate(scores) if scores else np.zeros(0)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".npy":
            tmp = _npy_partial(out)
            try:
                np.save(tmp, score)
                os.replace(tmp, out)
            finally:
                tmp.unlink(missing_ok=True)
        else:
            import zarr

            if out.exists() and out.is_dir() and not (out / "zarr.json").exists() and any(out.iterdir()):
                raise FileExistsError(f"{out} exists and is not a zarr array; refusing to overwrite it")
            tmp = _partial_sibling(out)
            try:
                root = zarr.open_group(str(tmp), mode="w")
                root.create_array("score", data=score)
                qid = np.concatenate(qids) if qids else np.zeros(0, np.int64)
                root.create_array("qid", data=qid if qid.dtype != object else qid.astype(str))
                ptr = np.concatenate(([0], np.cumsum(np.concatenate(sizes) if sizes else []))).astype(np.int64)
                root.create_array("group_ptr", data=ptr)
                root.attrs.update({"streamrank": "scores", "model": str(args.model), "data": source.name})
                _replace_dir(tmp, out)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        _say(args, f"wrote {len(score):,} scores of {source.name} to {out}")
    if args.run is not None:
        ids = ("doc ids from the file" if n_named == len(score) else
               "row numbers of the file as doc ids (no doc ids in it)" if n_named == 0 else
               f"doc ids from the file, row numbers for {len(score) - n_named:,} rows without one")
        _say(args, f"wrote a run of {len(score):,} lines ({source.n_groups:,} queries; {ids}) to {args.run}")
    return EXIT_OK
