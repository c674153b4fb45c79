"""Temporary siblings for atomic writes that follow the umask.

``tempfile.mkstemp`` creates its file mode 0600 whatever the umask, and ``os.replace`` keeps that mode: a run,
an export or a score file written through it could not be read by a serving process running as another user.
:func:`temp_sibling` creates the file mode ``0666 & ~umask``, as ``open(path, "w")`` would.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["temp_sibling"]


def temp_sibling(path, suffix: str = ".partial") -> tuple[int, str]:
    """Create a new, empty temporary file beside ``path`` (``.NAME.XXXXXXXX.partial``, mode 0666 & ~umask).

    Returns ``(fd, name)`` as ``tempfile.mkstemp`` does (the file is opened for reading and writing); the caller
    writes it and renames it over ``path``.
    """
    path = Path(path)
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}{suffix}"
        try:
            return os.open(tmp, flags, 0o666), str(tmp)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")
