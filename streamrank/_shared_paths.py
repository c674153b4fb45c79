"""Files and directories that another local user might have planted: what streamrank trusts and how it checks.

streamrank trusts its own install and the current user's files.  A directory
that another user can write (``/tmp``, a shared team directory, a store on a
group-writable volume) may hold anything that user put there: a directory
made in advance under the name streamrank will use, a file planted at a
path it will open, a symbolic link pointing at one of the victim's own files.
These rules keep such a plant from running code or clobbering a file as the
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
  removed only if it is not a symbolic link and belongs to the user sweeping;
* **a store or models directory is not written through another user's
  link** (:func:`refuse_foreign_link`): a link in ``/tmp`` at the path the
  user gave could point at a store or models of the user's own.

Temporary files are new files of random names, created exclusively
(``O_EXCL``: :func:`streamrank._tempfiles.temp_sibling`, ``open(..., "x")``),
so no link planted at a name streamrank will write is ever written through.

"Another user can write" means the other-write bit, or the group-write bit
of a group that holds anyone but the owner.  A *user-private group* -- the
owner's own group, with the owner as its only member, which Debian, Ubuntu
and Fedora give every user and pair with ``umask 002`` -- counts as nobody
else (:func:`group_of_one`, the rule Debian's OpenSSH applies to
``StrictModes``): under that umask every directory numba or Python makes is
group-writable, and refusing them would turn the cache off for most users of
those systems.

Everything here is POSIX ``lstat``/``open`` flags; on a platform without
``os.getuid`` (Windows) the ownership checks are skipped.
"""
from __future__ import annotations

import functools
import os
import stat

__all__ = ["unsafe_dir_reason", "unsafe_file_reason", "others_can_write", "group_of_one", "open_lock_file",
           "own_leftover", "refuse_foreign_link", "UnsafeFileError"]


class UnsafeFileError(PermissionError):
    """A lock or state file at a path that is not a plain regular file (a planted link, a FIFO, a hard link), or
    a place to write reached through another user's symbolic link: refused (the command line's exit 5)."""


def _uid():
    return os.getuid() if hasattr(os, "getuid") else None


@functools.cache
def group_of_one(gid: int, uid: int) -> bool:
    """True if group ``gid`` has exactly one member, the user ``uid`` (a user-private group).

    Members are the users whose primary group it is (the password database)
    and those the group database lists; the group must be known, and one of
    them must be ``uid``.  Asked only of group-writable entries, once per
    process for each ``(gid, uid)``.
    """
    try:
        import grp
        import pwd

        group = grp.getgrgid(gid)
        owner = pwd.getpwuid(uid)
        primary = {p.pw_uid for p in pwd.getpwall() if p.pw_gid == gid}
    except (ImportError, KeyError, OSError):
        return False
    listed = set(group.gr_mem)
    return primary <= {uid} and listed <= {owner.pw_name} and bool(primary or listed)


def others_can_write(st) -> bool:
    """Whether the entry of ``os.lstat`` result ``st`` may be written by a user other than its owner (and root).

    The other-write bit, or the group-write bit of a group that is not the
    owner's alone (:func:`group_of_one`).
    """
    if st.st_mode & stat.S_IWOTH:
        return True
    return bool(st.st_mode & stat.S_IWGRP) and not group_of_one(st.st_gid, st.st_uid)


def unsafe_file_reason(path) -> str | None:
    """Why the file ``path`` is not one to load compiled code from, or ``None`` if it is (or does not exist).

    With ``lstat``: a regular file (not a symbolic link), owned by the current
    user or root, that no other user can write (:func:`others_can_write`).
    numba's cache index and data files are checked with it before they are
    unpickled, so a file another user planted while the directory was open to
    them (or made writable since) is never loaded, even from a directory that
    passes :func:`unsafe_dir_reason` now.
    """
    uid = _uid()
    if uid is None:
        return None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be examined ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_uid not in (0, uid):
        return f"{path} is owned by uid {st.st_uid}, not by you (uid {uid}) or root"
    if others_can_write(st):
        return f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _foreign_link_reason(path, st, uid) -> str | None:
    """Why the ``lstat`` result ``st`` of ``path`` is a symbolic link not to follow: one another user owns."""
    if stat.S_ISLNK(st.st_mode) and st.st_uid not in (0, uid):
        return f"{path} is a symbolic link owned by uid {st.st_uid}, not by you (uid {uid}) or root"
    return None


def unsafe_dir_reason(path) -> str | None:
    """Why ``path`` is not a safe directory to load compiled code from, or ``None`` if it is.

    Safe means nobody but the current user (and root) can have put or
    changed anything in it:

    * ``path`` itself (looked at with ``lstat``: a symbolic link is not
      followed) is a directory owned by the current user or root that no
      other user can write (:func:`others_can_write`: no other-write bit, and
      a group-write bit only for a group that is the owner's alone);
    * every directory above it is owned by the current user or root, and is
      either not writable by other users or has the sticky bit (``/tmp``:
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
        reason = _foreign_link_reason(p, st, uid)
        if reason:
            return reason
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
        last = i == len(parts)
        if others_can_write(st) and (last or not st.st_mode & stat.S_ISVTX):
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


def refuse_foreign_link(path, what: str) -> None:
    """:class:`UnsafeFileError` if ``path`` is a symbolic link that another user owns.

    A store or models directory streamrank writes (appends, re-creation that
    empties it, pruning old versions) is never reached through a link another
    user planted at the path it was given: in a shared ``/tmp`` that link
    could point at a directory of the victim's own.  The user's and root's
    own links are followed as before.
    """
    uid = _uid()
    try:
        st = os.lstat(path)
    except OSError:
        return
    reason = None if uid is None else _foreign_link_reason(path, st, uid)
    if reason:
        raise UnsafeFileError(f"{reason}; refusing to {what} through it (it may point at a directory of yours)")
