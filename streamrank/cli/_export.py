"""``streamrank export``: a saved model out to a search engine or runtime format (:func:`streamrank.export`)."""
from __future__ import annotations

from pathlib import Path

from ._common import EXIT_OK, Unsupported, UsageError, _say
from ._stores import _load_model


def _feature_names(spec):
    """``--feature-names``: a comma list, or ``@FILE`` with one name per line."""
    if spec is None:
        return None
    if spec.startswith("@"):
        path = Path(spec[1:])
        if not path.is_file():
            raise FileNotFoundError(f"--feature-names file {path} does not exist")
        names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        names = [s.strip() for s in spec.split(",")]
    if not names or any(not s for s in names):
        raise UsageError("--feature-names needs non-empty names: 'a,b,c' or @FILE (one name per line)")
    return names


def cmd_export(args) -> int:
    import streamrank as sr
    from ..exporters import CannotExport

    model = _load_model(args.model)
    names = _feature_names(args.feature_names)
    if names is not None and type(model).__name__ == "SparseSGDRanker":
        raise Unsupported("--feature-names: a SparseSGDRanker has query and item features; "
                          "export it with sr.export(..., feature_names=(query_names, item_names))")
    try:
        sr.export(model, args.out, format=args.format, name=args.name, feature_names=names,
                  solr_store=args.solr_store, bilinear_graph=args.bilinear_graph)
    except (CannotExport, ImportError) as exc:
        msg = str(exc).replace("pass feature_names=[...]", "pass --feature-names a,b,c or @FILE (one name a line)")
        raise Unsupported(msg.replace("a store created with feature_names=", "a store with feature names")) from None
    _say(args, f"wrote {args.out} ({args.format}, {type(model).__name__})")
    return EXIT_OK
