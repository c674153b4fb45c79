"""Files and directories that another local user might have planted: what streamrank trusts and how it checks.

streamrank trusts its own install and the current user's files.  A directory
that another user can write (``/tmp``, a shared team directory, a store on a
group-writable volume) may hold anything that user put there: a directory
made in advance under the name streamrank will use, a file planted at a
path it will open, a symbolic link pointing at one of the victim's own files.
Three rules keep such a plant from running code or clobbering a file as the
user who runs streamrank:

* **compiled code is loaded only from a directory nobody else can write**
  (:func:`unsafe_dir_reason`): numba's cache index is a pickle, so a cache
  directory another user can write is code that user runs as you;
* **lock files are opened without following symbolic links**
  (:func:`open_lock_file`): a link planted at ``.streamrank.lock`` or
  ``.nightly.lock`` could otherwise make the lock holder truncate and
  overwrite a file the link points to;
* **a sweep removes only the current user's leftovers, never through a link**
  (:func:`own_leftover`): a dead writer's ``.partial`` or ``.old`` entry is
  removed only if it is not a symbolic link and belongs to the user sweeping.

Everything here is POSIX ``lstat``/``open`` flags; on a platform without
``os.getuid`` (Windows) the ownership checks are skipped.
"""
from __future__ import annotations

import os
import stat

__all__ = ["unsafe_dir_reason", "open_lock_file", "own_leftover", "UnsafeFileError"]


class UnsafeFileError(OSError):
    """A lock or state file at a path that is not a plain regular file (a planted link, a FIFO, a hard link)."""


def _uid():
    return os.getuid() if hasattr(os, "getuid") else None


def unsafe_dir_reason(path) -> str | None:
    """Why ``path`` is not a safe directory to load compiled code from, or ``None`` if it is.

    Safe means nobody but the current user (and root) can have put or
    changed anything in it:

    * ``path`` itself (looked at with ``lstat``: a symbolic link is not
      followed) is a directory owned by the current user or root, with no
      group or other write bit;
    * every directory above it is owned by the current user or root, and is
      either not writable by group/other or has the sticky bit (``/tmp``:
      others may add entries there but cannot rename or replace ours);
    * a symbolic link on the way is owned by the current user or root (one
      planted in ``/tmp`` by another user is refused), and the directory it
      points to passes the same checks.

    A missing ``path`` is reported as such (the caller creates it, then
    asks again).  The rule is that of OpenSSH's ``StrictModes``.
    """
    uid = _uid()
    if uid is None:
        return None
    trusted = (0, uid)
    path = os.path.abspath(os.fspath(path))
    # 1. links on the way as written: each must be the user's or root's own
    parts = path.split(os.sep)
    for i in range(2, len(parts) + 1):
        p = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return f"{p} does not exist"
        except OSError as exc:
            return f"{p} cannot be examined ({exc.strerror})"
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in trusted:
            return f"{p} is a symbolic link owned by uid {st.st_uid}, not by you (uid {uid}) or root"
    # 2. the directories themselves, links resolved
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    for i in range(1, len(parts) + 1):
        p = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.lstat(p)
        except OSError as exc:
            return f"{p} cannot be examined ({exc.strerror})"
        if not stat.S_ISDIR(st.st_mode):
            return f"{p} is not a directory"
        if st.st_uid not in trusted:
            return f"{p} is owned by uid {st.st_uid}, not by you (uid {uid}) or root"
        writable_by_others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        last = i == len(parts)
        if writable_by_others and (last or not st.st_mode & stat.S_ISVTX):
            return f"{p} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def open_lock_file(path) -> int:
    """Open (creating it, mode 0644 less the umask) the lock file ``path`` for reading and writing; a descriptor.

    The open does not follow a symbolic link (``O_NOFOLLOW``), and the file
    opened must be a regular file with one link: a link or hard link planted
    at the lock's name, or a FIFO that would block, is
    :class:`UnsafeFileError` naming the path.  The lock holder writes into
    the file (its pid), so following a plant would overwrite the file it
    points to with the holder's rights.
    """
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NONBLOCK", 0)      # a planted FIFO must not hang the open
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeFileError(f"{path}: the lock file is a symbolic link (refused: a lock file is never "
                                  f"followed through a link; remove it if it is yours)") from None
        raise exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(f"{path}: the lock file is not a regular file (refused)")
        if st.st_nlink != 1:
            raise UnsafeFileError(f"{path}: the lock file has {st.st_nlink} hard links (refused: it may be "
                                  "another file's name)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def own_leftover(path) -> bool:
    """True if ``path`` may be swept by the current user: not a symbolic link, and owned by the current user.

    Sweeps (a dead writer's ``.partial`` / ``.old`` leftovers) call this
    before removing anything: a link planted under a leftover's name, or
    another user's entry, is left where it is.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode):
        return False
    uid = _uid()
    return uid is None or st.st_uid == uid
