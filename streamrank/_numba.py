"""The one compile policy for every numba kernel in streamrank.

Kernel modules (``_*_kernels.py``) import :func:`jit` from here and hold only
jitted functions of arrays and scalars: no classes, no zarr, no dask.  CSR
matrices enter as ``(indptr, indices, data)``.

Policy
------
* ``cache=True`` so a second process does not pay the compile again;
* ``nogil=True`` so the prefetching reader thread and dask's threaded
  scheduler run alongside the kernels;
* no ``fastmath``: NaN checks, signs and L1 thresholds must be exact;
* ``parallel=True`` only through :func:`jit_parallel`, for embarrassingly
  parallel loops, and always with a serial twin (``jit``) tested against it.

Made on first use
-----------------
:func:`jit` returns a :class:`LazyKernel`: importing a kernel module imports
no numba, and the dispatcher is made (numba imported, the module's names
bound for numba's typing) on the kernel's first call, so a command that runs
no kernel (``--help``, an argument error) never imports numba.  Every call
runs the kernel: one source per algorithm, no second implementation for
small inputs.  The first run's compile is paid once, by ``streamrank
warmup`` or the first use, and numba's cache serves every later process.

Where the cache lives
---------------------
``NUMBA_CACHE_DIR`` if set; else ``__pycache__`` beside the installed
sources if that is writable; else numba's per-user directory
(``~/.cache/numba``).  When none of these is writable (a read-only
site-packages *and* a read-only or missing home, e.g. a locked-down
container or service account) numba itself would refuse to import the
kernels; streamrank then caches in ``$TMPDIR/streamrank-numba-<uid>`` and
says so once (set ``NUMBA_CACHE_DIR`` to choose the place).

Whichever of these numba uses, streamrank loads compiled code from it only
if no other user can write it (``SECURITY.md``): numba reads its cache
with ``pickle``, so a cache directory another user can write is code that
user runs as you.  When a kernel's dispatcher is made -- numba has chosen
(and made) the directory, and has read nothing from it yet -- the directory
and each one above it must be owned by the current user or root and
writable by no one else (a sticky ``/tmp`` above it is fine; a group-write
bit only for the owner's own user-private group, the ``umask 002`` of
Debian, Ubuntu and Fedora), and no symbolic link on the way may belong to
another user (:func:`streamrank._shared_paths.unsafe_dir_reason`).  Then
each index and data file is checked with ``lstat`` before numba unpickles it
(a regular file of the user's or root's that no one else can write): a file
planted while the directory was open to others is taken as missing,
compiled again and replaced.  An unsafe directory is not used (the kernels
compile in memory); one warning per process says what was refused and why.
The fallback ``$TMPDIR/streamrank-numba-<uid>`` is made with ``mkdir``
(mode 0700) and then checked the same way; one made by someone else (a
directory, or a symbolic link to one) is replaced by a fresh
``tempfile.mkdtemp`` directory for the process, removed when it exits.

Kernels that call kernels
-------------------------
numba keys a cached kernel on its own source file: edit a kernel another
one calls, and the caller's cached machine code still holds the callee's
old code.  Every streamrank kernel's cache entry is also keyed on a hash of
all of the package's kernel modules (:func:`_kernel_sources_stamp`), so an
edit to any of them compiles the kernels again; an installed package never
changes, so users never pay it.

Several processes, one cache
----------------------------
Processes that share a cache directory (test workers, dask workers, two
cron jobs) may compile different signatures of one kernel at the same time.
numba's own save reads the index, picks the first free data-file number and
writes both without a lock, so two such saves can give two signatures the
same data file, and a later process then loads the machine code of one
signature for the arguments of the other.  streamrank's kernels save under
an exclusive ``flock`` on ``<index>.lock`` (POSIX; elsewhere numba's save is
left as it is): saves of one kernel take turns, each sees the other's entry.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import os
import tempfile
import threading
import types
import warnings

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

__all__ = ["jit", "jit_parallel", "prange", "numba_ready"]

_POLICY = dict(cache=True, nogil=True, fastmath=False)

#: guards the making of dispatchers (re-entrant: making one kernel makes its callees)
_LOCK = threading.RLock()
_READY = False            # True once this process has made a numba dispatcher of a streamrank kernel


def prange(*args):
    """``numba.prange`` in a kernel (its module is bound at first call); ``range`` in the kernel's plain Python."""
    return range(*args)


def numba_ready() -> bool:
    """True once this process has set numba up for a streamrank kernel (imported it and made a dispatcher)."""
    return _READY


def _fallback_cache_dir() -> str:
    """A writable cache directory for when numba finds none (see the module doc); warns once.

    ``$TMPDIR/streamrank-numba-<uid>`` when this process made it or it
    passes :func:`~streamrank._shared_paths.unsafe_dir_reason` (owned by this
    user, not a symbolic link, no group/other write bit); otherwise a fresh
    directory with an unpredictable name (``tempfile.mkdtemp``, mode 0700) for
    this process alone, since another user may have made the predictable one
    first to plant compiled code in it.
    """
    from ._shared_paths import unsafe_dir_reason

    uid = os.getuid() if hasattr(os, "getuid") else "user"
    path = os.path.join(tempfile.gettempdir(), f"streamrank-numba-{uid}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        pass                              # unwritable temp dir: the check below says so
    reason = unsafe_dir_reason(path)
    import numba

    if reason is None:
        numba.config.CACHE_DIR = path
        note = ""
    else:
        path = numba.config.CACHE_DIR = tempfile.mkdtemp(prefix="streamrank-numba-")
        _remove_at_exit(path)
        note = f" ({reason}: not used; this process's cache is not kept for the next one)"
    warnings.warn(f"no writable numba cache beside the package or in the home directory: compiled kernels are "
                  f"cached in {path}{note} (set NUMBA_CACHE_DIR to choose)", RuntimeWarning, stacklevel=4)
    return path


def _remove_at_exit(path) -> None:
    """Remove the process's own ``mkdtemp`` cache when it exits (not when a forked child does: it is the parent's)."""
    import atexit
    import shutil

    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(path, ignore_errors=True))


#: cache directory -> why it is unsafe (None: safe); each directory is examined once per process
_CACHE_DIR_VERDICTS: dict = {}
_UNSAFE_WARNED = [False]


def _refuse_unsafe_cache(dispatcher):
    """Turn the on-disk cache of ``dispatcher`` off if its directory is one another user can write.

    numba reads its cache index and data files with ``pickle``: whoever can
    write the cache directory runs code as the process that loads it.  The
    directory numba chose (``NUMBA_CACHE_DIR``, ``__pycache__`` beside the
    sources, ``~/.cache/numba`` or the fallback above) is checked before the
    kernel's first call, which is when numba first reads it; if it fails
    :func:`~streamrank._shared_paths.unsafe_dir_reason` the kernel compiles
    in memory instead, and one warning per process says why.
    """
    cache = getattr(dispatcher, "_cache", None)
    path = getattr(cache, "_cache_path", None)
    if path is None:
        return
    if path not in _CACHE_DIR_VERDICTS:
        from ._shared_paths import unsafe_dir_reason

        _CACHE_DIR_VERDICTS[path] = unsafe_dir_reason(path)
    reason = _CACHE_DIR_VERDICTS[path]
    if reason is None:
        return
    from numba.core.caching import NullCache

    dispatcher._cache = NullCache()
    _warn_unsafe(f"numba cache {path} is not used: {reason}; another user could plant code there. "
                 f"streamrank's kernels compile in memory in this process (set NUMBA_CACHE_DIR to a "
                 f"directory only you can write)")


def _warn_unsafe(message: str) -> None:
    """The one warning per process about a cache directory or file that was not used."""
    if not _UNSAFE_WARNED[0]:
        _UNSAFE_WARNED[0] = True
        warnings.warn(message, RuntimeWarning, stacklevel=6)


def _refused_file(path) -> bool:
    """True (and the one warning) if the cache file ``path`` is not one to unpickle (another user could write it).

    numba's index and data files are checked with
    :func:`~streamrank._shared_paths.unsafe_file_reason` before numba reads
    them: a file another user planted while the directory was open to them,
    or one made writable since, is taken as missing -- the kernel compiles
    again and its save replaces the file (a rename inside the user's own
    directory).  The directory itself passed :func:`_refuse_unsafe_cache`, so
    nobody else can swap the file between this check and numba's ``open``.
    """
    from ._shared_paths import unsafe_file_reason

    reason = unsafe_file_reason(path)
    if reason is None:
        return False
    _warn_unsafe(f"numba cache file not loaded: {reason}; another user could have planted it. The kernel is "
                 f"compiled again and the file replaced")
    return True


@contextlib.contextmanager
def _exclusive(path):
    from ._shared_paths import open_lock_file

    fd = open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@functools.cache
def _locked_cache_file_class():
    """numba's index + data files, saved under an exclusive lock (see "Several processes, one cache") and loaded
    only from files no other user can write (:func:`_refused_file`)."""
    from numba.core.caching import IndexDataCacheFile

    class _LockedCacheFile(IndexDataCacheFile):
        def save(self, key, data):
            if fcntl is None:             # pragma: no cover - not POSIX: numba's own save
                return super().save(key, data)
            with _exclusive(self._index_path + ".lock"):
                super().save(key, data)

        def _load_index(self):
            if _refused_file(self._index_path):
                return {}                 # as numba takes a missing index: compile, and save a new one
            return super()._load_index()

        def _load_data(self, name):
            path = self._data_path(name)
            if _refused_file(path):
                raise FileNotFoundError(path)   # numba's load() takes it as a removed data file: compile again
            return super()._load_data(name)

    return IndexDataCacheFile, _LockedCacheFile


def __getattr__(name):       # the locked cache file class is made with numba's import, not with this module's
    if name == "_LockedCacheFile":
        return _locked_cache_file_class()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _package_root(py_file: str) -> str:
    """The directory of the top-level package holding ``py_file`` (its own directory outside a package)."""
    d = os.path.dirname(os.path.abspath(py_file))
    while os.path.exists(os.path.join(os.path.dirname(d), "__init__.py")):
        d = os.path.dirname(d)
    return d


@functools.cache
def _kernel_sources_stamp(root: str) -> str:
    """A hash of every kernel module (``*kernels.py``) under the package directory ``root``: names and contents.

    numba keys a cached kernel on its own source file only: a kernel cached
    before a kernel it calls was edited keeps running the callee's old
    machine code (the caller's file did not change; numba issue #6845).  Each
    streamrank kernel's cache index also carries this stamp
    (:func:`_stamp_sources`), so editing any kernel module sends every kernel
    of the package to be compiled again; installed files do not change, so
    users never pay it.  Computed once per process (~100 KB read).
    """
    import hashlib

    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith("kernels.py"):
                path = os.path.join(d, name)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


def _stamp_sources(cache_file, py_file):
    """Make ``cache_file`` (numba's index of one kernel) valid only with today's kernel modules (see above)."""
    stamp = getattr(cache_file, "_source_stamp", None)
    if stamp is not None and py_file:
        cache_file._source_stamp = (stamp, _kernel_sources_stamp(_package_root(py_file)))


def _lock_saves(dispatcher):
    _refuse_unsafe_cache(dispatcher)
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    plain, locked = _locked_cache_file_class()
    if type(cache_file) is plain:
        cache_file.__class__ = locked
    py_func = getattr(dispatcher, "py_func", None)
    if cache_file is not None and py_func is not None:
        _stamp_sources(cache_file, py_func.__code__.co_filename)
    return dispatcher


def _njit(fn, options):
    import numba

    try:
        return _lock_saves(numba.njit(**options)(fn))
    except RuntimeError as exc:  # numba: "cannot cache function ...: no locator available"
        if not options.get("cache") or "no locator available" not in str(exc) or numba.config.CACHE_DIR:
            raise
        _fallback_cache_dir()
        return _lock_saves(numba.njit(**options)(fn))


class LazyKernel:
    """A kernel whose numba dispatcher is made on its first call (or first use of a dispatcher attribute).

    Importing a kernel module costs no numba import: a command that runs no
    kernel (``--help``, ``info``, an argument error) never imports numba.  On first use the
    dispatcher is made with the compile policy, and the names the kernel's
    module refers to are bound for numba (:func:`_bind_globals`): other
    kernels to their dispatchers, :func:`prange` to ``numba.prange``.
    ``py_func`` is the plain Python function.  Calls and attributes (``signatures``, ``stats``, ``py_func``...)
    behave as the dispatcher's.
    """

    def __init__(self, fn, options):
        self.py_func = fn
        self._options = options
        self._dispatcher = None
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__module__ = fn.__module__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def dispatcher(self):
        """The numba dispatcher, made (and numba imported and its module bound) on the first call."""
        d = self._dispatcher
        if d is None:
            global _READY
            with _LOCK:
                d = self._dispatcher
                if d is None:
                    d = self._dispatcher = _njit(self.py_func, self._options)   # before binding: cycles end
                    _bind_globals(self.py_func.__globals__)
                    _READY = True
        return d

    def __call__(self, *args, **kwargs):
        d = self._dispatcher
        return (d if d is not None else self.dispatcher())(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dispatcher(), name)

    def __get__(self, obj, objtype=None):       # a kernel stored on a class binds like a function
        return self if obj is None else types.MethodType(self, obj)

    def __reduce__(self):                       # pickled by reference, as numba pickles its dispatchers
        return _kernel_by_name, (self.__module__, self.__qualname__)

    def __repr__(self):
        state = "made" if self._dispatcher is not None else "not made yet"
        return f"<streamrank kernel {self.__module__}.{self.__qualname__} ({state})>"


def _kernel_by_name(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _bind_globals(g: dict) -> None:
    """Make ``g`` (a kernel module's globals) what numba's compiler expects when it types a kernel there.

    Every :class:`LazyKernel` becomes its dispatcher, :func:`prange` becomes
    ``numba.prange``, and a module may add numba objects it cannot make
    without importing numba (``_numba_globals()``, e.g. an external C function's
    type).  Python callers that imported a kernel by name keep the
    :class:`LazyKernel`, which calls the same dispatcher.
    """
    import numba

    for name, value in list(g.items()):
        if isinstance(value, LazyKernel):
            g[name] = value.dispatcher()
        elif value is prange:
            g[name] = numba.prange
    extra = g.get("_numba_globals")
    if callable(extra):
        g.update(extra())


def jit(*args, **kwargs):
    """``numba.njit`` with the streamrank compile policy (usable bare or called)."""
    options = {**_POLICY, **kwargs}
    if args and callable(args[0]) and len(args) == 1:  # @jit, or @jit_parallel (which passes parallel=True)
        return LazyKernel(args[0], options)
    if args:  # explicit signatures, compiled now (unused in streamrank): the cache checked and locked all the same
        sigs = args[0] if isinstance(args[0], list) else [args[0]]

        def eager(fn):
            d = _njit(fn, options)
            for sig in sigs:
                d.compile(sig)
            d.disable_compile()                 # as numba.njit(sigs) does: no other signature
            return d

        return eager
    return lambda fn: LazyKernel(fn, options)


def jit_parallel(*args, **kwargs):
    """Like :func:`jit` with ``parallel=True``; keep a serial twin beside it."""
    kwargs.setdefault("parallel", True)
    return jit(*args, **kwargs)
