"""Stores at URLs kept in an Icechunk repository: one append is one transaction, no lease, no clocks, no PIDs.

A store at ``s3://bucket/prefix/train.zarr`` (also ``gs://``, ``az://`` and,
within one process, ``memory://``) is an `Icechunk <https://icechunk.io>`_
repository at that prefix, holding the store's zarr group on its branch
``main``.  Icechunk is a transactional storage engine for zarr 3:

* a **writable session** starts from the branch tip; everything an append
  writes (the new chunks of every array, the arrays' new shapes, the group's
  commit record ``zarr.json``) goes to *new* objects that nothing refers to
  yet — a writer never overwrites a chunk that a commit refers to;
* ``session.commit()`` moves the branch to a new snapshot in one conditional
  write of the branch reference: all of the batch, or nothing, becomes
  visible, and of two writers that started from the same tip exactly one
  commit succeeds.  The other gets :class:`CommitConflict` naming the winner's
  commit, unless its changes do not overlap the winner's (Icechunk's
  ``BasicConflictSolver`` rebases them).  Two appends to one store always
  overlap (both rewrite the commit record and grow the same arrays), so the
  second is refused, nothing of it visible; re-running it (same
  ``batch_id``) appends it on top of the winner's.
* readers open a **read-only session** at a snapshot: what they read is one
  commit, whole, however long they read; ``RepoLocation(url, as_of=...)`` opens one
  at a tag (the nightly pipeline tags each promoted day) or a snapshot id.

So there is nothing to expire and nothing to fence: a writer that stalls
(SIGSTOP, a GC pause, a partition) or dies, or whose clock is wrong, or that
runs in another PID namespace, can at worst fail its own commit.  What is
kept from the local stores is everything else: the commit record's
attributes (counts, the append log with each batch's checksum, every chunk's
CRC-32C binding), and the read checks, which read the chunk bytes through the
session's zarr store (:class:`~streamrank.io._remote_chunks.RemoteChunkDecoder`).

:class:`RepoLocation` is a :class:`~streamrank.io._remote.Remote` whose object
reads and writes go through the current session's zarr store instead of an
fsspec filesystem, so the stores' code paths at a URL serve it unchanged; the
hooks are :func:`transaction` (an append), :func:`creating` (create /
re-create: a commit like any other) and :meth:`RepoLocation.commit_attrs` (the
commit point, called by :func:`streamrank.io._writer.write_attrs`).

Stores written by the previous layout (a ``zarr.json`` at the prefix, no
repository) open read-only with a hint; ``streamrank migrate`` copies one
into a repository (:mod:`streamrank.io._migrate`).

Icechunk is optional: ``pip install 'streamrank[s3]'`` (or ``[icechunk]``);
without it a store at a URL is a one-line :class:`ImportError` naming the extra.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading

from ._remote import Remote, _check_options, protocol_of

__all__ = ["BRANCH", "CommitConflict", "RepoLocation", "icechunk_module", "is_repository", "open_location",
           "storage_of"]

#: the branch a store lives on
BRANCH = "main"
#: URL schemes kept in an Icechunk repository
SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory")

_memory_storages: dict = {}        # memory:// URL -> icechunk in-memory storage (one process)
_memory_guard = threading.Lock()


class CommitConflict(RuntimeError):
    """Another writer committed to the store since this transaction began; nothing of it was committed."""


def icechunk_module():
    """``icechunk``, or a one-line ImportError naming the extra."""
    try:
        import icechunk
    except ImportError:
        raise ImportError("stores at URLs are Icechunk repositories and need the icechunk package: "
                          "pip install 'streamrank[s3]' (or 'streamrank[icechunk]')") from None
    if not os.environ.get("ICECHUNK_LOG"):
        # a refused rebase is reported by CommitConflict; icechunk's own WARN lines would repeat it on stderr
        icechunk.set_logs_filter("error")
    return icechunk


def _split(url: str) -> tuple[str, str]:
    rest = str(url).split("://", 1)[1].strip("/")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"{url}: a store needs a bucket (and a prefix), e.g. s3://bucket/train.zarr")
    return bucket, prefix


def storage_of(url: str, storage_options: dict | None = None):
    """The Icechunk storage of ``url`` from fsspec-style ``storage_options`` and the usual environment variables.

    ``s3://``: ``endpoint_url`` (or ``AWS_ENDPOINT_URL``: MinIO, Ceph, moto …;
    path-style requests, plain HTTP allowed for ``http://`` endpoints), ``key``
    / ``secret`` / ``token`` (or the AWS environment and profiles), ``anon``,
    ``client_kwargs={"region_name": ...}`` (or ``AWS_REGION`` /
    ``AWS_DEFAULT_REGION``).  ``gs://``: ``token`` (a service-account file),
    ``anon``; otherwise the Google environment.  ``az://container/prefix``:
    ``account_name`` (or ``AZURE_STORAGE_ACCOUNT_NAME``), ``account_key`` /
    ``sas_token``, ``use_emulator`` (Azurite); otherwise the Azure environment.
    """
    ic = icechunk_module()
    opts = dict(storage_options or {})
    protocol = protocol_of(url)
    bucket, prefix = _split(url)
    if protocol == "memory":
        with _memory_guard:
            key = str(url).rstrip("/")
            if key not in _memory_storages:
                _memory_storages[key] = ic.in_memory_storage()
            return _memory_storages[key]
    if protocol in ("s3", "s3a"):
        endpoint = opts.get("endpoint_url") or (opts.get("client_kwargs") or {}).get("endpoint_url") \
            or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        region = (opts.get("client_kwargs") or {}).get("region_name") or os.environ.get("AWS_REGION") \
            or os.environ.get("AWS_DEFAULT_REGION") or ("us-east-1" if endpoint else None)
        key, secret = opts.get("key"), opts.get("secret")
        kw = dict(bucket=bucket, prefix=prefix, region=region, endpoint_url=endpoint,
                  allow_http=bool(endpoint and str(endpoint).startswith("http://")),
                  force_path_style=bool(endpoint))
        if opts.get("anon"):
            kw["anonymous"] = True
        elif key and secret:
            kw.update(access_key_id=key, secret_access_key=secret, session_token=opts.get("token"))
        else:
            kw["from_env"] = True
        return ic.s3_storage(**kw)
    if protocol in ("gs", "gcs"):
        kw = dict(bucket=bucket, prefix=prefix)
        token = opts.get("token")
        if opts.get("anon") or token == "anon":
            kw["anonymous"] = True
        elif isinstance(token, str) and os.path.exists(token):
            kw["service_account_file"] = token
        else:
            kw["from_env"] = True
        return ic.gcs_storage(**kw)
    if protocol in ("az", "abfs", "abfss"):
        account = opts.get("account_name") or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        if not account:
            raise ValueError(f"{url}: an Azure store needs storage_options={{'account_name': ...}} "
                             "(or AZURE_STORAGE_ACCOUNT_NAME)")
        kw = dict(account=account, container=bucket, prefix=prefix)
        if opts.get("use_emulator"):          # Azurite on 127.0.0.1:10000 (its well-known account)
            kw["config"] = {"azure_storage_use_emulator": "true"}
        if opts.get("account_key"):
            kw["access_key"] = opts["account_key"]
        elif opts.get("sas_token"):
            kw["sas_token"] = opts["sas_token"]
        else:
            kw["from_env"] = True
        return ic.azure_storage(**kw)
    raise ValueError(f"{url}: stores at {protocol}:// URLs are not supported; use s3://, gs://, az:// (Icechunk "
                     "repositories) or a local directory")


def is_repository(url: str, storage_options: dict | None = None) -> bool:
    """Whether an Icechunk repository exists at ``url``."""
    return bool(icechunk_module().Repository.exists(storage_of(url, storage_options)))


def open_location(url: str, storage_options: dict | None = None, *, as_of: str | None = None):
    """The location of the store at ``url``: a :class:`RepoLocation`, or a legacy ``Remote`` (read-only).

    A prefix without a repository but with a ``zarr.json`` is a store of the
    previous layout (read through fsspec, appends refused with a hint to
    ``streamrank migrate``); anything else is a repository (to be created, or
    absent: opening it is then FileNotFoundError).
    """
    url = str(url).rstrip("/")
    protocol = protocol_of(url)
    if protocol not in SCHEMES:
        return Remote(url, storage_options)          # other fsspec filesystems: read-only, as before
    try:
        loc = RepoLocation(url, storage_options, as_of=as_of)
    except ImportError:                              # no icechunk: a store of the previous layout still reads
        legacy = _legacy_remote(url, storage_options)
        try:
            old = as_of is None and legacy is not None and legacy.exists("zarr.json")
        except Exception:   # noqa: BLE001 - unreachable or no credentials: the missing package is the news
            old = False
        if old:
            legacy.legacy = True
            return legacy
        raise
    if loc.exists_repo():
        return loc
    legacy = _legacy_remote(url, storage_options)
    if legacy is not None and legacy.exists("zarr.json"):
        if as_of is not None:
            raise ValueError(f"{url}: a store of the previous layout has no tags; 'as of' {as_of!r} needs a "
                             f"repository (streamrank migrate {url} NEW_URL)")
        legacy.legacy = True
        return legacy
    return loc


def _legacy_remote(url, storage_options):
    """A plain fsspec :class:`Remote` on ``url`` if its client is installed (to see the previous layout)."""
    if protocol_of(url) == "memory":
        return Remote(url, storage_options)
    try:
        return Remote(url, storage_options)
    except ImportError:
        return None


def legacy_hint(url: str) -> str:
    return (f"{url} is a store of the previous object-storage layout (no Icechunk repository): it opens "
            f"read-only; copy it into a repository with `streamrank migrate {url} NEW_URL`")


def _run(coro):
    from zarr.core.sync import sync

    return sync(coro)


def _proto():
    from zarr.core.buffer import default_buffer_prototype

    return default_buffer_prototype()


class RepoLocation(Remote):
    """A store's location in an Icechunk repository: object reads and writes through the current session.

    Outside a transaction the session is read-only, at the branch tip when the
    location was opened (or at ``as_of``: a tag or a snapshot id); inside
    :func:`transaction` / :func:`creating` it is the writable session whose
    commit :meth:`commit_attrs` makes.
    """

    legacy = False

    def __init__(self, url: str, storage_options: dict | None = None, *, as_of: str | None = None,
                 snapshot: str | None = None):
        self.url = str(url).rstrip("/")
        self.protocol = protocol_of(self.url)
        self.storage_options = _check_options(storage_options)
        self.root = self.url
        _split(self.url)
        self.as_of = as_of
        self._snapshot = snapshot
        self.storage = storage_of(self.url, self.storage_options)
        self._repo = None
        self._session = None
        self._writable = False
        self._tails = {}          # chunk key -> its last bytes, for chunks written in this transaction
        self.committed_snapshot = None

    def __repr__(self):
        return f"RepoLocation({self.url!r})"

    def __reduce__(self):       # workers reopen the repository and read the same snapshot
        return (_rebuild, (self.url, self.storage_options, self.as_of, self.snapshot_id))

    # ------------------------------------------------------------ repository
    def exists_repo(self) -> bool:
        return self._repo is not None or bool(icechunk_module().Repository.exists(self.storage))

    @property
    def repo(self):
        if self._repo is None:
            ic = icechunk_module()
            if not ic.Repository.exists(self.storage):
                raise FileNotFoundError(f"no store at {self.url}")
            self._repo = ic.Repository.open(self.storage)
        return self._repo

    @property
    def session(self):
        if self._session is None:
            if self._snapshot is not None:
                self._session = self.repo.readonly_session(snapshot_id=self._snapshot)
            elif self.as_of is not None:
                self._session = self.repo.readonly_session(**_as_of(self.repo, self.as_of, self.url))
            else:
                self._session = self.repo.readonly_session(branch=BRANCH)
        return self._session

    @property
    def snapshot_id(self) -> str | None:
        try:
            return self.session.snapshot_id
        except FileNotFoundError:
            return None

    # ------------------------------------------------------------- objects
    def display(self, rel: str = "") -> str:
        return f"{self.url}/{rel}" if rel else self.url

    def key(self, rel: str) -> str:
        return rel

    def read(self, rel: str) -> bytes:
        got = _run(self.session.store.get(rel, _proto()))
        if got is None:
            raise FileNotFoundError(self.display(rel))
        return got.to_bytes()

    def read_tail(self, rel: str, n: int) -> bytes:
        from zarr.abc.store import SuffixByteRequest

        tail = self._tails.get(rel) if self._writable else None
        if tail is not None and len(tail) >= n:      # a chunk this transaction wrote: no request for its trailer
            return tail[len(tail) - n:]

        got = _run(self.session.store.get(rel, _proto(), SuffixByteRequest(int(n))))
        if got is None:
            raise FileNotFoundError(self.display(rel))
        return got.to_bytes()

    def read_many(self, rels) -> list:
        rels = list(rels)
        if not rels:
            return []
        store, proto = self.session.store, _proto()

        async def all_of():
            return await asyncio.gather(*(store.get(r, proto) for r in rels))

        return [None if b is None else b.to_bytes() for b in _run(all_of())]

    def exists(self, rel: str) -> bool:
        try:
            return bool(_run(self.session.store.exists(rel)))
        except FileNotFoundError:
            return False

    def write(self, rel: str, data: bytes) -> None:
        from zarr.core.buffer import default_buffer_prototype

        self._check_writing("write " + rel)
        _run(self.session.store.set(rel, default_buffer_prototype().buffer.from_bytes(bytes(data))))

    def delete(self, rel: str) -> None:
        self._check_writing("delete " + rel)
        _run(self.session.store.delete(rel))

    def list(self, rel: str = "") -> list[str]:
        store = self.session.store

        async def keys():
            return [k async for k in store.list_prefix(rel)]

        return sorted(_run(keys()))

    def any_object(self) -> bool:
        return self.exists_repo()

    def zarr_store(self, read_only: bool = False):
        from ._session_store import SessionStore

        return SessionStore(self, read_only)

    def _check_writing(self, what):
        if not self._writable:
            raise RuntimeError(f"{self.url}: {what} outside a transaction (a bug)")

    # --------------------------------------------------------- transactions
    def begin(self):
        """A writable session at the branch tip (the transaction's base)."""
        if self.as_of is not None or self._snapshot is not None:
            raise PermissionError(f"{self.url} is open as of {self.as_of or self._snapshot}: read-only")
        self._session = self.repo.writable_session(BRANCH)
        self._writable = True
        self._tails = {}
        self.committed_snapshot = None
        return self._session.snapshot_id

    def end(self, base: str) -> None:
        """Back to a read-only session: at the new commit, or (nothing committed) at the transaction's base."""
        self._writable = False
        self._tails = {}
        self._session = self.repo.readonly_session(snapshot_id=self.committed_snapshot or base)

    def commit_attrs(self, attrs: dict) -> str:
        """The commit point: the group's ``zarr.json`` with ``attrs``, then one Icechunk commit of everything.

        Returns the new snapshot id; :class:`CommitConflict` naming the
        winner's commit if another writer committed an overlapping change
        since this transaction began (nothing of this one is visible).
        """
        self._check_writing("commit")
        try:
            doc = json.loads(self.read("zarr.json"))
        except FileNotFoundError:
            doc = {"zarr_format": 3, "node_type": "group"}
        old = doc.get("attributes") or {}
        doc["attributes"] = attrs
        self.write("zarr.json", json.dumps(doc, indent=1).encode())
        return self.commit(*_describe(old, attrs))

    def commit(self, message: str, metadata: dict | None = None) -> str:
        """Commit the writable session (rebased if it does not overlap a newer commit); the new snapshot id.

        :class:`CommitConflict` naming the winner's commit when it overlaps.
        """
        self._check_writing("commit")
        ic = icechunk_module()
        try:
            solver = ic.BasicConflictSolver(on_chunk_conflict=ic.VersionSelection.Fail)   # never pick a side
            sid = self._session.commit(message, metadata=metadata, rebase_with=solver, rebase_tries=3)
        except (ic.ConflictError, ic.RebaseFailedError) as exc:
            raise CommitConflict(self._conflict_message(message)) from exc
        self.committed_snapshot = sid
        return sid

    def has_changes(self) -> bool:
        return self._writable and bool(self._session.has_uncommitted_changes)

    def create_repo(self) -> None:
        """Create the repository if there is none (another process creating it meanwhile is fine)."""
        ic = icechunk_module()
        if self.exists_repo():
            return
        try:
            self._repo = ic.Repository.create(self.storage)
        except Exception:   # noqa: BLE001 - another process created it meanwhile: use theirs
            if not ic.Repository.exists(self.storage):
                raise

    def _conflict_message(self, message: str) -> str:
        try:
            tip = self.repo.lookup_branch(BRANCH)
            info = self.repo.lookup_snapshot(tip)
            who = f"commit {tip} ({info.message!r}, {info.written_at:%Y-%m-%d %H:%M:%S} UTC)"
        except Exception as exc:    # noqa: BLE001 - the refusal is the news; the winner's name is a courtesy
            who = f"a commit (its name could not be read: {exc})"
        return (f"{self.url}: another writer committed {who} since this writer began ({message}); nothing of "
                "this transaction was committed. Open the store again and re-run it (an append with the same "
                "batch_id is idempotent)")


def tag_branch_tip(url: str, storage_options: dict | None, tag: str) -> str | None:
    """Tag the branch tip of the repository at ``url`` as ``tag`` (kept if it exists); its snapshot, or None
    when ``url`` is not a repository."""
    loc = RepoLocation(url, storage_options)
    if not loc.exists_repo():
        return None
    repo = loc.repo
    if tag in repo.list_tags():
        return repo.lookup_tag(tag)
    sid = repo.lookup_branch(BRANCH)
    repo.create_tag(tag, sid)
    return sid


def _rebuild(url, storage_options, as_of, snapshot):
    return RepoLocation(url, storage_options, as_of=as_of, snapshot=snapshot)


def _as_of(repo, as_of: str, url: str) -> dict:
    """``readonly_session`` arguments for a tag name or a snapshot id."""
    if as_of in repo.list_tags():
        return {"tag": as_of}
    try:
        repo.lookup_snapshot(as_of)
        return {"snapshot_id": as_of}
    except Exception:   # noqa: BLE001 - icechunk's error for an unknown id is generic
        raise ValueError(f"{url}: no tag or snapshot {as_of!r} (tags: {sorted(repo.list_tags())})") from None


def _describe(old: dict, new: dict) -> tuple[str, dict]:
    """The commit's message and metadata: what this commit is (create / append batch …)."""
    log0, log1 = old.get("log") or [], new.get("log") or []
    kind = new.get("format", "store")
    if "format" not in old or old.get("store_id") != new.get("store_id"):
        return f"create {kind}", {"streamrank": "create", "store_id": new.get("store_id")}
    if len(log1) > len(log0):
        e = log1[-1]
        span = e.get("rows") or e.get("tuples") or e.get("groups")
        where = f" ({span[0]}:{span[1]})" if isinstance(span, list) and len(span) == 2 else ""
        return (f"append batch {e.get('batch_id')!r}{where}",
                {"streamrank": "append", "batch_id": e.get("batch_id"), "checksum": e.get("checksum")})
    return "update the commit record", {"streamrank": "update"}


@contextlib.contextmanager
def transaction(loc: RepoLocation):
    """One append: a writable session from the tip; committed by :meth:`RepoLocation.commit_attrs`, or dropped."""
    base = loc.begin()
    try:
        yield None
    finally:
        loc.end(base)


@contextlib.contextmanager
def creating(loc: RepoLocation, overwrite: bool):
    """A store about to be (re-)created: a writable session whose group is emptied; committed like an append.

    The repository is created if absent (FileExistsError if the prefix holds
    other objects; a store of the previous layout is named as such).
    """
    if not loc.exists_repo():
        legacy = _legacy_remote(loc.url, loc.storage_options)
        if legacy is not None and legacy.any_object():
            if legacy.exists("zarr.json"):
                raise FileExistsError(legacy_hint(loc.url) + "; delete it to create a new store there")
            raise FileExistsError(f"{loc.url} exists and is not a store; refusing to write there")
        loc.create_repo()
    base = loc.begin()
    try:
        try:
            there = loc.read("zarr.json")
        except FileNotFoundError:
            there = None
        if there is not None:
            if not overwrite:
                raise FileExistsError(f"{loc.url} already exists; pass overwrite=True to replace it")
            import zarr

            zarr.open_group(store=loc.zarr_store(), mode="w")      # every node deleted, in this transaction
        yield None
    finally:
        loc.end(base)
