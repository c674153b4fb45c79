"""Stores at URLs: object storage through fsspec, with the conditional writes a commit protocol needs.

A store location is either a local directory (a path, or a ``file://`` URL)
or a URL of an fsspec filesystem: ``s3://bucket/prefix/train.zarr`` (s3fs;
also MinIO, Ceph and other S3-compatible servers through
``storage_options={"endpoint_url": ...}`` or the ``AWS_ENDPOINT_URL``
environment variable), ``memory://`` (one process; tests), ``gs://``,
``az://`` … (read only, see below).

:func:`is_url` tells the two apart; :class:`Remote` is one store's prefix on
a filesystem, with the few operations the stores need beyond zarr's own
:class:`zarr.storage.FsspecStore` (:meth:`Remote.zarr_store`):

* plain object reads, many at once (:meth:`Remote.read_many` keeps all the
  requests in flight together: streaming is not latency-bound), and writes;
* **conditional writes**: :meth:`Remote.put_if_absent` (``If-None-Match: *``)
  and :meth:`Remote.put_if_match` / :meth:`Remote.delete_if_match`
  (``If-Match: <etag>``), with :meth:`Remote.read_with_etag` reading an
  object and its ETag in one request.  A failed condition raises
  :class:`PreconditionFailed`.  These are what S3 offers for mutual
  exclusion (there is no rename and no ``flock``); AWS S3 supports both
  headers on PUT since 2024 (``If-Match`` on PUT since November 2024),
  MinIO and moto do too.

Conditional writes are implemented for ``s3://`` (botocore's ``IfNoneMatch``
/ ``IfMatch`` parameters of ``PutObject`` / ``DeleteObject``) and for
``memory://`` (one process: a lock makes each operation atomic).  On any other
filesystem :meth:`Remote.put_if_absent` and friends raise
:class:`ConditionalWritesUnsupported`: a store there can be read, but not
appended to, because one writer at a time could not be guaranteed.

The clients are optional: a missing ``s3fs`` is an :class:`ImportError`
naming the extra (``pip install 'streamrank[s3]'``).
"""
from __future__ import annotations

import hashlib
import threading

__all__ = [
    "is_url",
    "local_path",
    "filesystem",
    "Remote",
    "PreconditionFailed",
    "ConditionalWritesUnsupported",
]

#: fsspec protocol -> (module to import, the extra that installs it)
_CLIENTS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
            "az": ("adlfs", "azure"), "abfs": ("adlfs", "azure"), "abfss": ("adlfs", "azure")}
#: protocols with conditional writes (put-if-absent, put-if-match): appends and locks work there
CONDITIONAL = ("s3", "s3a", "memory")


class PreconditionFailed(RuntimeError):
    """A conditional write's condition did not hold (the object exists / changed since it was read)."""


class ConditionalWritesUnsupported(RuntimeError):
    """The filesystem offers no conditional writes, so one writer at a time cannot be guaranteed there."""


def is_url(path) -> bool:
    """True for ``scheme://...`` other than ``file://`` (a local path, also as a ``file://`` URL, is not)."""
    s = str(path) if not isinstance(path, (bytes, bytearray)) else path.decode()
    if "://" not in s:
        return False
    return s.split("://", 1)[0].lower() not in ("file", "local")


def local_path(path) -> str:
    """A local path as a plain path (``file:///a/b`` -> ``/a/b``)."""
    s = str(path)
    if s.lower().startswith("file://"):
        return s[len("file://"):]
    return s


def protocol_of(url: str) -> str:
    return str(url).split("://", 1)[0].lower()


def _import_client(protocol: str) -> None:
    mod, extra = _CLIENTS.get(protocol, (None, None))
    if mod is None:
        return
    try:
        __import__(mod)
    except ImportError:
        raise ImportError(f"{protocol}:// stores need the {mod} package: pip install 'streamrank[{extra}]'") from None


def filesystem(url: str, storage_options: dict | None = None, *, asynchronous: bool = False):
    """The fsspec filesystem of ``url`` built from ``storage_options`` (plus the client's environment variables)."""
    import fsspec

    protocol = protocol_of(url)
    _import_client(protocol)
    opts = dict(storage_options or {})
    if asynchronous and protocol in ("memory", "file", "local"):
        asynchronous = False                  # no async implementation: the caller wraps it
    if protocol in ("s3", "s3a"):
        # a commit record must be read as it is now, never from a cached listing; and one GET per object
        # (s3fs's concurrent whole-object reads first send a HEAD for the size: twice the requests per chunk)
        opts["use_listings_cache"] = False
        opts.setdefault("max_concurrency", 1)
    if asynchronous:
        opts["asynchronous"] = True
    return fsspec.filesystem(protocol, **opts)


def _check_options(storage_options) -> dict:
    if storage_options is None:
        return {}
    if not isinstance(storage_options, dict):
        raise TypeError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    return dict(storage_options)


_memory_lock = threading.Lock()


class Remote:
    """One store's prefix on an fsspec filesystem: keys are relative to it (``"zarr.json"``, ``"X/c/0/0"``).

    Parameters
    ----------
    url : str
        ``protocol://bucket/prefix`` of the store.
    storage_options : dict, optional
        Passed to the filesystem (s3fs: ``endpoint_url``, ``key``, ``secret``,
        ``anon``, ``client_kwargs`` …).  Without them the client reads its
        usual environment variables (``AWS_ACCESS_KEY_ID``,
        ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_PROFILE`` …).
    """

    def __init__(self, url: str, storage_options: dict | None = None):
        self.url = str(url).rstrip("/")
        self.protocol = protocol_of(self.url)
        self.storage_options = _check_options(storage_options)
        self.fs = filesystem(self.url, self.storage_options)
        self.root = self.fs._strip_protocol(self.url).rstrip("/")
        if not self.root:
            raise ValueError(f"{url}: a store needs a bucket (and a prefix), e.g. s3://bucket/train.zarr")

    def __repr__(self):
        return f"Remote({self.url!r})"

    def __reduce__(self):       # shipped to workers as (url, options): each process builds its own client
        return (Remote, (self.url, self.storage_options))

    # ------------------------------------------------------------------ paths
    def key(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def display(self, rel: str = "") -> str:
        """``protocol://bucket/prefix/rel`` (for messages)."""
        return f"{self.url}/{rel}" if rel else self.url

    def zarr_store(self, read_only: bool = False):
        """zarr's own :class:`zarr.storage.FsspecStore` on this prefix (async filesystem, same options)."""
        import zarr

        fs = filesystem(self.url, self.storage_options, asynchronous=True)
        if not fs.async_impl:                 # memory://, … : zarr needs an async filesystem
            from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

            fs = AsyncFileSystemWrapper(filesystem(self.url, self.storage_options), asynchronous=True)
        return zarr.storage.FsspecStore(fs, read_only=read_only, path=self.root)

    # ------------------------------------------------------------ plain I/O
    def read(self, rel: str) -> bytes:
        """The object's bytes; FileNotFoundError if absent."""
        return self.fs.cat_file(self.key(rel))

    def read_tail(self, rel: str, n: int) -> bytes:
        """The object's last ``n`` bytes (one ranged request)."""
        return self.fs.cat_file(self.key(rel), start=-int(n))

    def read_many(self, rels) -> list:
        """Several objects at once, all requests in flight together; None for an absent object."""
        rels = list(rels)
        if not rels:
            return []
        keys = [self.key(r) for r in rels]
        got = self.fs.cat(keys, on_error="return")
        out = []
        for k in keys:
            v = got.get(k) if isinstance(got, dict) else None
            if isinstance(v, FileNotFoundError) or v is None:
                out.append(None)
            elif isinstance(v, BaseException):
                raise v
            else:
                out.append(v)
        return out

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self.key(rel))

    def write(self, rel: str, data: bytes) -> None:
        self.fs.pipe_file(self.key(rel), bytes(data))

    def delete(self, rel: str) -> None:
        try:
            self.fs.rm_file(self.key(rel))
        except FileNotFoundError:
            pass

    def list(self, rel: str = "") -> list[str]:
        """Every object key under ``rel`` (relative to the store), recursively."""
        base = self.key(rel)
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return []
        n = len(self.root) + 1
        return sorted(k[n:] for k in found if k.startswith(self.root + "/"))

    def any_object(self) -> bool:
        """Whether anything exists under the store's prefix."""
        try:
            return bool(self.fs.find(self.root, maxdepth=None, withdirs=False)[:1])
        except FileNotFoundError:
            return False

    # ----------------------------------------------------- conditional writes
    def _refuse(self, what: str):
        raise ConditionalWritesUnsupported(
            f"{self.url}: {self.protocol}:// offers no conditional writes here ({what}), so streamrank cannot "
            f"guarantee one writer at a time; stores there are read-only (appends and re-creation are "
            f"implemented for {', '.join(p + '://' for p in CONDITIONAL)} and local directories)")

    def read_with_etag(self, rel: str) -> tuple[bytes, str]:
        """``(bytes, etag)`` of one object read in one request; FileNotFoundError if absent."""
        if self.protocol == "memory":
            with _memory_lock:
                data = self.fs.cat_file(self.key(rel))
            return data, _md5(data)
        if self.protocol not in ("s3", "s3a"):
            data = self.read(rel)
            return data, _md5(data)
        bucket, key, _ = self.fs.split_path(self.key(rel))

        async def get():
            resp = await self.fs._call_s3("get_object", Bucket=bucket, Key=key)
            body = resp["Body"]
            try:
                data = await body.read()
            finally:
                body.close()
            return data, resp["ETag"]

        from fsspec.asyn import sync

        return sync(self.fs.loop, get)

    def etag(self, rel: str) -> str | None:
        """The object's current ETag, None if absent."""
        if self.protocol == "memory":
            try:
                return self.read_with_etag(rel)[1]
            except FileNotFoundError:
                return None
        try:
            info = self.fs.info(self.key(rel), refresh=True) if self.protocol in ("s3", "s3a") else \
                self.fs.info(self.key(rel))
        except FileNotFoundError:
            return None
        return info.get("ETag")

    def put_if_absent(self, rel: str, data: bytes) -> str:
        """Create the object only if it does not exist (``If-None-Match: *``); return its ETag."""
        return self._put(rel, bytes(data), {"IfNoneMatch": "*"})

    def put_if_match(self, rel: str, data: bytes, etag: str) -> str:
        """Replace the object only if its ETag is still ``etag`` (``If-Match``); return the new ETag."""
        return self._put(rel, bytes(data), {"IfMatch": etag})

    def delete_if_match(self, rel: str, etag: str) -> None:
        """Delete the object only if its ETag is still ``etag``; PreconditionFailed otherwise."""
        if self.protocol == "memory":
            with _memory_lock:
                try:
                    now = _md5(self.fs.cat_file(self.key(rel)))
                except FileNotFoundError:
                    raise PreconditionFailed(f"{self.display(rel)}: does not exist") from None
                if now != etag:
                    raise PreconditionFailed(f"{self.display(rel)}: changed since it was read")
                self.fs.rm_file(self.key(rel))
            return
        if self.protocol not in ("s3", "s3a"):
            self._refuse("conditional delete")
        bucket, key, _ = self.fs.split_path(self.key(rel))
        try:
            self.fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=etag)
        except OSError as exc:
            _raise_precondition(exc, self.display(rel))
            raise
        finally:
            self.fs.invalidate_cache(self.key(rel))

    def _put(self, rel: str, data: bytes, cond: dict) -> str:
        if self.protocol == "memory":
            with _memory_lock:
                try:
                    now = _md5(self.fs.cat_file(self.key(rel)))
                except FileNotFoundError:
                    now = None
                if "IfNoneMatch" in cond and now is not None:
                    raise PreconditionFailed(f"{self.display(rel)}: already exists")
                if "IfMatch" in cond and now != cond["IfMatch"]:
                    raise PreconditionFailed(f"{self.display(rel)}: changed since it was read")
                self.fs.pipe_file(self.key(rel), data)
            return _md5(data)
        if self.protocol not in ("s3", "s3a"):
            self._refuse("put " + ", ".join(cond))
        bucket, key, _ = self.fs.split_path(self.key(rel))
        try:
            resp = self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **cond)
        except OSError as exc:
            _raise_precondition(exc, self.display(rel))
            raise
        finally:
            self.fs.invalidate_cache(self.key(rel))
        return resp["ETag"]


def _md5(data: bytes) -> str:
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


def _raise_precondition(exc: BaseException, where: str) -> None:
    """A botocore 412 PreconditionFailed (or 409 ConditionalRequestConflict) -> PreconditionFailed."""
    for e in (exc, exc.__cause__, exc.__context__):
        resp = getattr(e, "response", None)
        if isinstance(resp, dict):
            err = resp.get("Error") or {}
            status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if err.get("Code") in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409") \
                    or status in (409, 412):
                raise PreconditionFailed(f"{where}: {err.get('Message') or err.get('Code')}") from exc
    if isinstance(exc, FileExistsError):            # s3fs's translation of If-None-Match failures
        raise PreconditionFailed(f"{where}: already exists") from exc
