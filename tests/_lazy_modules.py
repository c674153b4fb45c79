"""Optional dependencies of a test module, imported when a test first uses them rather than at collection.

Every pytest process (each pytest-xdist worker) imports every test module, also those whose tests run on the
other worker or are deselected (``-m "not slow"``): pandas and pyarrow cost about 0.5 CPU-s to import there.
``pa = LazyModule("pyarrow")`` imports pyarrow at the first ``pa.<name>``; ``pytestmark = needs("pyarrow")``
skips the module's tests without it, as a module-level ``pytest.importorskip`` did.
"""
from __future__ import annotations

import importlib
import importlib.util

import pytest


class LazyModule:
    """Stands for the module ``name``, imported on the first attribute access."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        if attr.startswith("_"):    # pytest probes module attributes for fixture markers at collection
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"LazyModule({self._name!r})"


def needs(*packages: str):
    """A skip mark for when a top-level package is missing (found without importing it)."""
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")
