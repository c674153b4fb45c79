"""Models inside an Icechunk repository: a nightly models directory at a URL (``--models s3://…/nightly``).

A model there is a zarr group of the repository (``<version>/model``) written
by ``write`` (:func:`streamrank.persistence.write_group`, passed in) in the run's transaction and
read back by :func:`streamrank.persistence.read_group` — the same validation
as a local model (the chunk record, the declared sizes) — from one read-only
session: the model is one commit's, whole.  :func:`load_from_repository`
serves ``sr.load(DIR + "/current")``, ``sr.load(DIR + "/v0004")`` and
``sr.load(DIR + "/v0004@TAG")`` (the version as of a tag) for a models
directory that is a repository.
"""
from __future__ import annotations

from ._model_zarr import ModelFormatError

__all__ = ["write_repo_model", "read_repo_model", "load_from_repository", "repository_parent"]

#: the root attribute naming the promoted version
CURRENT = "current"
#: the group of a model saved at a URL (``sr.save(model, "s3://…/ranker")``)
MODEL = "model"


def write_repo_model(loc, path: str, model, root_attrs=None, *, write) -> None:
    """``model`` as the zarr group ``path`` of the writable session of ``loc`` (replacing what is there)."""
    import zarr

    root = zarr.open_group(store=loc.zarr_store(), mode="a")
    if path in root:
        del root[path]
    write(root.create_group(path), model, root_attrs)


def save_to_repository(model, url: str, storage_options=None, root_attrs=None, attempts: int = 3, *, write) -> str:
    """``sr.save(model, url)`` at a URL: the model as the group ``model`` of the repository at ``url``, one commit.

    Returns the commit's snapshot id (``sr.load(url + "@" + id)`` reads that
    model again later).  Two saves racing: both write, the first commit wins
    and the second is redone on top of it (the last save wins, as with two
    local saves); a reader reads one commit's model, whole.
    """
    from .io._icechunk_repo import CommitConflict, RepoLocation

    loc = RepoLocation(url, storage_options)
    loc.create_repo()
    for attempt in range(attempts):
        base = loc.begin()
        try:
            write_repo_model(loc, MODEL, model, root_attrs, write=write)
            return loc.commit(f"save {type(model).__name__}", {"streamrank": "save", "class": type(model).__name__})
        except CommitConflict:
            if attempt == attempts - 1:
                raise
        finally:
            loc.end(base)
    raise AssertionError("unreachable")     # pragma: no cover


def read_repo_model(loc, path: str, where: str, *, read):
    """The model held by the group ``path`` of ``loc``'s current session (``where`` names it in errors)."""
    import zarr

    try:
        group = zarr.open_group(store=loc.zarr_store(read_only=True), path=path, mode="r")
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise FileNotFoundError(f"no model at {where}") from exc

    def chunk_bytes(key):
        try:
            return loc.read(f"{path}/{key}")
        except FileNotFoundError:
            return None

    def stored_bytes(name):
        head = f"{path}/{name}/c"
        keys = [k for k in loc.list(head) if k == head or k.startswith(head + "/")]
        return sum(len(b or b"") for b in loc.read_many(keys))

    return read(group, where, stored_bytes, chunk_bytes)


def _repository_at(url: str, storage_options=None, as_of=None):
    """The RepoLocation of ``url`` if a repository is there (and icechunk is installed), else None."""
    from .io._icechunk_repo import SCHEMES, RepoLocation
    from .io._remote import protocol_of

    if protocol_of(url) not in SCHEMES:
        return None
    try:
        import icechunk  # noqa: F401
    except ImportError:
        return None            # (a model of the previous layout still loads)
    loc = RepoLocation(url, storage_options, as_of=as_of or None)
    return loc if loc.exists_repo() else None


def repository_parent(url: str, storage_options=None):
    """``(RepoLocation of the parent, last part)`` if the parent of ``url`` is a repository, else None."""
    parent, _, last = str(url).rstrip("/").rpartition("/")
    if "://" not in parent or parent.endswith("://") or "/" not in parent.split("://", 1)[1]:
        return None
    last, _, tag = last.partition("@")
    loc = _repository_at(parent, storage_options, tag)
    return None if loc is None else (loc, last)


def _own_repository(url: str, storage_options=None):
    """The RepoLocation of ``url`` (``url@ID``: as of a tag or snapshot id) if it is a repository, else None."""
    base, tag = str(url).rstrip("/"), None
    if "@" in base.split("://", 1)[1]:
        base, _, tag = base.rpartition("@")
    return _repository_at(base, storage_options, tag)


def published_in_repository(url: str, storage_options=None) -> bool:
    loc = _own_repository(url, storage_options)
    return loc is not None and loc.exists(f"{MODEL}/zarr.json")


def load_from_repository(url: str, storage_options=None, *, read):
    """The model saved at ``url`` (a repository), or at ``DIR/current`` / ``DIR/<version>`` of a nightly models
    directory that is one; None when neither is a repository."""
    own = _own_repository(url, storage_options)
    if own is not None:
        return read_repo_model(own, MODEL, str(url), read=read)
    found = repository_parent(url, storage_options)
    if found is None:
        return None
    loc, name = found
    import zarr

    root = zarr.open_group(store=loc.zarr_store(read_only=True), mode="r")
    if name == CURRENT:
        name = root.attrs.get(CURRENT)
        if not isinstance(name, str) or not name:
            raise FileNotFoundError(f"no model at {url}: no version is promoted in {loc.url}")
    if name.startswith(".") or "/" in name:
        raise ModelFormatError(f"{url}: {name[:80]!r} is not a version of {loc.url}")
    return read_repo_model(loc, f"{name}/model", f"{loc.url}/{name}", read=read)
