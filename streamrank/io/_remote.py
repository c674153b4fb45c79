"""URLs of object storage through fsspec: plain object reads (the previous layouts) and the URL helpers.

A store location is either a local directory (a path, or a ``file://`` URL)
or a URL of an fsspec filesystem: ``s3://bucket/prefix/train.zarr`` (s3fs;
also MinIO, Ceph and other S3-compatible servers through
``storage_options={"endpoint_url": ...}`` or the ``AWS_ENDPOINT_URL``
environment variable), ``memory://`` (one process; tests), ``gs://``,
``az://`` ….

:func:`is_url` tells the two apart.  Stores, models and nightly models
directories at ``s3://``, ``gs://``, ``az://`` and ``memory://`` URLs are
Icechunk repositories (:mod:`streamrank.io._icechunk_repo`, transactions:
no lock).  :class:`Remote` is one prefix on an fsspec filesystem with plain
object reads and writes — what reading a store or model of the previous
layout needs (read-only), and what :class:`~streamrank.io._icechunk_repo.RepoLocation`
overrides to read and write through an Icechunk session instead:

* :meth:`Remote.read_many` keeps all the requests in flight together
  (streaming is not latency-bound);
* :meth:`Remote.zarr_store` is zarr's own :class:`zarr.storage.FsspecStore`
  on the prefix.

The clients are optional: a missing ``s3fs`` is an :class:`ImportError`
naming the extra (``pip install 'streamrank[s3]'``).
"""
from __future__ import annotations

__all__ = ["is_url", "local_path", "filesystem", "Remote"]

#: fsspec protocol -> (module to import, the extra that installs it)
_CLIENTS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
            "az": ("adlfs", "azure"), "abfs": ("adlfs", "azure"), "abfss": ("adlfs", "azure")}


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
        # an object must be read as it is now, never from a cached listing; and one GET per object
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
