"""Atomic writes: a model or score directory appears whole or not at all (Ctrl-C held between renames)."""
from __future__ import annotations

import shutil
import signal
from pathlib import Path

from ._stores import _jsonable, _kind_of


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

    :func:`streamrank._dir_swap.replace_dir`: two renames (old aside, new in)
    with Ctrl-C held back between them, so an interrupt leaves the old or the
    new directory at ``out``, never neither; a kill -9 between them leaves the
    old one as a pid-tagged ``.old``
    sibling that ``sr.load`` reads and the next write sweeps.
    """
    from .._dir_swap import replace_dir

    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; refusing to replace it")
    with _SignalsDeferred():
        replace_dir(tmp, out)


def _partial_sibling(out: Path, suffix: str = "") -> Path:
    """A pid-tagged temporary sibling of ``out``: a killed writer's leftover is swept by the next write."""
    from .._dir_swap import _sibling

    p = _sibling(out, "partial")
    return p.with_name(p.name + suffix)


def _npy_partial(out: Path) -> Path:
    """``.<stem>.<pid>-<random>.partial.npy`` beside ``out`` (a memmap needs the ``.npy`` suffix)."""
    import os
    import uuid

    return out.with_name(f".{out.stem}.{os.getpid()}-{uuid.uuid4().hex}.partial{out.suffix}")


def _sweep_npy_partials(out: Path) -> list:
    """Remove ``.npy`` partials that writers killed earlier left beside ``out`` (dead pids only).

    A partial of a live writer (a concurrent predict) and names without a pid
    are kept.  Returns the removed paths.
    """
    import glob as _glob

    from .._shared_paths import own_leftover
    from .._dir_swap import writer_alive

    removed = []
    for p in out.parent.glob(f".{_glob.escape(out.stem)}.*.partial{out.suffix}"):
        # writer_alive reads the pid from ``.<name>.<pid>-<random>.<kind>``: drop the .npy suffix
        if own_leftover(p) and p.is_file() and not writer_alive(p.with_name(p.name[: -len(out.suffix)])):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def _check_model_out(out, *, overwrite: bool = True) -> None:
    """A model may replace a model, never a store or any other file (checked before and after fitting).

    ``overwrite=False`` (the command line without ``--overwrite``): an existing
    model is refused too, before any work is done.  A URL (object storage) is
    checked for a published model (``sr.save`` at URLs never touches other objects).
    """
    from ..io._remote import is_url

    if is_url(out):
        from .._remote_models import published

        from ._stores import STORAGE_OPTIONS

        if not overwrite and published(str(out), STORAGE_OPTIONS):
            raise FileExistsError(f"a model already exists at {out}; pass --overwrite to replace it "
                                  "(or choose another --model)")
        return
    from ..io.schema import StoreFormatError

    out = Path(out)
    if not out.parent.is_dir():          # a typo in a directory name is an error, not a new directory tree
        raise FileNotFoundError(f"the directory {out.parent} of --model {out} does not exist; create it first "
                                "(or check the path)")
    if out.exists() and out.is_dir() and (out / "zarr.json").exists():
        try:
            kind = _kind_of(out)
        except StoreFormatError:
            kind = "other"
        if kind != "model":
            raise FileExistsError(f"{out} is a streamrank store or another zarr group; refusing to overwrite "
                                  "it with a model (choose another --model)")
        if not overwrite:
            raise FileExistsError(f"a model already exists at {out}; pass --overwrite to replace it "
                                  "(or choose another --model)")
    elif out.exists() and (out.is_file() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not a streamrank model; refusing to overwrite it")


def _save_model(model, out, cli_meta: dict) -> None:
    """``sr.save`` into a temporary directory with the command's record, rename into place (atomic).

    The record is the root's last attribute, as zarr wrote it when it was added after the save
    (:func:`streamrank.persistence.save_local`).
    """
    from .. import persistence
    from ..io._remote import is_url

    if is_url(out):   # object storage: a fresh version published by one PUT (--storage-options, else the env)
        from ..persistence import save_url
        from ._stores import STORAGE_OPTIONS

        save_url(model, str(out), STORAGE_OPTIONS, root_attrs={"cli": _jsonable(cli_meta)})
        return
    out = Path(out)
    _check_model_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _partial_sibling(out)
    try:
        persistence.save_local(model, tmp, {"cli": _jsonable(cli_meta)})
        _replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
