"""The exporters' optional dependencies: imported where used, a missing one is a one-line error naming the extra."""
from __future__ import annotations

import importlib

__all__ = ["require"]

_EXTRAS = {"onnx": "export", "onnxruntime": "test"}


def require(module: str):
    """Import an optional dependency, or raise a one-line ImportError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        extra = _EXTRAS.get(module, "export")
        raise ImportError(f"this needs the {module!r} package: pip install 'streamrank[{extra}]'") from None
