"""One conformance class, run on every block source.

``BlockSourceContract`` states what ``source.blocks(...)`` promises whatever
the backend; each subclass only says how to build a source from ``(X, y,
qid)``: zarr dense, zarr CSR (both written in several appends), numpy,
scipy.sparse, dask.
"""
from __future__ import annotations

import contextlib
import shutil
import tempfile
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamrank as sr
from streamrank.io.blocks import OversizedGroupWarning, vstack_X

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.differing_executors])  # subclasses only change the backend


def make_data(seed, sizes, n_features=3, n_outputs=1, density=0.5):
    rng = np.random.default_rng(seed)
    sizes = np.asarray(sizes, dtype=np.int64)
    ids = rng.permutation(max(1, 4 * len(sizes)))[: len(sizes)] + 1  # distinct, unsorted
    qid = np.repeat(ids, sizes).astype(np.int64)
    m = int(sizes.sum())
    X = rng.normal(size=(m, n_features)).astype(np.float32)
    X[rng.random((m, n_features)) > density] = 0
    y = rng.integers(0, 5, m).astype(float) if n_outputs == 1 else rng.normal(size=(m, n_outputs))
    return X, y, qid


def _dense(X):
    return X.toarray() if sp.issparse(X) else np.asarray(X)


def _property_tests(max_examples):
    """The hypothesis tests of the contract, with a per-backend example budget."""
    cfg = settings(SETTINGS, max_examples=max_examples)

    @cfg
    @given(seed=st.integers(0, 1000), sizes=st.lists(st.integers(1, 12), min_size=0, max_size=12),
           max_rows=st.integers(1, 40), shuffle=st.booleans())
    def test_every_row_once_groups_whole(self, seed, sizes, max_rows, shuffle):
        self.prop_every_row_once_groups_whole(seed, sizes, max_rows, shuffle)

    @cfg
    @given(seed=st.integers(0, 1000), sizes=st.lists(st.integers(1, 20), min_size=1, max_size=5),
           max_rows=st.integers(2, 12))
    def test_split_groups_pieces_stitch_back(self, seed, sizes, max_rows):
        self.prop_split_groups_pieces_stitch_back(seed, sizes, max_rows)

    return test_every_row_once_groups_whole, test_split_groups_pieces_stitch_back


class BlockSourceContract:
    """Checks every BlockSource must pass.  Subclasses implement :meth:`source`."""

    sparse_input = False

    @contextlib.contextmanager
    def source(self, X, y, qid):  # pragma: no cover - abstract
        raise NotImplementedError
        yield

    def prepare_X(self, X):
        return sp.csr_matrix(X) if self.sparse_input else X

    # ----------------------------------------------------------- helpers
    def collect(self, src, **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OversizedGroupWarning)
            return list(src.blocks(**kw))

    def check_cover(self, blocks, X, y, qid, max_rows):
        """Every row exactly once, groups whole, rows aligned with X, y, qid."""
        blocks = sorted(blocks, key=lambda b: b.start)
        pos = 0
        seen_qid = []
        for b in blocks:
            assert b.start == pos
            assert b.group_ptr[0] == 0 and b.group_ptr[-1] == b.n_rows
            assert np.all(np.diff(b.group_ptr) > 0)
            np.testing.assert_array_equal(b.group_size, np.diff(b.group_ptr))  # never split
            np.testing.assert_array_equal(b.group_offset, 0)
            assert b.n_rows <= max_rows or b.n_groups == 1
            assert b.X.shape == (b.n_rows, X.shape[1])
            assert b.y.dtype == np.float64 and b.y.shape[1:] == y.shape[1:]
            np.testing.assert_array_equal(_dense(b.X), _dense(X[pos : b.stop]))
            np.testing.assert_array_equal(b.y, y[pos : b.stop])
            np.testing.assert_array_equal(b.row_qid(), qid[pos : b.stop])
            seen_qid.extend(b.qid.tolist())
            pos = b.stop
        assert pos == len(y)
        assert len(seen_qid) == len(set(seen_qid))  # a group appears in one block only

    # ------------------------------------------------------------- tests
    def prop_every_row_once_groups_whole(self, seed, sizes, max_rows, shuffle):
        X, y, q = make_data(seed, sizes)
        with self.source(self.prepare_X(X), y, q) as src:
            assert (src.n_rows, src.n_groups, src.n_features) == (len(y), len(sizes), 3)
            assert src.n_outputs == 1 and src.sparse == (self.sparse_input or src.sparse)
            blocks = self.collect(src, max_rows=max_rows, shuffle=shuffle, random_state=seed)
            self.check_cover(blocks, X, y, q, max_rows)
            np.testing.assert_array_equal(src.group_ptr, np.r_[0, np.cumsum(sizes)])

    def prop_split_groups_pieces_stitch_back(self, seed, sizes, max_rows):
        X, y, q = make_data(seed, sizes)
        with self.source(self.prepare_X(X), y, q) as src:
            blocks = self.collect(src, max_rows=max_rows, split_groups=True)
        assert all(b.n_rows <= max_rows for b in blocks)
        np.testing.assert_array_equal(_dense(vstack_X([b.X for b in blocks])), X)
        np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]), y)
        # pieces of one group come in order and their offsets/sizes describe the whole group
        for b in blocks:
            if b.is_split:
                assert b.n_groups == 1
                g = b.group_start
                assert b.group_size[0] == sizes[g]
                assert b.start == int(np.sum(sizes[:g])) + b.group_offset[0]
                np.testing.assert_array_equal(b.qid, q[b.start : b.start + 1])

    test_every_row_once_groups_whole, test_split_groups_pieces_stitch_back = _property_tests(25)

    def test_shuffle_is_reproducible_permutation(self):
        X, y, q = make_data(0, [3, 1, 4, 1, 5, 2, 6, 2, 3, 1, 2, 2])
        with self.source(self.prepare_X(X), y, q) as src:
            plain = [b.start for b in self.collect(src, max_rows=4)]
            a = [b.start for b in self.collect(src, max_rows=4, shuffle=True, random_state=1)]
            b = [b.start for b in self.collect(src, max_rows=4, shuffle=True, random_state=1)]
            c = [b.start for b in self.collect(src, max_rows=4, shuffle=True, random_state=2)]
        assert a == b and sorted(a) == plain and a != plain and (a != c)

    def test_oversized_group_warns(self):
        X, y, q = make_data(1, [2, 9, 3])
        with self.source(self.prepare_X(X), y, q) as src:
            with pytest.warns(OversizedGroupWarning, match="largest: 9 rows"):
                blocks = list(src.blocks(max_rows=5))
            assert [b.n_rows for b in blocks] == [2, 9, 3]
            with warnings.catch_warnings():
                warnings.simplefilter("error", OversizedGroupWarning)
                list(src.blocks(max_rows=9))

    def test_prefetch_on_off_identical(self):
        X, y, q = make_data(2, [4, 2, 7, 1, 3, 3, 5])
        with self.source(self.prepare_X(X), y, q) as src:
            for kw in (dict(), dict(shuffle=True, random_state=3)):
                on = self.collect(src, max_rows=6, prefetch=True, **kw)
                off = self.collect(src, max_rows=6, prefetch=False, **kw)
                assert [b.start for b in on] == [b.start for b in off]
                for u, v in zip(on, off):
                    np.testing.assert_array_equal(_dense(u.X), _dense(v.X))
                    np.testing.assert_array_equal(u.y, v.y)
                    np.testing.assert_array_equal(u.qid, v.qid)

    def test_consumer_stops_early(self):
        X, y, q = make_data(2, [4] * 20)
        with self.source(self.prepare_X(X), y, q) as src:
            it = src.blocks(max_rows=4)
            first = next(it)
            it.close()
            assert first.n_rows == 4

    def test_multi_output(self):
        X, y, q = make_data(3, [2, 5, 1, 4], n_outputs=3)
        with self.source(self.prepare_X(X), y, q) as src:
            assert src.n_outputs == 3
            self.check_cover(self.collect(src, max_rows=5), X, y, q, 5)

    def test_one_global_group(self):
        X, y, _ = make_data(4, [11])
        with self.source(self.prepare_X(X), y, None) as src:
            assert src.n_groups == 1
            with pytest.warns(OversizedGroupWarning):
                (b,) = list(src.blocks(max_rows=4))
            assert b.n_rows == 11 and b.n_groups == 1
            pieces = list(src.blocks(max_rows=4, split_groups=True))
            assert [p.n_rows for p in pieces] == [4, 4, 3]
            assert [int(p.group_offset[0]) for p in pieces] == [0, 4, 8]
            assert all(p.group_size[0] == 11 for p in pieces)

    def test_read_y_matches_blocks(self):
        X, y, q = make_data(5, [3, 3, 2])
        with self.source(self.prepare_X(X), y, q) as src:
            np.testing.assert_array_equal(src.read_y(2, 7), y[2:7])

    def test_read_only_buffers_are_fine(self):
        """Consumers may not write into blocks; the source hands out valid arrays either way."""
        X, y, q = make_data(6, [3, 4])
        with self.source(self.prepare_X(X), y, q) as src:
            for b in src.blocks(max_rows=10):
                assert np.isfinite(_dense(b.X)).all()


class _ZarrContract(BlockSourceContract):
    # each example writes a real store: fewer examples keep the suite fast
    test_every_row_once_groups_whole, test_split_groups_pieces_stitch_back = _property_tests(12)
    @contextlib.contextmanager
    def source(self, X, y, qid):
        d = tempfile.mkdtemp(prefix="sr-contract-")
        try:
            path = f"{d}/s.zarr"
            n_out = 1 if y.ndim == 1 else y.shape[1]
            store = sr.GroupStore.create(path, X.shape[1], sparse=sp.issparse(X), n_outputs=n_out,
                                         chunk_rows=5)
            q = np.zeros(len(y), dtype=np.int64) if qid is None else qid
            # two appends cut at a group boundary (many appends: test_group_store.py)
            starts = np.r_[0, np.flatnonzero(np.diff(q)) + 1] if len(q) else np.zeros(1, int)
            cuts = [0, int(starts[len(starts) // 2]), len(q)]
            for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
                if b > a:
                    store.append(X[a:b], y[a:b], q[a:b], batch_id=f"part-{i}")
            yield sr.GroupStore.open(path)
        finally:
            shutil.rmtree(d, ignore_errors=True)


class TestZarrDense(_ZarrContract):
    # each example writes a store (4.8 and 3.5 s wall under load 11); the quick loop keeps TestNumpy's and
    # TestScipySparse's, the deterministic checks of the contract here, and test_group_store's store cuttings
    test_every_row_once_groups_whole, test_split_groups_pieces_stitch_back = (
        pytest.mark.slow(t) for t in _property_tests(12))


class TestZarrCSR(_ZarrContract):
    sparse_input = True
    # each example writes a CSR store (~4 CPU-s each); the quick loop keeps TestZarrDense's and the checks below
    test_every_row_once_groups_whole, test_split_groups_pieces_stitch_back = (
        pytest.mark.slow(t) for t in _property_tests(12))

    def test_nnz_budget(self):
        X, y, q = make_data(7, [3, 5, 2, 6, 1, 4], density=0.6)
        with self.source(sp.csr_matrix(X), y, q) as src:
            blocks = self.collect(src, max_rows=100, max_nnz=8)
            self.check_cover(blocks, X, y, q, 100)
            assert all(b.X.nnz <= 8 or b.n_groups == 1 for b in blocks)
            assert len(blocks) > 1


class TestNumpy(BlockSourceContract):
    @contextlib.contextmanager
    def source(self, X, y, qid):
        yield sr.as_source(X, y, qid)


class TestScipySparse(TestNumpy):
    sparse_input = True


class TestDask(BlockSourceContract):
    # dask graphs per example (~1 CPU-s); the quick loop keeps TestNumpy's and the checks of the contract
    test_every_row_once_groups_whole, test_split_groups_pieces_stitch_back = (
        pytest.mark.slow(t) for t in _property_tests(25))

    @contextlib.contextmanager
    def source(self, X, y, qid):
        import dask.array as da

        chunks = (max(1, X.shape[0] // 3 or 1), X.shape[1])
        Xd = da.from_array(X, chunks=chunks)
        qd = None if qid is None else da.from_array(qid, chunks=chunks[0])
        yield sr.as_source(Xd, da.from_array(y, chunks=(chunks[0],) + y.shape[1:]), qd)
