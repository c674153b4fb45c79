"""ChunkFileDecoder: whole chunks decoded from their files equal zarr's reads; other layouts are left to zarr."""
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamrank as sr
import streamrank.io.group_store as gs
from streamrank.io._chunk_files import ChunkFileDecoder
from streamrank.io._row_chunks import RowChunkReader
from streamrank.io.schema import StoreFormatError


@pytest.fixture
def store_path(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2500, 3)).astype(np.float32)
    X[1000:2000] = 0.0                                  # an all-zero chunk: zarr writes no file for it
    y = rng.standard_normal(2500)
    s = sr.GroupStore.create(tmp_path / "s", n_features=3, chunk_rows=1000)
    s.append(X, y, np.repeat(np.arange(250), 10))
    _as_previous_version(tmp_path / "s")
    return tmp_path / "s"


def _as_previous_version(path):
    """Stores now write every chunk and bind full chunks to their place; the previous version wrote
    no file for a chunk of zeros (read as the fill value) -- what these tests exercise."""
    import json

    (path / "X" / "c" / "1" / "0").unlink()
    doc = json.loads((path / "zarr.json").read_text())
    for key in ("every_chunk_written", "chunk_crc32c", "tail_crc32c"):
        doc["attributes"].pop(key)
    (path / "zarr.json").write_text(json.dumps(doc))


def test_decoded_chunks_equal_zarr_reads(store_path):
    zx = zarr.open_array(str(store_path / "X"), mode="r")
    zy = zarr.open_array(str(store_path / "y"), mode="r")
    for name, z in (("X", zx), ("y", zy)):
        dec = ChunkFileDecoder.for_array(store_path, name)
        assert dec is not None and dec.chunk_shape[0] == 1000 and dec.dtype == z.dtype
        for c in range(3):
            out = np.full(dec.chunk_shape, np.nan, dtype=dec.dtype)
            dec.decode(c, out)
            stop = min(c * 1000 + 1000, 2500)
            np.testing.assert_array_equal(out[: stop - c * 1000], z[c * 1000 : stop])
    assert not ChunkFileDecoder.for_array(store_path, "X").chunk_file(1).exists()   # read as the fill value


def test_decode_refuses_a_wrong_destination(store_path):
    dec = ChunkFileDecoder.for_array(store_path, "X")
    with pytest.raises(ValueError, match="C-contiguous float32"):
        dec.decode(0, np.empty((1000, 3), dtype=np.float64))
    with pytest.raises(ValueError, match="shape"):
        dec.decode(0, np.empty((999, 3), dtype=np.float32))


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "other_chunk_size", "cut_frame", "long_header",
                                    "short_frame"])
def test_damaged_chunk_file_names_the_file(store_path, damage):
    import google_crc32c
    from numcodecs import blosc

    dec = ChunkFileDecoder.for_array(store_path, "X")
    f = dec.chunk_file(0)
    b = bytearray(f.read_bytes())
    if damage == "flip":
        b[40:48] = bytes(x ^ 0xFF for x in b[40:48])
    elif damage == "truncate":
        b = b[: len(b) // 2]
    elif damage == "empty":
        b = bytearray()
    elif damage == "other_chunk_size":                  # a valid blosc frame of the wrong size, valid CRC
        payload = blosc.compress(np.zeros(10, np.float32).tobytes(), b"lz4", 5, blosc.SHUFFLE)
        b = bytearray(payload + np.uint32(google_crc32c.value(payload)).tobytes())
    else:      # crafted with a valid CRC: a frame cut short, a header claiming more bytes, less than a header
        payload = bytes(b[:-4])
        if damage == "cut_frame":
            payload = payload[: len(payload) // 2]
        elif damage == "long_header":
            payload = payload[:12] + (len(payload) + 4096).to_bytes(4, "little") + payload[16:]
        else:
            payload = payload[:12]
        b = bytearray(payload + np.uint32(google_crc32c.value(payload)).tobytes())
    f.write_bytes(bytes(b))
    with pytest.raises(StoreFormatError, match=str(f)):
        dec.decode(0, np.empty(dec.chunk_shape, dtype=dec.dtype))


def _array(tmp_path, **kw):
    args = dict(shape=(100, 3), chunks=(10, 3), dtype="float32")
    args.update(kw)
    z = zarr.create_array(str(tmp_path / "a"), **args)
    z[:] = 1.0
    return tmp_path


@pytest.mark.parametrize("kw", [
    dict(compressors=[zarr.codecs.ZstdCodec()]),                                    # another codec
    dict(compressors=[zarr.codecs.BloscCodec(cname="lz4")]),                         # no checksum
    dict(chunks=(10, 2)),                                                           # columns in pieces
    dict(chunk_key_encoding={"name": "default", "separator": "."}),                 # other chunk keys
    dict(shards=(20, 3)),                                                           # sharded
    dict(dtype="int16"),                                                            # a dtype we never write
    dict(serializer=zarr.codecs.BytesCodec(endian="big"),
         compressors=[zarr.codecs.BloscCodec(cname="lz4"), zarr.codecs.Crc32cCodec()]),   # big-endian
])
def test_other_layouts_stay_with_zarr(tmp_path, kw):
    assert ChunkFileDecoder.for_array(_array(tmp_path, **kw), "a") is None


def test_our_layout_is_recognised_outside_a_group_store(tmp_path):
    from streamrank.io.schema import compressors

    path = _array(tmp_path, compressors=compressors(4))
    assert ChunkFileDecoder.for_array(path, "a") is not None
    assert ChunkFileDecoder.for_array(tmp_path, "missing") is None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(0, 2500), max_size=10), n_rows=st.integers(1, 2500))
def test_row_reader_with_the_decoder_equals_zarr(store_path, cuts, n_rows):
    bounds = sorted({0, n_rows, *(c for c in cuts if c <= n_rows)})
    for name in ("X", "y"):
        z = zarr.open_array(str(store_path / name), mode="r")
        reader = RowChunkReader(z, decoder=ChunkFileDecoder.for_array(store_path, name))
        got = np.concatenate([reader.read(a, b, n_rows) for a, b in zip(bounds[:-1], bounds[1:])])
        np.testing.assert_array_equal(got, z[:n_rows])
        for a, b in zip(bounds[::-1][1:], bounds[::-1][:-1]):          # backwards: no cache help
            np.testing.assert_array_equal(reader.read(a, b, n_rows), z[a:b])


@pytest.mark.parametrize("sparse", [False, True])
def test_group_store_blocks_are_the_same_either_way(store_path, tmp_path, monkeypatch, sparse):
    import scipy.sparse as sps

    if sparse:                                           # CSR: indptr, indices, data through the decoder too
        rng = np.random.default_rng(1)
        X = sps.random(3000, 40, density=0.1, random_state=rng, format="lil", dtype=np.float32)
        X[100:400] = 0.0                                 # empty rows
        store_path = tmp_path / "csr"
        s = sr.GroupStore.create(store_path, n_features=40, sparse=True)
        s.append(sps.csr_matrix(X), rng.standard_normal(3000), np.repeat(np.arange(300), 10))

    def blocks():
        s = sr.GroupStore.open(store_path)
        return [(b.X, b.y) for b in s.blocks(max_rows=330)]

    fast = blocks()
    readers = sr.GroupStore.open(store_path)._csr_rows if sparse else [sr.GroupStore.open(store_path)._X_rows]
    assert all(r._decoder is not None for r in readers)
    monkeypatch.setattr(gs, "_DECODE_CHUNK_FILES", False)
    assert sr.GroupStore.open(store_path)._y_rows._decoder is None
    slow = blocks()
    assert len(fast) == len(slow) > 5
    for (X1, y1), (X2, y2) in zip(fast, slow):
        if sparse:
            X1, X2 = X1.toarray(), X2.toarray()
        np.testing.assert_array_equal(X1, X2)
        np.testing.assert_array_equal(y1, y2)


def test_corrupt_indptr_is_named(tmp_path):
    import scipy.sparse as sps

    s = sr.GroupStore.create(tmp_path / "csr", n_features=5, sparse=True)
    s.append(sps.csr_matrix(np.eye(20, 5, dtype=np.float32)), np.arange(20.0), np.repeat(np.arange(4), 5))
    z = zarr.open_array(str(tmp_path / "csr" / "X" / "indptr"), mode="r+")
    z[3] = 10 ** 6                                       # past the committed nonzeros (CRC stays valid)
    with pytest.raises(StoreFormatError, match="X/indptr"):
        [b for b in sr.GroupStore.open(tmp_path / "csr").blocks(max_rows=10)]


def test_the_decoder_checks_every_decoded_chunk_once_on_its_committed_rows(store_path):
    """The value check runs inside the decode call, on the chunk's committed rows only (not past n_rows),
    once per chunk whatever the block cutting (a cached chunk is not checked again)."""
    seen = []
    z = zarr.open_array(str(store_path / "y"), mode="r")
    reader = RowChunkReader(z, decoder=ChunkFileDecoder.for_array(store_path, "y"),
                            check=lambda r0, rows: seen.append((r0, len(rows))))
    for a, b in [(0, 700), (700, 1500), (1500, 2300)]:
        np.testing.assert_array_equal(reader.read(a, b, 2300), z[a:b])
    assert seen == [(0, 1000), (1000, 1000), (2000, 300)]


def test_a_bad_value_in_a_decoded_chunk_is_an_error_even_outside_the_rows_asked_for(store_path):
    z = zarr.open_array(str(store_path / "y"), mode="r")

    def check(r0, rows):
        bad = np.flatnonzero(rows > 1e300)
        if bad.size:
            raise StoreFormatError(f"row {r0 + int(bad[0])}")

    zarr.open_array(str(store_path / "y"), mode="r+")[950] = 1e308
    reader = RowChunkReader(z, decoder=ChunkFileDecoder.for_array(store_path, "y"), check=check)
    with pytest.raises(StoreFormatError, match="row 950"):
        reader.read(0, 10, 2500)
