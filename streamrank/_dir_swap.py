"""Replace a directory by a complete new one with ``os`` renames alone, and sweep what killed writers left.

:func:`replace_dir` is how ``sr.save`` and the command line's model and score
writers put a finished directory in place; :func:`_replaced_copy` is where
``sr.load`` finds the previous model while ``path`` is absent (a save between
its two renames, or one killed there); :func:`writer_alive` tells a dead
writer's pid-tagged leftover from a running one's.
"""
from __future__ import annotations

import errno
import glob
import os
import shutil
import uuid
from pathlib import Path

__all__ = ["replace_dir", "writer_alive"]


def replace_dir(tmp: Path, path: Path) -> None:
    """Put the complete directory ``tmp`` at ``path``, replacing what is there only once ``tmp`` is whole.

    Two renames, with the ``os`` module alone: the model at ``path`` is moved
    aside to a pid-tagged ``.old`` sibling, then ``tmp`` is renamed to
    ``path``; the ``.old`` copy is removed only after that.  So at every
    moment ``path`` holds a complete model, or is absent while an ``.old``
    sibling holds the previous one: a kill -9 between the renames leaves it
    there, and :func:`streamrank.persistence.load` reads it (:func:`_replaced_copy`) until the next
    save.  A reader racing a save re-reads when what it read was replaced
    under it (``load`` again), so it gets the old or the new model, whole.  A
    concurrent save that put its model at ``path`` between our renames is
    moved aside too (the last save wins, as with one rename).  Then the
    leftovers of writers killed earlier (``.partial`` and ``.old`` siblings
    of dead pids) are swept.  Used by sr.save and by the command line's
    model and score writers.
    """
    tmp, path = Path(tmp), Path(path)
    aside = []
    try:
        while True:
            if os.path.lexists(path):
                old = _sibling(path, "old")
                try:
                    os.replace(path, old)
                except FileNotFoundError:   # another save moved it aside first
                    continue
                aside.append(old)
            try:
                os.replace(tmp, path)
                break
            except OSError as exc:          # another save put its model at ``path`` in between
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
    except BaseException:
        if aside and not os.path.lexists(path):
            try:
                os.replace(aside.pop(), path)   # put the old one back
            except OSError:
                pass
        raise
    for old in aside:
        shutil.rmtree(old, ignore_errors=True)
    _sweep_leftovers(path)


def _sibling(path: Path, kind: str) -> Path:
    """``.<name>.<pid>-<random>.<kind>``: the writer's pid tells a crashed save from a running one."""
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex}.{kind}")


def writer_alive(leftover: Path) -> bool:
    """True unless ``leftover`` is certainly a dead writer's own, to be swept (unknown names count as alive).

    ``leftover`` is named ``.<name>.<pid>-<random>.<kind>`` (an atomic write's temporary file).
    Package-public: the CLI's and the nightly's atomic writers sweep their leftovers with it too.
    A symbolic link planted under such a name, or an entry another user owns,
    counts as alive: a sweep never removes through a link or another user's files
    (:func:`streamrank._shared_paths.own_leftover`).
    """
    from ._shared_paths import own_leftover

    if os.path.lexists(leftover) and not own_leftover(leftover):
        return True
    tag = leftover.name.rsplit(".", 2)[-2]
    pid = tag.split("-", 1)[0]
    if "-" not in tag or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _sweep_leftovers(path: Path) -> None:
    """Remove what saves killed earlier left beside ``path``.

    Runs after a successful save, so ``path`` holds a complete model: a
    ``.partial`` directory or an ``.old`` copy whose writer process is dead
    can never be needed again.  Leftovers of live writers (a concurrent save)
    and of unknown naming are kept.
    """
    for kind in ("partial", "old"):
        for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.{kind}"):
            if not writer_alive(leftover):
                shutil.rmtree(leftover, ignore_errors=True)


def _replaced_copy(path: Path):
    """The previous model moved aside by a save between its two renames (:func:`replace_dir`), or None."""
    old = []
    for p in path.parent.glob(f".{glob.escape(path.name)}.*.old"):
        try:
            old.append((p.stat().st_mtime_ns, p))
        except OSError:                   # removed meanwhile: its save has put the new model in place
            pass
    return max(old)[1] if old else None
