"""``streamrank evaluate`` (ranking metrics, tuple error) and ``streamrank predict`` (scores, written atomically)."""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from ._atomic import _partial_sibling, _replace_dir
from ._common import EXIT_OK, UsageError, _progress, _say
from ._stores import _jsonable, _kind_of, _load_model, _open_store


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
    from ..metrics import RankingEvaluator, auc

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
    tmp = _partial_sibling(out) if out.suffix != ".npy" else out.with_name(
        f".{out.stem}.{uuid.uuid4().hex}.partial{out.suffix}")
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
