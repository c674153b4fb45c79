"""``sr.export(model, path, format=...)`` (defined here): models out, to the engines and runtimes where rankers serve.

| format | what is written | models |
|---|---|---|
| ``onnx`` | an ONNX graph (float32 in/out, normalization included) | every named-kernel model |
| ``opensearch`` | the LTR plugin's ``_createmodel`` body, ``model/linear`` | linear, one output |
| ``elasticsearch`` | the same body (the Elasticsearch LTR plugin's format) | linear, one output |
| ``solr`` | a Solr LTR ``LinearModel`` model-store entry | linear, one output |
| ``json`` | a plain, versioned description (:mod:`.json_format`) | every model |

Linear models are RankRLS (primal and cg) and PairwiseSGDRanker; kernel models
KernelRankRLS (dual and sparse) and TransductiveRankRLS; SparseSGDRanker is
bilinear.  A model a format cannot express is refused with
:class:`CannotExport`, whose message names the formats that can.  Formats and
formulas: :mod:`.ltr` (taken from the plugins' own parser and scorer classes),
:mod:`.onnx_graph`, :mod:`.json_format`.  ONNX needs the ``export`` extra
(``pip install 'streamrank[export]'``, the ``onnx`` package).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import json
import os
from pathlib import Path

from .._tempfiles import temp_sibling
from ._describe import CannotExport, ModelDescription, describe
from ._optional import require

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._typing import PathLike
    from ..base import BaseRanker

__all__ = ["export", "FORMATS", "CannotExport", "describe", "ModelDescription", "require"]

FORMATS = ("onnx", "opensearch", "elasticsearch", "solr", "json")

def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary sibling and rename it into place (a crash leaves the old file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_sibling(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def export(model: BaseRanker, path: PathLike, format: str = "json", *, name: str | None = None,
           feature_names: Sequence[str] | None = None, solr_store: str = "_DEFAULT_",
           bilinear_graph: str = "auto") -> Any:
    """Write ``model`` to ``path`` in ``format`` (see the table in :mod:`streamrank.exporters`).

    Parameters
    ----------
    model
        a fitted streamrank learner
    path
        file to write (replaced atomically)
    format : {"onnx", "opensearch", "elasticsearch", "solr", "json"}
        The format (see the table of the module).
    name
        the model's name in the engine (default: the file name without its suffix)
    feature_names : the names of the features in column order, overriding the model's
        ``feature_names_in_`` (the engine's feature names; required by the search-engine
        formats when the model carries none).  For a SparseSGDRanker a pair (query names,
        item names).
    solr_store
        the Solr feature store the model's features live in
    bilinear_graph : SparseSGDRanker's ONNX graph, {"auto", "dense", "gather"} (see
        :mod:`streamrank.exporters.onnx_graph`)

    Notes
    -----
    Returns the written document: the ``onnx.ModelProto`` or the JSON dict.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    path = Path(path)
    name = path.stem if name is None else str(name)
    desc = describe(model, feature_names=feature_names)
    if format == "onnx":
        from .onnx_graph import to_onnx

        doc = to_onnx(desc, name=name, bilinear_graph=bilinear_graph)
        _write_atomic(path, doc.SerializeToString())
        return doc
    if format in ("opensearch", "elasticsearch"):
        from .ltr import opensearch_body

        doc = opensearch_body(desc, name, format)
    elif format == "solr":
        from .ltr import solr_model

        doc = solr_model(desc, name, solr_store)
    else:
        from .json_format import to_json

        doc = to_json(desc)
    _write_atomic(path, (json.dumps(doc, indent=1, allow_nan=False) + "\n").encode("utf-8"))
    return doc
