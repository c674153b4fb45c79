"""The svmlight parser's numpy fast path (:mod:`streamrank.io._svmlight_twin`) against the kernels (issue 22).

The fast path either gives ``_parse``'s result bit for bit or defers (None) to
the kernels.  So: on valid text in its grammar it must *not* defer and must
give the kernels' arrays byte for byte; on anything else (corruptions, every
error code) the public reader must raise the kernel's message or give the
kernel's arrays, whichever path ran.  tests/conftest.py forces the kernels for
the session: each side is chosen here with ``twins(True)`` / ``twins(False)``.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from streamrank._numba import twins
from streamrank.io import _svmlight_kernels as K
from streamrank.io import _svmlight_twin as T
from streamrank.io import svmlight as S
from streamrank.io.svmlight import iter_svmlight, read_svmlight

MQ2008 = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "letor",
                      "MQ2008_QueryLevelNorm.tar.gz")


def _same(a, b):
    """Equal as the kernels' outputs are compared: dtype, shape and every byte (``-0.0`` is not ``0.0``)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return type(a) is type(b) and a == b


def _parse_both(text, *, zero_based=False, n_features=None, qid_mode=-1, max_features=S.DEFAULT_MAX_FEATURES,
                first_line=1):
    """(``_parse`` by the kernels, the fast path's answer) for one buffer of whole lines."""
    with twins(False):
        ref = S._parse(text, "t", first_line, zero_based, n_features, None, qid_mode,
                       inferred=n_features is None, max_features=max_features)
    max_index = n_features - 1 if n_features is not None else (-1 if max_features is None else max_features - 1)
    return ref, T.parse(text, zero_based, max_index, qid_mode, first_line)


def _assert_same_parse(ref, got):
    assert got is not None, "the fast path deferred on text in its grammar"
    assert len(ref) == len(got)
    for i, (a, b) in enumerate(zip(ref, got)):
        assert _same(a, b), (i, a, b)


def _read(data, twin, **kw):
    """Every chunk of ``iter_svmlight`` as plain values, or the error's message."""
    try:
        with twins(twin):
            out = []
            for c in iter_svmlight(io.BytesIO(data), **kw):
                X = c.X if isinstance(c.X, np.ndarray) else c.X.toarray()
                out.append((X, c.y, c.qid, c.lines, c.n_features_seen))
            return out
    except ValueError as exc:
        return str(exc)


def _assert_same_reads(data, **kw):
    ref, got = _read(data, False, **kw), _read(data, True, **kw)
    if isinstance(ref, str) or isinstance(got, str):
        assert ref == got
        return ref
    assert len(ref) == len(got)
    for cr, cg in zip(ref, got):
        for a, b in zip(cr, cg):
            assert (a is None and b is None) or _same(a, b)
    return ref


# ---- valid text in the fast path's grammar ----------------------------------------------------------------

_INT_LABEL = st.integers(-3, 9).map(str)
_FLOAT = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e20, max_value=1e20).filter(
    lambda v: v == 0 or abs(v) >= 1e-30)     # exponents of 1-2 digits, at most 40 digits (the fast path)
_FORMATS = st.sampled_from(["%.6f", "%r", "%g", "%.3e", "%.17g", "%.1f", "%d", "%.12f"])


@st.composite
def _number(draw, zero_ok=True):
    v = draw(st.one_of(_FLOAT, st.sampled_from([0.0, -0.0, 1.0, 0.5, 1e-7, 123456789.0, 2.0 ** 53 + 2,
                                                9007199254740993.0, 1e22, 1e23, 5e-324 * 1e300])))
    fmt = draw(_FORMATS)
    text = repr(float(v)) if fmt == "%r" else (fmt % (int(v) if fmt == "%d" else v))
    if draw(st.booleans()) and "e" in text:
        text = text.replace("e", "E")
    return text


@st.composite
def _valid_file(draw):
    """(text, n_features) of a well-formed file: labels, qids or none, increasing indices, comments, blanks."""
    qid = draw(st.booleans())
    crlf = draw(st.booleans())
    n_feat = draw(st.integers(1, 30))
    n_rows = draw(st.integers(0, 25))
    q = draw(st.integers(0, 10 ** 6))
    lines = []
    for _ in range(n_rows):
        if draw(st.integers(0, 9)) < 2:
            lines.append(draw(st.sampled_from(["", "   ", "\t", "# comment only", "  #docid = é ü 1:2 qid:3 #"])))
        q += draw(st.sampled_from([0, 0, 1, 17]))
        label = draw(st.one_of(_INT_LABEL, _number()))
        parts = [label] + ([f"qid:{q}"] if qid else [])
        cols = sorted(draw(st.sets(st.integers(1, n_feat), max_size=n_feat)))
        parts += [f"{c}:{draw(_number())}" for c in cols]
        sep = draw(st.sampled_from([" ", "  ", "\t", " \t"]))
        line = draw(st.sampled_from(["", " ", "\t"])) + sep.join(parts) + draw(st.sampled_from(["", " ", "\t "]))
        if draw(st.integers(0, 3)) == 0:
            line += draw(st.sampled_from(["#c", " # docid = GX008-86 inc = 1 prob = 0.08", "\t#\t: qid:1 NULL \x7f"]))
        lines.append(line)
    nl = "\r\n" if crlf else "\n"
    text = nl.join(lines) + (nl if draw(st.booleans()) else "")
    return text.encode("utf-8"), n_feat


@pytest.mark.slow   # 2.5 s of hypothesis; the edge texts stay quick
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_valid_file(), zero_based=st.booleans(), give_n=st.booleans(), first_line=st.integers(1, 50))
def test_fast_path_is_the_kernel_bit_for_bit_on_valid_text(case, zero_based, give_n, first_line):
    text, n_feat = case
    ref, got = _parse_both(text, zero_based=zero_based, n_features=n_feat + 1 if give_n else None,
                           first_line=first_line)
    _assert_same_parse(ref, got)


@pytest.mark.slow   # 1.5 s of hypothesis
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_valid_file(), chunk=st.integers(1, 300), dense=st.booleans())
def test_public_reader_both_ways_on_valid_text(case, chunk, dense):
    text, n_feat = case
    _assert_same_reads(text, chunk_bytes=chunk, dense=dense)
    _assert_same_reads(text, chunk_bytes=None, dense=dense, n_features=n_feat + 2)
    with twins(True):
        a = read_svmlight(io.BytesIO(text), n_features=n_feat, dense=True)
    with twins(False):
        b = read_svmlight(io.BytesIO(text), n_features=n_feat, dense=True)
    assert all((x is None and y is None) or _same(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("text", [
    b"", b"\n", b"\n\n  \n", b"# only a comment", b"   ", b"\r\n",            # no data line
    b"1", b"-0", b"-0 qid:0", b"3 qid:7\n", b"2 1:0 2:-0.0 3:0e5",            # no feature, zeros dropped
    b"1 qid:5 1:0.5",                                                          # one row, no final newline
    b"0 qid:1 1:1 2:1\n0 qid:1 1:1 2:1\n0 qid:1 1:1 2:1\n",                   # all tied
    b"1 1:0.1 2:0.30000000000000004 3:1e-07 4:1.5E+16 5:-2.5e-3 6:123456789012345678901234567890",
    b"1 1:9007199254740993 2:9007199254740992 3:0.1e22 4:1e23 5:12345678.12345678 6:3e38 7:-3e38",
    b"1 1:1e22 2:1e-22 3:9007199254740993e0 4:4.9e-22 5:12345678901234567e-5 6:1E+2 7:-0e-5 8:-0.5e-1 9:3e38",
    b"1e1 1:9007199254740992E-22 2:1.25e+22 3:123e-25 4:1.0000000000000001e-99 5:99999999999999999999e-9",
    b"0.5e1 qid:123456789012345 16777216:1",                                  # the largest column allowed
    b"1 qid:1 3:1#c\n2 qid:1#c\n3 qid:2 1:2 # 1:x\n",
])
def test_edge_texts_same_arrays_both_ways(text):
    ref, got = _parse_both(text)
    _assert_same_parse(ref, got)
    ref0, got0 = _parse_both(text, zero_based=True, qid_mode=-1, max_features=None)
    _assert_same_parse(ref0, got0)


def test_digit_words_read_every_length():
    """The 8-byte SWAR step against int() for 1-16 digits, leading zeros and every digit in every place."""
    rng = np.random.default_rng(5)
    toks = ["0", "9", "00000000", "99999999", "0000000000000001", "9999999999999999", "10000000", "100000000"]
    toks += ["".join(rng.choice(list("0123456789"), size=n)) for n in rng.integers(1, 17, size=400)]
    labels = T.parse("\n".join(toks).encode(), False, -1, -1, 1)[0]                  # each a label
    assert labels.tolist() == [float(int(t)) for t in toks]
    values = T.parse("\n".join(f"0 1:{t}" for t in toks).encode(), False, -1, -1, 1)[4]   # each a value
    assert values.tolist() == [float(int(t)) for t in toks if int(t)]
    ids = T.parse(" ".join(["0"] + [f"{i}:1" for i in range(1, 5001, 7)]).encode(), True, -1, -1, 1)[3]
    assert ids.tolist() == list(range(1, 5001, 7))                                 # indices, zero-based


def test_values_are_the_correctly_rounded_float_of_their_text():
    """Clinger's fast path and the one-by-one ``float`` give what Python's (correctly rounded) float gives."""
    rng = np.random.default_rng(6)
    toks = [f"{rng.integers(0, 10 ** rng.integers(1, 17))}.{rng.integers(0, 10 ** 9):09d}" for _ in range(500)]
    toks += [f"{m}e{e}" for m, e in zip(rng.integers(1, 10 ** 6, 200), rng.integers(-99, 30, 200))]
    text = "\n".join(f"1 1:{t}" for t in toks).encode()
    out = T.parse(text, False, -1, -1, 1)
    ref, _ = _parse_both(text)
    assert out is not None
    want = np.array([float(t) for t in toks])
    keep = want != 0
    assert out[4].tobytes() == want[keep].tobytes() == ref[4].tobytes()


# ---- text the fast path must hand to the kernels -----------------------------------------------------------

ERROR_TEXTS = {
    1: [b"x 1:1", b"+ 1:1", b"1.2.3 1:1", b"1:2 3:4", b"i0", b"d1 1:1", b"1i 1:1", b"e 1:1", b"1e 1:1"],
    2: [b"1 qid:x 1:1", b"1 qid:-1 1:1", b"1 qi:1"],
    3: [b"1 qid:1 x:1", b"1 -1:2", b"1 1234567890123456789:1"],
    4: [b"1 1:x", b"1 1:", b"1 1:1e999", b"1 1:Nan", b"1 1:1-2", b"1 1:1d", b"1 1:2i 2:1", b"1 1:1e-2-3", b"1 1:1+2"],
    5: [b"1 2:1 1:1", b"1 2:1 2:1"],
    6: [b"1 0:1", b"1 99999999999:1"],
    7: [b"1 qid:1 1:1\n1 1:1", b"1 1:1\n1 qid:1 1:1\n"],
    8: [b"1 1:NULL"],
    9: [b"1 1", b"1 qid:1 5", b"1 1.5:2"],
    10: [b"1 1:1e39", b"1 1:-3.5e38"],
    11: [b"1 1:1\r2 1:1\n", b"1 qid:1 1:1\r \n"],
}


@pytest.mark.parametrize("code,text", [(c, t) for c, ts in ERROR_TEXTS.items() for t in ts])
def test_every_error_has_the_kernels_message(code, text):
    assert T.parse(text, False, (1 << 24) - 1, -1, 1) is None
    msg = _assert_same_reads(text)
    assert isinstance(msg, str) and (K.ERRORS[code] in msg or code in (6, 7)), msg


@pytest.mark.parametrize("text,kw", [
    (b"1 1:1 2:1\n", dict(n_features=1)),                     # index past n_features
    (b"1 40:1\n", dict(max_features=8)),                      # past max_features
    (b"1 qid:1 1:NULL 2:1\n", dict(null_value=-1.0)),         # NULL substituted
    (b"1 1:1\r2 1:2\r", {}),                                  # classic Mac line ends
    (b"1 1:1\n2 1:2\r", {}),                                  # a CR as the last byte
    (b"1 qid:1 1:.5 2:5. 3:+1\n", {}),                        # the kernel's numbers outside the fast path
    (b"1 qid:1 1:1e-400 2:1e300 3:" + b"1" * 50 + b"\n", {}),
    (b"1 qid:1234567890123456 1:1\n", {}),                    # a 16-digit qid
    (b"1 1:1e123 2:1.e5 3:1E-0001\n", {}),                     # exponents of 3+ digits, '1.e5'
    (b"1 1:1e5.5\n", {}), (b"1 1:1e5e5\n", {}), (b"1 1:1e\n", {}), (b"1 1:1e+\n", {}), (b"1e 1:1\n", {}),
    (b"\xef\xbb\xbf1 qid:1 1:1 # \xff\xfe\n", {}),            # BOM, bytes that are not UTF-8 in a comment
    (b"1 1:1\x0b2:1\n", {}),                                  # a vertical tab
])
def test_text_off_the_fast_path_reads_as_the_kernels(text, kw):
    _assert_same_reads(text, **kw)
    _assert_same_reads(text, chunk_bytes=3, **kw)


_ALPHABET = list(b"0123456789.-+eE:qidN#  \t\r\n\x00\xff")


@pytest.mark.slow   # 3.6 s of hypothesis; every error code stays quick
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_valid_file(), where=st.integers(0, 10 ** 6), how=st.sampled_from(["replace", "insert", "delete"]),
       byte=st.sampled_from(_ALPHABET), chunk=st.sampled_from([None, 7, 64]))
def test_a_corrupted_byte_gives_the_kernels_error_or_arrays(case, where, how, byte, chunk):
    text, _ = case
    if not text:
        text = b"1 qid:1 1:1\n"
    i = where % len(text)
    text = text[:i] + (bytes([byte]) if how != "delete" else b"") + text[i + (how != "insert"):]
    _assert_same_reads(text, chunk_bytes=chunk)


# ---- the dense scatter -------------------------------------------------------------------------------------

@pytest.mark.parametrize("rows,cols,density", [(0, 3, 0.5), (1, 1, 1.0), (7, 5, 0.0), (50, 46, 0.6), (3, 9, 1.0)])
def test_csr_to_dense_twin_is_the_kernel(rows, cols, density):
    import scipy.sparse as sp

    rng = np.random.default_rng(rows * 100 + cols)
    A = sp.random(rows, cols, density=density, format="csr", random_state=rng, dtype=np.float64)
    data = A.data.astype(np.float32)
    for arrs in ((A.indptr.astype(np.int64), A.indices.astype(np.int32), data),):
        ro = [np.array(a) for a in arrs]
        for a in ro:
            a.setflags(write=False)                     # read-only inputs, as a caller may hold them
        a_out, b_out = np.zeros((rows, cols), np.float32), np.zeros((rows, cols), np.float32)
        K.csr_to_dense(*ro, a_out)
        T.csr_to_dense(*ro, b_out)
        assert a_out.tobytes() == b_out.tobytes()
        assert np.array_equal(b_out, A.toarray().astype(np.float32))


# ---- real data and a real process --------------------------------------------------------------------------

def _mq2008_head(n_lines):
    if not os.path.exists(MQ2008):
        pytest.skip(f"{MQ2008} is not available")
    with tarfile.open(MQ2008, "r:gz") as tf:
        for member in tf:                                  # train.txt of Fold1 is near the archive's start
            if member.name == "MQ2008/Fold1/train.txt":
                text = tf.extractfile(member).read(n_lines * 700)
                return b"".join(text.splitlines(keepends=True)[:n_lines])
    pytest.skip("no MQ2008/Fold1/train.txt in the archive")


def test_mq2008_slice_both_ways():
    text = _mq2008_head(500)
    ref, got = _parse_both(text)
    _assert_same_parse(ref, got)
    assert len(got[0]) == 500 and got[6] == 1 and got[7] == 45
    chunks = _assert_same_reads(text, chunk_bytes=40_000, n_features=46)
    assert sum(len(c[1]) for c in chunks) == 500


@pytest.mark.slow   # 3.5 s, two fresh interpreters
def test_streamrank_ingest_of_a_small_file_imports_no_numba(tmp_path):
    """The console command, in a fresh interpreter (its start-up preload included): no numba module loaded.

    Then the same file with the twins' budget spent before the parse: the kernels run and the stores agree.
    """
    text = _mq2008_head(300)
    (tmp_path / "train.txt").write_bytes(text)
    env = dict(os.environ, NUMBA_CACHE_DIR=os.environ.get("NUMBA_CACHE_DIR", str(tmp_path / "cache")))
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "streamrank.cli", "ingest", "train.txt",
                          "--store", "a.zarr", "-q"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    imported = {ln.rsplit("|", 1)[-1].strip() for ln in res.stderr.splitlines() if ln.startswith("import time:")}
    assert {"streamrank.io.svmlight", "streamrank.io.group_store"} <= imported   # it did parse and write
    assert not [m for m in imported if m.split(".")[0] in ("numba", "llvmlite")]
    code = ("import sys, json\nfrom streamrank import _numba\n_numba._budget[0] = 0.0\n"
            "from streamrank.cli import main\n"
            "assert main(['ingest', 'train.txt', '--store', 'b.zarr', '-q']) == 0\n"
            "print(json.dumps({'numba': _numba.numba_ready()}))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {"numba": True}
    import streamrank as sr

    a, b = sr.GroupStore.open(tmp_path / "a.zarr"), sr.GroupStore.open(tmp_path / "b.zarr")
    assert a.n_rows == b.n_rows == 300 and a.n_features == b.n_features == 46
    (Xa, ya), (Xb, yb) = a._read_rows(0, 300), b._read_rows(0, 300)
    assert _same(Xa, Xb) and _same(ya, yb) and _same(a.qid, b.qid)
