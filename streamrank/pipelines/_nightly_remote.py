"""Nightly pipeline: a models directory on object storage (``--models s3://bucket/nightly``).

The same layout and the same guarantees as a local models directory
(:mod:`streamrank.pipelines._nightly_versions`), built from what object storage offers
instead of rename and ``flock``:

* ``DIR/<version>/`` holds a model published by ``sr.save(model, url)``
  (its own pointer ``model.json`` and immutable ``versions/``: see
  :mod:`streamrank._remote_models`), ``statistics.npz`` for the kernel
  learner, and ``version.json`` — written **last**, with ``If-None-Match: *``.
  A version is complete exactly when its ``version.json`` exists; a run that
  dies before leaves a version nobody lists (the next run writes over it:
  the number is reused, the model re-published).
* ``DIR/current`` is one object naming the promoted version.  Promotion is
  one PUT of it, conditional on the ETag the run read when it started
  (``If-Match``; ``If-None-Match: *`` on the first night): a reader loading
  ``sr.load(DIR + "/current")`` sees the old or the new model, never a mix,
  and a run whose lease was taken over cannot move the pointer any more.
* **One writer**: a run holds the lease ``DIR/.streamrank.lock``
  (:class:`streamrank.io.WriterLease`: created with ``If-None-Match``,
  renewed while the run lives, taken over only after it expired); a second
  run fails at once with :class:`~streamrank.pipelines._nightly_errors.ModelsLocked`.
  The lease is checked again before every write; a run whose lease was
  taken over (or whose pointer ETag no longer matches) stops with
  ``ModelsLocked`` (exit 5) without promoting.
* Pruning deletes a version's ``version.json`` first (the version is then
  incomplete, so never listed again), then its objects; the current version
  is never pruned.
* Reports go to ``DIR/reports/<time>.json``; ``metrics.png`` is not drawn
  for a models directory on object storage (the report says so).
"""
from __future__ import annotations

import contextlib
import io
import json

import numpy as np

import streamrank as sr
from streamrank.io import PreconditionFailed, Remote, is_url
from streamrank.pipelines._nightly_errors import ModelsDirError, ModelsLocked

__all__ = ["RemoteModelsDir", "as_models_dir"]

POINTER = "current"
META = "version.json"
KERNEL_STATS = "statistics.npz"
_MAX_META_BYTES = 16 << 20


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
        self.remote = Remote(url, storage_options)
        self.url = self.remote.url
        self.storage_options = self.remote.storage_options or None
        self._lease = None
        self._pointer_etag = None      # the ETag of ``current`` when the run read it (None: absent)
        self._pointer_read = False

    def __str__(self):
        return self.url

    def __repr__(self):
        return f"RemoteModelsDir({self.url!r})"

    def version_url(self, version) -> str:
        return f"{self.url}/{version}"

    def _error(self, msg):
        return ModelsDirError(msg)

    # ------------------------------------------------------------------ lock
    @contextlib.contextmanager
    def lock(self):
        """The run's lease on ``DIR/.streamrank.lock``; :class:`ModelsLocked` if another run holds it."""
        from streamrank.io import WriterLease, WriterLockHeld

        try:
            lease = WriterLease(self.remote, what="written by a nightly run").acquire()
        except WriterLockHeld as exc:
            raise ModelsLocked(f"{exc}; this run changed nothing") from None
        self._lease = lease
        try:
            yield lease
        finally:
            self._lease = None
            lease.release()

    # --------------------------------------------------------------- reading
    def current_version(self):
        """The promoted version's name, None without a pointer; ModelsDirError for a damaged one."""
        p = self.remote.display(POINTER)
        try:
            raw, etag = self.remote.read_with_etag(POINTER)
        except FileNotFoundError:
            if not self._pointer_read:
                self._pointer_read, self._pointer_etag = True, None
            return None
        if not self._pointer_read:      # the first read of the run: promotion is conditional on this ETag
            self._pointer_read, self._pointer_etag = True, etag
        try:
            name = raw[:4096].decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise self._error(f"{p} cannot be read as the name of a version: {exc}") from None
        if not name:
            raise self._error(f"{p} is empty; it should name the promoted version (restore it, or delete it "
                              "and run with --full to retrain from scratch)")
        if name in (".", "..") or name.startswith(".") or "/" in name or "\\" in name or "\0" in name:
            raise self._error(f"{p} names {name[:80]!r}, which is not a version directory inside {self.url}")
        if not self.remote.exists(f"{name}/{META}"):
            raise self._error(f"{p} names {name!r}, but {self.remote.display(name + '/' + META)} is missing "
                              "(an incomplete version)")
        return name

    def list_versions(self):
        """Complete versions (with ``version.json``), oldest first."""
        fs, root = self.remote.fs, self.remote.root
        fs.invalidate_cache(root)
        try:
            found = fs.find(root, maxdepth=2)
        except FileNotFoundError:
            return []
        names = []
        for k in found:
            rel = k[len(root) + 1:] if k.startswith(root + "/") else None
            if rel and rel.count("/") == 1 and rel.endswith("/" + META) and not rel.startswith("."):
                names.append(rel.split("/", 1)[0])
        return sorted(names, key=lambda v: self.read_version(v).get("seq", 0))

    def read_version(self, version) -> dict:
        f = self.remote.display(f"{version}/{META}")
        try:
            data = self.remote.fs.cat_file(self.remote.key(f"{version}/{META}"), start=0, end=_MAX_META_BYTES)
        except FileNotFoundError:
            raise self._error(f"{f} is missing (an incomplete or damaged version)") from None
        try:
            meta = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._error(f"{f} is not valid JSON (truncated or damaged?): {exc}") from None
        if not isinstance(meta, dict):
            raise self._error(f"{f} holds a JSON {type(meta).__name__}, not a version's metadata object")
        return meta

    def load(self, version):
        return sr.load(self.version_url(version), storage_options=self.storage_options)

    def open_stats(self, version):
        """``DIR/<version>/statistics.npz`` as a file object for ``np.load``."""
        return io.BytesIO(self.remote.read(f"{version}/{KERNEL_STATS}"))

    # --------------------------------------------------------------- writing
    def _locked(self, msg):
        return ModelsLocked(msg)

    def _check_lease(self):
        """Refuse to write once this run's lease was taken over (it expired while the run was stalled)."""
        from streamrank.io import LeaseLost

        if self._lease is not None:
            try:
                self._lease.check()
            except LeaseLost as exc:
                raise self._locked(f"{exc}; one writer at a time: this run stops") from None

    def write_version(self, name, model, meta, arrays=None):
        """Model (+ statistics), then ``version.json`` (If-None-Match): complete, or not listed."""
        self._check_lease()
        sr.save(model, self.version_url(name), storage_options=self.storage_options)
        if arrays:
            buf = io.BytesIO()
            np.savez(buf, **arrays)
            self.remote.write(f"{name}/{KERNEL_STATS}", buf.getvalue())
        self._check_lease()
        try:
            self.remote.put_if_absent(f"{name}/{META}", json.dumps(meta, indent=1, sort_keys=True).encode())
        except PreconditionFailed:
            raise self._locked(f"{self.remote.display(name + '/' + META)} appeared while this run wrote version "
                               f"{name}: another writer is using {self.url} (one writer at a time)") from None

    def switch_current(self, version):
        """Point ``current`` at ``version``: one PUT, conditional on the ETag read when the run started."""
        self._check_lease()
        data = (version + "\n").encode()
        try:
            if not self._pointer_read:
                self.remote.write(POINTER, data)
            elif self._pointer_etag is None:
                self._pointer_etag = self.remote.put_if_absent(POINTER, data)
            else:
                self._pointer_etag = self.remote.put_if_match(POINTER, data, self._pointer_etag)
        except PreconditionFailed:
            raise self._locked(f"{self.remote.display(POINTER)} was moved by another writer since this run read "
                               f"it; {version} was not promoted (one writer at a time)") from None

    def clean_partial(self):
        """Nothing to do: an incomplete version is never listed and its number is reused (see module doc)."""
        return []

    def prune(self, keep):
        keep = int(keep)
        if keep < 1:
            raise ValueError(f"--keep must be >= 1, got {keep}")
        cur = self.current_version()
        removed = []
        for v in self.list_versions()[:-keep]:
            if v != cur:
                self._check_lease()
                self.remote.delete(f"{v}/{META}")          # incomplete from here on: never listed again
                try:
                    self.remote.fs.rm(self.remote.key(v), recursive=True)
                except FileNotFoundError:
                    pass
                removed.append(v)
        return removed

    def write_report(self, stamp, report):
        self.remote.write(f"reports/{stamp}.json", json.dumps(report, indent=1, sort_keys=True).encode())
        return self.remote.display(f"reports/{stamp}.json")
