"""The errors of a nightly models directory, local or at a URL (below both kinds, so neither imports the other)."""
from __future__ import annotations

__all__ = ["ModelsDirError", "ModelsLocked"]


class ModelsDirError(ValueError):
    """The models directory holds something the pipeline did not write (a damaged pointer or version)."""


class ModelsLocked(RuntimeError):
    """Another process holds the models directory's lock (one writer at a time)."""
