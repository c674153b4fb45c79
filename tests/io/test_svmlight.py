"""svmlight/LETOR parser: against scikit-learn's reader, chunking, errors with file:line."""
from __future__ import annotations

import gzip
import io
import tarfile

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from streamrank.io import _svmlight_kernels as K
from streamrank.io.svmlight import iter_svmlight, read_svmlight


def _write_random(rng, n_rows=40, n_features=7, qid=True, crlf=False, extras=True):
    lines = []
    q = 1
    for r in range(n_rows):
        if rng.random() < 0.3:
            q += int(rng.integers(1, 5))
        cols = np.flatnonzero(rng.random(n_features) < 0.6)
        label = rng.integers(0, 5) if rng.random() < 0.8 else rng.normal()
        parts = [repr(float(label)) if isinstance(label, float) else str(label)]
        if qid:
            parts.append(f"qid:{q}")
        for c in cols:
            v = rng.choice([rng.normal(), float(rng.integers(-3, 4)), rng.normal() * 1e-7, rng.normal() * 1e12])
            fmt = rng.choice(["%.6f", "%r", "%g", "%.3e"])
            parts.append(f"{c + 1}:" + (fmt % v if fmt != "%r" else repr(float(v))))
        line = " ".join(parts)
        if extras and rng.random() < 0.3:
            line += "  # docid = X-%d inc = 0.0119881192468859" % r
        lines.append(line)
        if extras and rng.random() < 0.1:
            lines.append(rng.choice(["", "# a comment line", "   "]))
    nl = "\r\n" if crlf else "\n"
    return (nl.join(lines) + nl).encode()


def _sklearn(data, n_features, qid=True):
    from sklearn.datasets import load_svmlight_file

    out = load_svmlight_file(io.BytesIO(data), n_features=n_features, query_id=qid, dtype=np.float64)
    return out


# 25 examples against scikit-learn's parser (importing sklearn.datasets: ~2 CPU-s): 3.3 s wall under load 15;
# the quick loop keeps test_text_line_ends' comparison with it and the fixed cases here
@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), chunk=st.integers(1, 400), crlf=st.booleans(), qid=st.booleans(),
       dense=st.booleans())
def test_matches_sklearn_and_chunks_end_on_groups(seed, chunk, crlf, qid, dense):
    rng = np.random.default_rng(seed)
    data = _write_random(rng, qid=qid, crlf=crlf)
    ref = _sklearn(data, 7, qid)
    chunks = list(iter_svmlight(io.BytesIO(data), n_features=7, dense=dense, chunk_bytes=chunk))
    X = np.concatenate([c.X if dense else c.X.toarray() for c in chunks])
    np.testing.assert_array_equal(X, ref[0].toarray().astype(np.float32))
    np.testing.assert_array_equal(np.concatenate([c.y for c in chunks]), ref[1])
    if qid:
        np.testing.assert_array_equal(np.concatenate([c.qid for c in chunks]), ref[2])
        for a, b in zip(chunks, chunks[1:]):
            assert a.qid[-1] != b.qid[0]
        # bounded memory: a chunk holds the lines of about one read plus at most two queries
        biggest = int(np.max(np.unique(ref[2], return_counts=True)[1]))
        assert max(len(c.y) for c in chunks) <= (chunk + 2) // 7 + 2 * biggest + 1
    else:
        assert all(c.qid is None for c in chunks)
    for c in chunks:
        assert c.X.dtype == np.float32 and c.y.dtype == np.float64 and len(c.y) > 0
        assert sp.issparse(c.X) != dense


def test_numbers_parse_exactly():
    rng = np.random.default_rng(0)
    vals = np.concatenate([rng.normal(size=300) * 10.0 ** rng.integers(-30, 30, 300),
                           [0.0, -0.0, 1.0, 123456789012345678.0, 1e-300, 3.4e38]])
    strs = [repr(float(v)) for v in vals] + ["%.6f" % v for v in vals[:50]] + ["+3", "-.5", "5.", "1E3"]
    text = "".join(f"0 {i + 1}:{s}\n" for i, s in enumerate(strs)).encode()
    X, y, _ = read_svmlight(io.BytesIO(text))
    got = X.toarray().sum(axis=1)
    want = np.array([float(s) for s in strs], dtype=np.float32)
    np.testing.assert_array_equal(got, want)
    # float64 labels: correctly rounded on the fast path, within 2 ulp otherwise
    text = "".join(f"{s} 1:1\n" for s in strs).encode()
    _, y, _ = read_svmlight(io.BytesIO(text))
    np.testing.assert_allclose(y, [float(s) for s in strs], rtol=4.5e-16, atol=0)


def test_values_are_the_correctly_rounded_float_of_their_text():
    """Long mantissas and exponents of every size: the kernel's value is Python's (correctly rounded) float."""
    rng = np.random.default_rng(6)
    toks = [f"{rng.integers(0, 10 ** rng.integers(1, 17))}.{rng.integers(0, 10 ** 9):09d}" for _ in range(500)]
    toks += [f"{m}e{e}" for m, e in zip(rng.integers(1, 10 ** 6, 200), rng.integers(-99, 30, 200))]
    toks += ["9007199254740993", "0.30000000000000004", "1.0000000000000001e-99", "123456789012345678901234567890"]
    X, y, _ = read_svmlight(io.BytesIO("\n".join(f"1 1:{t}" for t in toks).encode()), dense=False)
    want = np.array([float(t) for t in toks])
    assert X.data.tobytes() == want[want != 0].astype(np.float32).tobytes()
    assert y.tolist() == [1.0] * len(toks)


def test_letor_line_and_inference():
    text = (b"2 qid:10032 1:0.056537 2:0.000000 3:0.666667 #docid = GX029-35-5894638 inc = 0.0119 prob = 0.13\n"
            b"0 qid:10032 1:0.279152 3:0.5\n\n0 qid:10033 2:1\r\n")
    chunks = list(iter_svmlight(io.BytesIO(text)))
    assert len(chunks) == 1
    X, y, q = chunks[0]
    assert X.shape == (3, 3) and X.dtype == np.float32
    np.testing.assert_array_equal(q, [10032, 10032, 10033])
    np.testing.assert_allclose(X[0], [0.056537, 0, 0.666667], rtol=1e-7)
    X0, _, _ = read_svmlight(io.BytesIO(b"1 0:1 4:2\n"), zero_based=True)
    assert X0.shape == (1, 5)


@pytest.mark.parametrize("line, msg", [
    (b"x qid:1 1:2", "bad label"),
    (b"1 qid:a 1:2", "bad qid"),
    (b"1 qid:1 1=2", "missing ':'"),
    (b"1 qid:1 a:2", "bad feature index"),
    (b"1 qid:1 1:2 1:3", "strictly increasing"),
    (b"1 qid:1 0:2", "out of range"),
    (b"1 qid:1 1:2 9:1", "out of range"),
    (b"1 qid:1 1:nan", "bad feature value"),
    (b"1 qid:1 1:1e999", "bad feature value"),
    (b"1 qid:1 1:NULL", "NULL"),
    (b"1 qid:1 1:1e39", "float32 range"),
    (b"1 1:2", "qid present on some lines"),
])
def test_malformed_line_names_file_and_line(line, msg):
    text = b"0 qid:1 1:1\n# comment\n\n" + line + b"\n0 qid:2 1:1\n"
    with pytest.raises(ValueError, match=f"<stream>:4: .*{msg}"):
        list(iter_svmlight(io.BytesIO(text), n_features=5, chunk_bytes=8))
    with pytest.raises(ValueError, match=msg):
        read_svmlight(io.BytesIO(text), n_features=5)


def test_null_value_and_inferred_width_error(tmp_path):
    X, _, _ = read_svmlight(io.BytesIO(b"0 qid:1 1:NULL 2:3\n"), null_value=0.0, dense=True)
    np.testing.assert_array_equal(X, [[0.0, 3.0]])
    text = b"0 qid:1 1:1\n" * 50 + b"0 qid:2 9:1\n"
    with pytest.raises(ValueError, match=r"<stream>:51: .*out of range.*exceeds the 1 features inferred.*pass n_features"):
        list(iter_svmlight(io.BytesIO(text), chunk_bytes=64))
    with pytest.raises(ValueError, match="cannot be inferred; pass n_features"):
        list(iter_svmlight(io.BytesIO(b"1 qid:1\n0 qid:2\n")))
    X, _, _ = read_svmlight(io.BytesIO(b"1 qid:1\n0 qid:2\n"), n_features=2)
    assert X.shape == (2, 2) and X.nnz == 0
    p = tmp_path / "bad.txt"
    p.write_bytes(b"0 qid:1 1:1\n1 qid:1 1:x\n")
    with pytest.raises(ValueError, match=r"bad\.txt:2: "):
        read_svmlight(p)


def test_gzip_tar_member_and_empty(tmp_path):
    rng = np.random.default_rng(2)
    data = _write_random(rng, n_rows=200)
    gz = tmp_path / "f.txt.gz"
    gz.write_bytes(gzip.compress(data))
    a = read_svmlight(gz, n_features=7)
    b = read_svmlight(io.BytesIO(data), n_features=7)
    assert (a[0] != b[0]).nnz == 0 and np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])
    tpath = tmp_path / "t.tar.gz"
    with tarfile.open(tpath, "w:gz") as tf:
        info = tarfile.TarInfo("d/train.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    with tarfile.open(tpath, "r:gz") as tf:
        c = read_svmlight(tf.extractfile("d/train.txt"), n_features=7)
    assert (c[0] != b[0]).nnz == 0
    assert list(iter_svmlight(io.BytesIO(b""))) == []
    assert list(iter_svmlight(io.BytesIO(b"# only a comment\n\n"))) == []
    X, y, q = read_svmlight(io.BytesIO(b""), n_features=3)
    assert X.shape == (0, 3) and q is None


def test_kernel_counts_and_dense_scatter():
    buf = np.frombuffer(b"1 qid:1 1:2\n0 qid:1 2:3", dtype=np.uint8)
    assert K.count_lines_colons(buf) == (1, 4)
    out = np.zeros((2, 3), np.float32)
    K.csr_to_dense(np.array([0, 1, 2]), np.array([0, 2], np.int32), np.array([2.0, 3.0], np.float32), out)
    np.testing.assert_array_equal(out, [[2, 0, 0], [0, 0, 3]])


def test_one_query_over_many_chunks_and_bom():
    rng = np.random.default_rng(9)
    lines = [f"{rng.integers(0, 3)} qid:4 1:{rng.random():.4f} 3:{rng.random():.4f}" for _ in range(500)]
    text = ("\n".join(lines) + "\n2 qid:5 2:1\n").encode()
    chunks = list(iter_svmlight(io.BytesIO(b"\xef\xbb\xbf" + text), chunk_bytes=64))
    assert sum(len(c.y) for c in chunks) == 501
    assert all(a.qid[-1] != b.qid[0] for a, b in zip(chunks, chunks[1:]))
    ref = _sklearn(text, 3)
    np.testing.assert_array_equal(np.concatenate([c.X for c in chunks]), ref[0].toarray().astype(np.float32))
    np.testing.assert_array_equal(np.concatenate([c.y for c in chunks]), ref[1])
    np.testing.assert_array_equal(np.concatenate([c.qid for c in chunks]), ref[2])
    # a query still open at the end of the file
    chunks = list(iter_svmlight(io.BytesIO(text[: text.rindex(b"2 qid:5")]), chunk_bytes=100))
    assert [len(c.y) for c in chunks] == [500]


@pytest.mark.slow   # a benchmark's smoke run, like tests/test_benchmarks_smoke.py: 1.7 s wall under load 13
def test_letor_parse_benchmark_smoke(capsys):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "letor_parse.py"
    spec = importlib.util.spec_from_file_location("_bench_letor_parse", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "sklearn load_svmlight_file (baseline)" in out and "worst speed-up" in out


@pytest.mark.parametrize("chunk", [None, 8, 4096])
@pytest.mark.parametrize("lines, odd", [
    (["1 1:1", "0 qid:3 1:2", "1 qid:3 1:1"], 1),   # only the first data line lacks qid: it is the odd one
    (["# head", "1 1:1", "0 qid:3 1:2"], 2),        # same, after a comment line
    (["0 qid:3 1:2", "1 1:1", "1 qid:3 1:1"], 2),   # a later line lacks qid: that line
    (["1 1:1", "0 1:2", "1 qid:3 1:1"], 3),         # a file without qids, one line with: that line
])
def test_qid_mismatch_names_the_odd_line(lines, odd, chunk):
    raw = ("\n".join(lines) + "\n").encode()
    with pytest.raises(ValueError, match=rf"^f\.txt:{odd}: "):
        for _ in iter_svmlight(io.BytesIO(raw), chunk_bytes=chunk, name="f.txt"):
            pass


def test_read_svmlight_dense_is_the_csr_to_array_result_bit_for_bit(tmp_path):
    """``dense=True`` no longer goes through CSR; its X is ``toarray()``'s bit for bit.

    ``-1e-50`` is stored (it is not zero) and becomes float32 -0.0, which
    ``toarray()`` turned into +0.0 (0 + v); the dense read must too.
    """
    text = ("2 qid:1 1:-1e-50 2:0.5 4:-0.0\n0 qid:1 2:-1e-45 3:3.4e38 4:1\n1 qid:2 1:1e-40 3:-2.5\n"
            "0 qid:2 1:NULL 4:-7\n")
    (tmp_path / "f.txt").write_text(text)
    for null in (float("nan"), -0.0, 0.0):
        Xd, yd, qd = read_svmlight(tmp_path / "f.txt", dense=True, null_value=null)
        Xs, ys, qs = read_svmlight(tmp_path / "f.txt", null_value=null)
        assert isinstance(Xd, np.ndarray) and Xd.dtype == np.float32 and Xd.flags.c_contiguous
        assert Xd.tobytes() == Xs.toarray().tobytes(), null
        assert yd.tobytes() == ys.tobytes() and qd.tobytes() == qs.tobytes()
    assert Xs.data[0] == 0 and np.signbit(Xs.data[0])                          # CSR keeps the -0.0 it parsed
    assert Xd[0, 0] == 0 and not np.signbit(Xd[0, 0])                           # the dense X has +0.0, as before
    (tmp_path / "empty.txt").write_text("")
    Xe, _, _ = read_svmlight(tmp_path / "empty.txt", dense=True, n_features=3)
    assert Xe.shape == (0, 3) and isinstance(Xe, np.ndarray)
