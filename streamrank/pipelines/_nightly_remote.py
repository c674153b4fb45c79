"""Nightly pipeline: a models directory on object storage (``--models s3://bucket/nightly``) is an Icechunk repository.

The same guarantees as a local models directory
(:mod:`streamrank.pipelines._nightly_versions`), from transactions instead of
rename and ``flock`` (:mod:`streamrank.io._icechunk_repo`):

* the repository's root group holds the run state in its attributes:
  ``current`` (the promoted version) and ``excluded`` (the rejected days,
  :mod:`~streamrank.pipelines._nightly_exclusions`);
* ``<version>/`` is a group whose attribute ``nightly_version`` is the
  version's metadata (``version.json`` of a local directory), with the model
  in ``<version>/model`` (:mod:`streamrank._repo_models`) and the kernel
  learner's statistics in the byte array ``<version>/statistics`` (an npz);
* ``reports/<time>`` holds each run's report in its attributes.

**A run is one transaction.**  :meth:`RemoteModelsDir.lock` opens a writable
session at the branch tip; everything the run writes (the version, the
pointer, exclusions, pruning, the report) is committed together when the run
ends — readers (``sr.load(DIR + "/current")``) see the old state or the new
one, never a mix.  A promoted run's commit is **tagged** with the version's
name, and the store the run ingested into is tagged alike when it is a
repository too: :meth:`RemoteModelsDir.rollback` (``streamrank nightly
--rollback TAG``) promotes the version a tag promoted, and
``GroupStore.open(store, as_of=TAG)`` reads the store as it was then.

**Concurrent runs**: there is no lock to hold.  Of two runs that overlap,
the first to commit wins; the other's commit is refused with
:class:`~streamrank.pipelines._nightly_errors.ModelsLocked` (exit 5) naming
the winner's commit, and nothing of it is visible (its ingest into the store
is a commit of its own, and idempotent).  A run that dies commits nothing.
"""
from __future__ import annotations

import contextlib
import io
import json

import numpy as np

from streamrank.io import is_url

__all__ = ["RemoteModelsDir", "as_models_dir"]

META_ATTR = "nightly_version"
STATS = "statistics"
REPORTS = "reports"


def as_models_dir(models_dir, storage_options=None):
    """A :class:`RemoteModelsDir` for a URL (an existing one is returned as is), else None."""
    if isinstance(models_dir, RemoteModelsDir):
        return models_dir
    if is_url(models_dir):
        return RemoteModelsDir(str(models_dir), storage_options)
    return None


class RemoteModelsDir:
    """A nightly models directory at a URL (see the module doc)."""

    def __init__(self, url, storage_options=None):
        from streamrank.io import RepoLocation

        self.loc = RepoLocation(str(url), storage_options)
        self.url = self.loc.url
        self.storage_options = self.loc.storage_options or None
        self._promoted = None
        self.store_tagger = None      # set by the run: tags the store it ingested into (a repository)

    def __str__(self):
        return self.url

    def __repr__(self):
        return f"RemoteModelsDir({self.url!r})"

    def version_url(self, version) -> str:
        return f"{self.url}/{version}"

    def _error(self, msg):
        from streamrank.pipelines._nightly_errors import ModelsDirError

        return ModelsDirError(msg)

    def _locked(self, msg):
        from streamrank.pipelines._nightly_errors import ModelsLocked

        return ModelsLocked(msg)

    def _root(self, write=False):
        import zarr

        if not write and not self.loc.exists_repo():
            return None
        try:
            return zarr.open_group(store=self.loc.zarr_store(read_only=not write), mode="a" if write else "r")
        except FileNotFoundError:
            return None

    # ------------------------------------------------------------------ a run
    @contextlib.contextmanager
    def lock(self, message=None):
        """The run's transaction: committed (and tagged when it promoted) at the end, or dropped on an error."""
        from streamrank.io import CommitConflict

        if self.loc._writable:              # already inside the run's transaction
            yield None
            return
        if not self.loc.exists_repo():
            self._refuse_previous_layout()
        self.loc.create_repo()
        base = self.loc.begin()
        self._promoted = None
        try:
            self._root(write=True)
            yield None
            if self.loc.has_changes():
                what = message or (f"promote {self._promoted}" if self._promoted else "nightly run (nothing promoted)")
                try:
                    sid = self.loc.commit(what, {"streamrank": "nightly", "promoted": self._promoted})
                except CommitConflict as exc:
                    raise self._locked(f"{exc} (one writer at a time: this run changed nothing)") from None
                if self._promoted:
                    self._tag(self._promoted, sid)
        finally:
            self.loc.end(base)

    def _refuse_previous_layout(self):
        """A models directory written by the previous layout (objects ``current``, ``vNNNN/version.json``) is
        not silently restarted beside: the run stops, saying so."""
        from streamrank.io import Remote

        try:
            old = Remote(self.url, self.storage_options).exists("current")
        except ImportError:
            return
        if old:
            raise self._error(f"{self.url} is a nightly models directory of the previous object-storage layout (a "
                              "'current' object, no Icechunk repository); it is read-only now: point --models at a "
                              "new URL (the first night there trains in full)")

    def _tag(self, version, sid):
        repo = self.loc.repo
        if version not in repo.list_tags():
            repo.create_tag(version, sid)
        if self.store_tagger is not None:
            self.store_tagger(version)

    # --------------------------------------------------------------- reading
    def current_version(self):
        """The promoted version's name, None without one; ModelsDirError for a damaged pointer."""
        root = self._root()
        if root is None:
            return None
        name = root.attrs.get("current")
        if name is None:
            return None
        if not isinstance(name, str) or not name or name.startswith(".") or "/" in name:
            raise self._error(f"{self.url}: 'current' names {str(name)[:80]!r}, which is not a version")
        self.read_version(name)
        return name

    def list_versions(self):
        """Complete versions, oldest first."""
        root = self._root()
        if root is None:
            return []
        names = [n for n, g in root.groups() if n != REPORTS and META_ATTR in g.attrs]
        return sorted(names, key=lambda v: self.read_version(v).get("seq", 0))

    def read_version(self, version) -> dict:
        root = self._root()
        try:
            meta = root[version].attrs[META_ATTR] if root is not None else None
        except KeyError:
            meta = None
        if meta is None:
            raise self._error(f"{self.url}/{version} is missing (an incomplete or damaged version)")
        if not isinstance(meta, dict):
            raise self._error(f"{self.url}/{version}: its metadata is a JSON {type(meta).__name__}, not an object")
        return dict(meta)

    def load(self, version):
        from streamrank.persistence import read_repo_model

        return read_repo_model(self.loc, f"{version}/model", self.version_url(version))

    def open_stats(self, version):
        """The version's statistics (an npz) as a file object for ``np.load``."""
        root = self._root()
        try:
            return io.BytesIO(np.asarray(root[f"{version}/{STATS}"][...]).tobytes())
        except (KeyError, TypeError):
            raise FileNotFoundError(f"{self.url}/{version}/{STATS}") from None

    def read_excluded(self) -> bytes:
        """The exclusions document (JSON bytes); FileNotFoundError when there is none."""
        root = self._root()
        doc = root.attrs.get("excluded") if root is not None else None
        if doc is None:
            raise FileNotFoundError(f"{self.url}: no exclusions")
        return json.dumps(doc).encode()

    def read_blob(self, folder, name) -> bytes:
        """The bytes stored as ``folder/name`` (e.g. a day's data profile); FileNotFoundError when absent."""
        root = self._root()
        try:
            return np.asarray(root[f"{folder}/{name}"][...]).tobytes()
        except (KeyError, TypeError):
            raise FileNotFoundError(f"{self.url}/{folder}/{name}") from None

    # --------------------------------------------------------------- writing
    def write_blob(self, folder, name, data: bytes) -> None:
        """Store ``data`` as the byte array ``folder/name``, in the run's transaction."""
        raw = np.frombuffer(bytes(data), dtype=np.uint8)
        g = self._root(write=True).require_group(folder)
        a = g.create_array(name, shape=raw.shape, dtype="uint8", chunks=(max(1, raw.size),), overwrite=True)
        a[...] = raw

    def write_excluded(self, data: bytes) -> None:
        self._root(write=True).attrs["excluded"] = json.loads(data)

    def write_version(self, name, model, meta, arrays=None):
        """Model (+ statistics) and metadata of ``name``, in the run's transaction."""
        from streamrank.persistence import write_repo_model

        write_repo_model(self.loc, f"{name}/model", model)
        g = self._root(write=True)[name]
        if arrays:
            buf = io.BytesIO()
            np.savez(buf, **arrays)
            raw = np.frombuffer(buf.getvalue(), dtype=np.uint8)
            a = g.create_array(STATS, shape=raw.shape, dtype="uint8", chunks=(max(1, raw.size),),
                               overwrite=True)
            a[...] = raw
        g.attrs[META_ATTR] = meta

    def switch_current(self, version):
        """Promote ``version``: committed (and tagged) with the rest of the run."""
        self._root(write=True).attrs["current"] = version
        self._promoted = version

    def clean_partial(self):
        """Nothing to do: an uncommitted version is never visible."""
        return []

    def prune(self, keep):
        keep = int(keep)
        if keep < 1:
            raise ValueError(f"--keep must be >= 1, got {keep}")
        removed = []
        with self.lock(f"prune to the last {keep} version(s)"):     # (inside a run: its transaction)
            cur = self.current_version()
            root = self._root(write=True)
            for v in self.list_versions()[:-keep]:
                if v != cur:
                    del root[v]
                    removed.append(v)
        return removed

    def write_report(self, stamp, report):
        root = self._root(write=True)
        reports = root.require_group(REPORTS)
        reports.create_group(stamp, overwrite=True).attrs["report"] = json.loads(json.dumps(report))
        return f"{self.url}/{REPORTS}/{stamp}"

    def reports(self) -> list:
        root = self._root()
        if root is None or REPORTS not in root:
            return []
        return sorted(n for n, _ in root[REPORTS].groups())

    def rollback(self, tag) -> str:
        """Promote again the version the tag ``tag`` promoted (one commit); returns its name."""
        from streamrank.io import RepoLocation

        if not self.loc.exists_repo() or tag not in self.loc.repo.list_tags():
            tags = sorted(self.loc.repo.list_tags()) if self.loc.exists_repo() else []
            raise self._error(f"{self.url}: no tag {tag!r} (tags: {', '.join(tags) or 'none'})")
        then = RemoteModelsDir.__new__(RemoteModelsDir)
        then.loc = RepoLocation(self.url, self.storage_options, as_of=tag)
        then.url = self.url
        version = then.current_version()
        if version is None:
            raise self._error(f"{self.url}: tag {tag!r} promoted no version")
        with self.lock(f"rollback to tag {tag}: current={version}"):
            self.read_version(version)          # still there (not pruned since)
            self._root(write=True).attrs["current"] = version
        return version
