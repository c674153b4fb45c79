"""``streamrank info``: a store's or a saved model's description (text, or ``--json``)."""
from __future__ import annotations

import json

import numpy as np

from ._common import EXIT_OK
from ._stores import _dir_size, _human, _jsonable, _kind_of, _load_model, _model_meta, _open_store, _resolve_pointer


def _top_weights(model, top: int):
    """The ``top`` largest |weights| of a linear model as [name, weight] (output 0 of a multi-output model)."""
    try:
        w = np.asarray(model.coef_, dtype=np.float64)
    except Exception:
        return None
    if w.ndim == 2:
        w = w[:, 0]
    if w.ndim != 1:
        return None
    names = getattr(model, "feature_names_in_", None)
    # without names, a weight is listed by its column (0-based), never by a made-up name: export needs names
    names = [str(n) for n in names] if names is not None else [f"column {j}" for j in range(w.size)]
    order = np.argsort(-np.abs(w), kind="stable")[: max(int(top), 0)]
    return [[names[j], float(w[j])] for j in order]


def cmd_info(args) -> int:
    if (args.path is None) == (getattr(args, "model", None) is None):
        raise ValueError("give a store or model PATH, or --model M (not both)")
    if args.path is None:
        args.path = args.model
        if _kind_of(args.path) != "model":
            raise ValueError(f"--model {args.path} is not a saved model")
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
        names = getattr(model, "feature_names_in_", None)
        out["feature_names"] = len(names) if names is not None else \
            "none (weights listed by column; export to a search engine needs --feature-names)"
        top = _top_weights(model, getattr(args, "top", 10))
        if top is not None:
            out["top_weights"] = top
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
                       outputs=store.n_outputs, sparse=store.sparse, nnz=store.nnz,
                       group_identity=store.group_identity, qid_kind=store.qid_kind,
                       feature_names=(len(store.feature_names) if store.feature_names else None),
                       row_columns=list(store.row_columns) or None, docids=store.has_docids)
        else:
            out.update(tuples=store.n_tuples, queries=store.n_queries, items=store.n_items,
                       query_features=store.n_query_features, item_features=store.n_item_features)
        if getattr(args, "verify", False):
            out["verified_batches"] = store.verify()
    if args.json:
        print(json.dumps(_jsonable(out), indent=1, sort_keys=True))
        return EXIT_OK
    width = max(len(k) for k in out)
    for k, v in out.items():
        if k == "size_on_disk":
            v = f"{_human(v)} ({v:,} bytes)"
        elif isinstance(v, int) and not isinstance(v, bool):
            v = f"{v:,}"
        elif k == "top_weights":
            print(f"{k:<{width}}  (by |weight|)")
            for name, w in v:
                print(f"{'':<{width}}    {w:+.6g}  {name}")
            continue
        elif isinstance(v, (dict, list)):
            v = json.dumps(_jsonable(v), sort_keys=True)
        print(f"{k:<{width}}  {v}")
    return EXIT_OK
