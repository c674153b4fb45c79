"""Saved-model damage that loaded silently before (issue 16): each is a ModelFormatError naming what it found.

* A document edited to read the same chunk bytes differently (``"endian":
  "big"``, another dtype of the same item size, an extra or changed codec,
  another chunk-key separator or fill value) -- refused on every path:
  the local reader, zarr's path for a local model, a model at a URL.
* A chunk file deleted, swapped with another (of the same array, of another
  array) or copied from another model -- refused for a model carrying the
  record of its chunks (``saved_arrays``, :mod:`streamrank._model_record`).

Models without the record (saved before it existed) and models of the first
layout (no CRC-32C, missing all-zero chunks) load as before.  Every case
goes through the three readers: ``sr.load`` (the local reader), ``sr.load``
with the local reader declining (zarr reads the files), and ``memory://``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import fsspec
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamrank as sr
from streamrank import _model_record, persistence
from streamrank.base import BaseRanker
from streamrank.persistence import MODEL_FORMAT_VERSION, ModelFormatError, register_model


@register_model
class _RecordProbe(BaseRanker):
    """Dense arrays of two dtypes of one item size, a 2-D one, a CSR one in several chunks, a one-entry one."""

    def __init__(self, *, seed=0):
        self.seed = seed

    def fit(self):
        rng = np.random.default_rng(self.seed)
        self.arrays_ = {"coef_": rng.normal(size=6), "counts": rng.integers(0, 99, 6).astype(np.int64),
                        "G": rng.normal(size=(3, 4)), "zeros": np.zeros(4), "scalar": np.float64(self.seed + 0.5),
                        "W": sp.random(8, 6, density=0.5, random_state=self.seed, format="csr")}
        return self

    def _get_state(self):
        return {"seed": self.seed}, dict(self.arrays_)

    def _set_state(self, attrs, arrays):
        self.arrays_ = arrays


def _save(path, seed=0, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr(persistence, "CSR_CHUNK", 8)           # W's parts in several chunks
    m = _RecordProbe(seed=seed).fit()
    sr.save(m, path)
    return m


def _same(a, b):
    assert sorted(a.arrays_) == sorted(b.arrays_)
    for k, x in a.arrays_.items():
        y = b.arrays_[k]
        if sp.issparse(x):
            assert (x != y).nnz == 0 and x.shape == y.shape, k
        else:
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes() and np.asarray(x).dtype == y.dtype, k


def _edit_doc(path: Path, name: str, change):
    f = path / name / "zarr.json"
    d = json.loads(f.read_text())
    change(d)
    f.write_text(json.dumps(d, indent=2))


def _root_attrs(path: Path, change):
    f = path / "zarr.json"
    d = json.loads(f.read_text())
    change(d["attributes"])
    f.write_text(json.dumps(d, indent=2))


def _loads(path: Path, monkeypatch):
    """The readers of the (local) model at ``path``: the local path and the same files at a URL."""
    def local():
        return sr.load(path)

    def remote():
        url = f"memory://streamrank-record/{path.parent.name}-{path.name}"
        fs = fsspec.filesystem("memory")              # a model published in the pointer layout at a URL
        version = "20260101T000000000000Z-0123456789abcdef"
        prefix = f"{url[len('memory://'):]}/versions/{version}"
        fs.pipe({f"{prefix}/{p.relative_to(path).as_posix()}": p.read_bytes()
                 for p in path.rglob("*") if p.is_file()})
        fs.pipe_file(url[len("memory://"):] + "/model.json", json.dumps(
            {"streamrank": "model-pointer", "format_version": 1, "version": version, "class": "RankRLS"}).encode())
        try:
            return sr.load(url)
        finally:
            fs.rm(url[len("memory://"):], recursive=True)

    return {"local": local, "remote": remote}


def _refused_everywhere(path, monkeypatch, *patterns, remote=True):
    for how, load in _loads(path, monkeypatch).items():
        if how == "remote" and not remote:
            continue
        with pytest.raises(ModelFormatError) as err:
            load()
        for pat in patterns:
            assert pat in str(err.value), (how, str(err.value))


# ------------------------------------------------------------------ documents edited to read bytes otherwise
def _endian(d):
    d["codecs"][0]["configuration"]["endian"] = "big"


def _transpose(d):
    d["codecs"].insert(0, {"name": "transpose", "configuration": {"order": [1, 0]}})


def _gzip(d):
    d["codecs"][1] = {"name": "gzip", "configuration": {"level": 1}}


def _separator(d):
    d["chunk_key_encoding"]["configuration"]["separator"] = "."


EDITS = {
    "endian big": ("coef_", _endian, ["coef_/zarr.json", "the bytes codec's endian is 'big'", "writes 'little'"]),
    "transpose codec": ("G", _transpose, ["G/zarr.json", "codecs is ['transpose', 'bytes', 'zstd', 'crc32c']",
                                          "writes ['bytes', 'zstd', 'crc32c']"]),
    "other compressor": ("coef_", _gzip, ["coef_/zarr.json", "codecs is ['bytes', 'gzip', 'crc32c']"]),
    "dot separator": ("G", _separator, ["G/zarr.json", "chunk_key_encoding is", "'separator': '.'"]),
    "fill value": ("zeros", lambda d: d.update(fill_value=1.5), ["zeros/zarr.json", "fill_value is 1.5"]),
    "sharding": ("coef_", lambda d: d.update(codecs=[{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [3], "codecs": d["codecs"], "index_codecs": [{"name": "bytes", "configuration": {
            "endian": "little"}}, {"name": "crc32c"}]}}]), ["coef_/zarr.json", "codecs is ['sharding_indexed']"]),
}


@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "saved-before-the-record"])
def test_a_document_edited_to_read_the_bytes_otherwise_is_refused_on_every_path(edit, recorded, tmp_path,
                                                                                monkeypatch):
    """The edit leaves every CRC valid; zarr read byte-swapped / transposed values or zeros before."""
    name, change, patterns = EDITS[edit]
    _save(tmp_path / "m")
    if not recorded:
        _root_attrs(tmp_path / "m", lambda a: a.pop(_model_record.SAVED_ARRAYS))
    _edit_doc(tmp_path / "m", name, change)
    _refused_everywhere(tmp_path / "m", monkeypatch, f"array {name!r} is missing or damaged", *patterns)


@pytest.mark.parametrize("edit,new", [("data_type", "int64"), ("shape", [5]), ("chunk_grid", [3])])
def test_a_dtype_or_shape_edit_of_a_recorded_model_is_refused_on_every_path(edit, new, tmp_path, monkeypatch):
    """float64 -> int64 (same item size) and a smaller shape keep the local layout and every CRC valid: the
    record names what sr.save wrote."""
    _save(tmp_path / "m")

    def change(d):
        if edit == "chunk_grid":
            d["shape"] = d["chunk_grid"]["configuration"]["chunk_shape"] = new
        else:
            d[edit] = new
    _edit_doc(tmp_path / "m", "coef_", change)
    want = {"data_type": "declares data type 'int64', but sr.save wrote 'float64'",
            "shape": "declares shape [5], but sr.save wrote [6]",
            "chunk_grid": "declares shape [3], but sr.save wrote [6]"}[edit]
    _refused_everywhere(tmp_path / "m", monkeypatch, "array 'coef_' is missing or damaged: coef_/zarr.json " + want)


# ------------------------------------------------------------------ chunk files deleted, swapped, copied
def _chunk(path: Path, name: str, key: str = "c/0") -> Path:
    return path.joinpath(*name.split("/"), *key.split("/"))


def _swap(a: Path, b: Path):
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)


def test_a_deleted_chunk_is_refused_on_every_path_naming_the_array_and_chunk(tmp_path, monkeypatch):
    _save(tmp_path / "m", monkeypatch=monkeypatch)
    _chunk(tmp_path / "m", "W/indices", "c/1").unlink()
    _refused_everywhere(tmp_path / "m", monkeypatch, "array 'W' is missing or damaged: chunk file W/indices/c/1 "
                        "is missing: sr.save wrote it", remote=False)
    # at a URL the listing already misses it (the remote loader refuses any missing chunk)
    with pytest.raises(ModelFormatError, match="chunk W/indices/c/1 is missing"):
        _loads(tmp_path / "m", monkeypatch)["remote"]()


def test_a_deleted_all_zero_chunk_is_refused_too(tmp_path, monkeypatch):
    """Every chunk is written, zeros too: with the record, a missing one is damage, never zeros."""
    _save(tmp_path / "m")
    _chunk(tmp_path / "m", "zeros").unlink()
    _refused_everywhere(tmp_path / "m", monkeypatch, "chunk file zeros/c/0 is missing", remote=False)


@pytest.mark.parametrize("case", ["two arrays", "within an array", "from another model", "one entry, another model"])
def test_a_swapped_or_copied_chunk_is_refused_on_every_path(case, tmp_path, monkeypatch):
    """Each chunk keeps a valid CRC-32C and decodes to the right size: only the record tells."""
    m = tmp_path / "m"
    _save(m, monkeypatch=monkeypatch)
    _save(tmp_path / "other", seed=1, monkeypatch=monkeypatch)
    name, key = {"two arrays": ("coef_", "c/0"), "within an array": ("W/data", "c/0"),
                 "from another model": ("G", "c/0/0"), "one entry, another model": ("scalar", "c/0")}[case]
    if case == "two arrays":             # float64 and int64 chunks of 6 entries: both decode
        _swap(_chunk(m, "coef_"), _chunk(m, "counts"))
    elif case == "within an array":
        _swap(_chunk(m, "W/data", "c/0"), _chunk(m, "W/data", "c/1"))
    else:
        shutil.copyfile(_chunk(tmp_path / "other", name, key), _chunk(m, name, key))
    _refused_everywhere(m, monkeypatch, f"chunk file {name}/{key} is not the one sr.save wrote there",
                        "CRC-32C trailer")


def test_the_damaged_chunk_is_named_after_its_own_checks(tmp_path, monkeypatch):
    """A chunk whose own CRC-32C fails says so (zarr's message), before the record is consulted."""
    _save(tmp_path / "m")
    f = _chunk(tmp_path / "m", "coef_")
    b = bytearray(f.read_bytes())
    b[len(b) // 2] ^= 1
    f.write_bytes(bytes(b))
    _refused_everywhere(tmp_path / "m", monkeypatch, "array 'coef_'", "checksum do not match")


# ------------------------------------------------------------------ the record itself, and the listing
@pytest.mark.parametrize("value", [None, [], {"coef_": 3}, {"coef_": {"data_type": "float64"}}, {"../x": {}},
                                   "saved"])
def test_a_damaged_record_is_refused(value, tmp_path, monkeypatch):
    _save(tmp_path / "m")
    _root_attrs(tmp_path / "m", lambda a: a.update({_model_record.SAVED_ARRAYS: value}))
    _refused_everywhere(tmp_path / "m", monkeypatch, "'saved_arrays'")


def test_a_record_whose_chunk_keys_are_not_the_grid_is_refused(tmp_path, monkeypatch):
    _save(tmp_path / "m")

    def change(a):
        crcs = a[_model_record.SAVED_ARRAYS]["G"]["chunk_crc32c"]
        crcs["c/1/0"] = crcs.pop("c/0/0")
    _root_attrs(tmp_path / "m", change)
    _refused_everywhere(tmp_path / "m", monkeypatch, "the 'saved_arrays' attribute is damaged")


def test_an_array_dropped_from_the_listing_or_added_is_refused(tmp_path, monkeypatch):
    _save(tmp_path / "m")
    _root_attrs(tmp_path / "m", lambda a: a["arrays"].remove("zeros"))
    _refused_everywhere(tmp_path / "m", monkeypatch, "record names ['zeros'], which the 'arrays' attribute does "
                        "not list")
    _save(tmp_path / "n")
    _root_attrs(tmp_path / "n", lambda a: a[_model_record.SAVED_ARRAYS].pop("zeros"))
    _refused_everywhere(tmp_path / "n", monkeypatch, "array 'zeros' is missing or damaged: it holds the arrays "
                        "['zeros'], but sr.save wrote []")


# ------------------------------------------------------------------ what keeps loading
def test_the_record_is_a_root_attribute_of_format_version_1_written_alike_by_both_writers(tmp_path, monkeypatch):
    """Older readers ignore unknown root attributes: the format version stays; zarr's writer (URLs, dtypes the
    local writer does not take) records the same trailers, read back from its store."""
    _save(tmp_path / "m", monkeypatch=monkeypatch)
    attrs = json.loads((tmp_path / "m" / "zarr.json").read_text())["attributes"]
    assert MODEL_FORMAT_VERSION == 1 and attrs["format_version"] == 1
    record = attrs[_model_record.SAVED_ARRAYS]
    assert sorted(record) == sorted(["coef_", "counts", "G", "zeros", "scalar", "W/indptr", "W/indices", "W/data"])
    assert list(attrs)[list(attrs).index("arrays") + 1] == _model_record.SAVED_ARRAYS
    for label, entry in record.items():
        files = sorted(p for p in (tmp_path / "m").joinpath(*label.split("/"), "c").rglob("*") if p.is_file())
        assert [int.from_bytes(p.read_bytes()[-4:], "little") for p in files] == \
            [entry["chunk_crc32c"][p.relative_to(tmp_path / "m" / label).as_posix()] for p in files]
    assert len(record["W/indices"]["chunk_crc32c"]) > 1 and record["scalar"]["chunk_crc32c"].keys() == {"c/0"}


def test_a_model_saved_before_the_record_loads_as_before_missing_zero_chunks_included(tmp_path, monkeypatch):
    """No record: nothing to compare with, so a missing chunk reads as zeros (models that lack their all-zero
    chunks), on every path."""
    m = _save(tmp_path / "m")
    _root_attrs(tmp_path / "m", lambda a: a.pop(_model_record.SAVED_ARRAYS))
    _chunk(tmp_path / "m", "zeros").unlink()
    for how, load in _loads(tmp_path / "m", monkeypatch).items():
        if how != "remote":                 # (the remote loader refuses any missing chunk, as before)
            _same(load(), m)


def _save_like_the_first_version(model, path):
    """What sr.save wrote before 0562659: zarr's default codecs (bytes -> zstd, no CRC-32C), no all-zero chunk,
    no record."""
    import zarr

    attrs, arrays = model._get_state()
    root = zarr.open_group(str(path), mode="w")
    for name, a in arrays.items():
        if sp.issparse(a):
            g = root.create_group(name)
            g.attrs.update(shape=list(a.shape), format="csr")
            for part in ("indptr", "indices", "data"):
                arr = getattr(a, part)
                g.create_array(part, shape=arr.shape, dtype=arr.dtype, chunks=(max(1, arr.size),))[...] = arr
        else:
            arr = np.ascontiguousarray(np.asarray(a))
            root.create_array(name, shape=arr.shape, dtype=arr.dtype, chunks=tuple(max(1, s) for s in arr.shape))[
                ...] = arr
    root.attrs.update({"streamrank": "model", "format_version": 1, "class": type(model).__name__,
                       "params": model.get_params(), "state": attrs, "arrays": sorted(arrays)})


def test_a_model_of_the_first_layout_loads_on_every_path(tmp_path, monkeypatch):
    m = _RecordProbe(seed=2).fit()
    _save_like_the_first_version(m, tmp_path / "m")
    assert not _chunk(tmp_path / "m", "zeros").exists()
    assert json.loads((tmp_path / "m" / "coef_" / "zarr.json").read_text())["codecs"][-1]["name"] == "zstd"
    for how, load in _loads(tmp_path / "m", monkeypatch).items():
        if how != "remote":
            _same(load(), m)


# ------------------------------------------------------------------ fuzz: damage to chunk files and documents
_OPS = st.sampled_from(["delete", "swap", "copy", "endian", "dtype", "separator"])


@settings(max_examples=40, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(st.tuples(_OPS, st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=3))
def test_damage_to_chunk_files_and_documents_gives_an_error_or_the_saved_model(tmp_path_factory, ops):
    """Any sequence of deletions, swaps, copies from another model and interpretation edits: a ModelFormatError,
    or (a swap or copy of identical bytes) exactly the saved model -- never other values."""
    base = tmp_path_factory.mktemp("dmg")
    m = _RecordProbe(seed=0).fit()
    sr.save(m, base / "m")
    sr.save(_RecordProbe(seed=1).fit(), base / "o")
    chunks = sorted(p.relative_to(base / "m") for p in (base / "m").rglob("*")
                    if p.is_file() and p.name != "zarr.json")
    docs = sorted(p.relative_to(base / "m") for p in (base / "m").rglob("zarr.json") if p.parent != base / "m"
                  and json.loads(p.read_text())["node_type"] == "array")
    for op, i, j in ops:
        a, b = base / "m" / chunks[i % len(chunks)], base / "m" / chunks[j % len(chunks)]
        doc = base / "m" / docs[i % len(docs)]
        if op == "delete" and a.exists():
            a.unlink()
        elif op == "swap" and a.exists() and b.exists():
            _swap(a, b)
        elif op == "copy" and (base / "o" / chunks[j % len(chunks)]).exists():
            shutil.copyfile(base / "o" / chunks[j % len(chunks)], a)
        elif op in ("endian", "dtype", "separator"):
            d = json.loads(doc.read_text())
            if op == "endian" and d["data_type"] not in ("int8", "uint8", "bool"):
                _endian(d)
            elif op == "dtype":
                d["data_type"] = {"float64": "int64", "int64": "uint64", "int32": "float32"}.get(d["data_type"],
                                                                                                 d["data_type"])
            else:
                _separator(d)
            doc.write_text(json.dumps(d))
    try:
        got = sr.load(base / "m")
    except ModelFormatError as exc:
        assert "is missing or damaged" in str(exc) or "saved_arrays" in str(exc), str(exc)
        return
    _same(got, m)


def test_a_model_rewritten_as_zarr_v2_is_refused(tmp_path, monkeypatch):
    """streamrank never wrote zarr v2: its ``order``, filters and compressor would read the bytes otherwise."""
    import zarr

    m = _RecordProbe().fit()
    root = zarr.open_group(str(tmp_path / "m"), mode="w", zarr_format=2)
    root.create_array("coef_", shape=(6,), dtype="<f8", chunks=(6,), order="F")[...] = m.arrays_["coef_"]
    root.attrs.update({"streamrank": "model", "format_version": 1, "class": "_RecordProbe",
                       "params": {"seed": 0}, "state": {}, "arrays": ["coef_"]})
    _refused_everywhere(tmp_path / "m", monkeypatch, "array 'coef_' is missing or damaged: coef_/.zarray: "
                        "zarr_format is 2, but streamrank writes 3", remote=False)
