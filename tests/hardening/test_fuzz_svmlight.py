"""Fuzzing the LETOR / svmlight parser: it never crashes and rejects with the line number.

Three properties, over hypothesis-generated files:

* well-formed files — random labels, qids, increasing feature indices, values
  in several spellings, comments (unicode), CRLF or LF, empty and
  comment-only lines — parse to exactly the arrays they were written from,
  whatever the chunk size of the streaming reader;
* a well-formed file with one malformed line spliced in (bad label, bad or
  missing qid, index 0, index beyond int32 or 20 digits, decreasing or
  duplicate indices, NaN/inf/NULL/hex/unicode values, float32 overflow,
  missing ':') raises ``ValueError`` whose message names ``file:LINE`` of
  that line;
* arbitrary bytes either parse or raise ``ValueError`` — never another
  exception, a crash in numba, or a hang.

``FUZZ_EXAMPLES=5000 pytest tests/hardening/test_fuzz_svmlight.py`` runs a
longer fuzzing session (the default keeps the suite fast).
"""
from __future__ import annotations

import io
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamrank.io.svmlight import iter_svmlight, read_svmlight

N_EX = int(os.environ.get("FUZZ_EXAMPLES", "40"))
SETTINGS = settings(max_examples=N_EX, deadline=None, suppress_health_check=list(HealthCheck))

# ----------------------------------------------------------- well-formed lines
finite32 = st.floats(min_value=-2.0**100, max_value=2.0**100, allow_nan=False, width=32)


@st.composite
def number_text(draw, value):
    """A spelling of ``value`` the parser must read back exactly (to float32 for features)."""
    kind = draw(st.sampled_from(["repr", "e", "fixed", "int"]))
    if kind == "int" and float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    if kind == "e":
        return f"{value:.9e}"
    if kind == "fixed" and 1e-3 < abs(value) < 1e6:
        return f"{value:.9f}"
    return repr(float(value))


comment_text = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)


@st.composite
def data_line(draw, with_qid, qid, n_features):
    label = draw(st.integers(-3, 5)) if draw(st.booleans()) else draw(finite32)
    k = draw(st.integers(0, min(6, n_features)))
    cols = sorted(draw(st.lists(st.integers(0, n_features - 1), min_size=k, max_size=k, unique=True)))
    vals = [draw(finite32) for _ in cols]
    sep = draw(st.sampled_from([" ", "\t", "  "]))
    label_text = draw(number_text(label))
    parts = [label_text]
    if with_qid:
        parts.append(f"qid:{qid}")
    val_texts = [draw(number_text(v)) for v in vals]
    parts += [f"{c + 1}:{t}" for c, t in zip(cols, val_texts)]
    text = sep.join(parts)
    if draw(st.booleans()):
        text += " # " + draw(comment_text)
    # expected: the decimal text rounded once (to float64 for labels, float32 for features)
    return text, float(label_text), cols, [float(np.float32(float(t))) for t in val_texts]


@st.composite
def letor_file(draw, with_qid=None):
    """(list of text lines, expected y, qid, dense X, n_features)."""
    with_qid = draw(st.booleans()) if with_qid is None else with_qid
    n_features = draw(st.integers(1, 8))
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=6))
    qids = draw(st.lists(st.integers(0, 2**40), min_size=len(sizes), max_size=len(sizes), unique=True))
    lines, y, q, rows = [], [], [], []
    for qv, s in zip(qids, sizes):
        for _ in range(s):
            while draw(st.integers(0, 5)) == 0:  # empty / comment-only lines anywhere
                lines.append(draw(st.sampled_from(["", "# " + draw(comment_text), "   "])))
            text, lab, cols, vals = draw(data_line(with_qid, qv, n_features))
            lines.append(text)
            row = np.zeros(n_features)
            row[cols] = vals
            y.append(lab)
            q.append(qv)
            rows.append(row)
    # the last column must appear somewhere when n_features is inferred
    return lines, np.array(y), (np.array(q, dtype=np.int64) if with_qid else None), np.array(rows), n_features


def _join(lines, draw_eol):
    return "".join(line + eol for line, eol in zip(lines, draw_eol)).encode("utf-8")


@SETTINGS
@given(letor_file(), st.data(), st.sampled_from([None, 7, 64, 4096]))
def test_well_formed_files_parse_exactly(f, data, chunk):
    lines, y, q, X, nf = f
    eols = data.draw(st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(lines), max_size=len(lines)))
    if data.draw(st.booleans()):
        eols[-1] = ""  # no newline at the end of the file
    raw = _join(lines, eols)
    parts = list(iter_svmlight(io.BytesIO(raw), n_features=nf, dense=True, chunk_bytes=chunk))
    Xr = np.concatenate([p.X for p in parts]) if parts else np.zeros((0, nf))
    yr = np.concatenate([p.y for p in parts]) if parts else np.zeros(0)
    np.testing.assert_array_equal(yr, y)
    np.testing.assert_array_equal(Xr, X.astype(np.float32))
    if q is None:
        assert all(p.qid is None for p in parts)
    else:
        np.testing.assert_array_equal(np.concatenate([p.qid for p in parts]), q)
        for i, p in enumerate(parts):  # chunks end on query boundaries: no query in two chunks
            others = [o.qid for j, o in enumerate(parts) if j != i]
            assert not others or not set(p.qid.tolist()) & set(np.concatenate(others).tolist())


# ----------------------------------------------------------------- bad lines
BAD_LINES = [
    "abc qid:{q} 1:1",              # bad label
    "nan qid:{q} 1:1",              # non-finite label
    "1 qid:x 1:1",                  # bad qid
    "1 qid:-3 1:1",                 # negative qid
    "1 qid:99999999999999999999 1:1",
    "1 qid:{q} a:1",                # bad index
    "1 qid:{q} 0:1",                # index 0 in a 1-based file
    "1 qid:{q} 2147483649:1",       # index beyond int32
    "1 qid:{q} 99999999999999999999:1",
    "1 qid:{q} 3:1 2:1",            # decreasing
    "1 qid:{q} 3:1 3:2",            # duplicate
    "1 qid:{q} 1:nan",
    "1 qid:{q} 1:-inf",
    "1 qid:{q} 1:NULL",
    "1 qid:{q} 1:0x10",
    "1 qid:{q} 1:\uff11",           # a unicode digit
    "1 qid:{q} 1:é",
    "1 qid:{q} 1:1e39",             # beyond float32
    "1 qid:{q} 1",                  # missing ':'
    "1 qid:{q} 1::1",
    "1 1:1",                        # qid missing on one line
    "1 qid:{q} 1:1\x00",
]


@SETTINGS
@given(letor_file(with_qid=True), st.sampled_from(BAD_LINES), st.data(), st.sampled_from([None, 16, 4096]))
def test_one_bad_line_is_reported_with_its_number(f, bad, data, chunk):
    lines, y, q, X, nf = f
    at = data.draw(st.integers(0, len(lines)))
    lines = lines[:at] + [bad.format(q=int(q[0]))] + lines[at:]
    eol = data.draw(st.sampled_from(["\n", "\r\n"]))
    raw = (eol.join(lines) + eol).encode("utf-8")
    with pytest.raises(ValueError, match=rf"^bad\.txt:{at + 1}: "):
        for _ in iter_svmlight(io.BytesIO(raw), n_features=nf, chunk_bytes=chunk, name="bad.txt"):
            pass


def test_a_crlf_cut_between_its_cr_and_lf_is_not_taken_for_bare_cr_line_ends():
    """hypothesis found it: the first 16 bytes end with the CR of a CRLF; the file was read as bare-CR text
    (every CRLF two line ends) and the bad line 2 was reported as line 3."""
    raw = b"0.0 qid:0 1:0.0\r\nabc qid:0 1:1\r\n"
    with pytest.raises(ValueError, match=r"^bad\.txt:2: "):
        list(iter_svmlight(io.BytesIO(raw), n_features=1, chunk_bytes=16, name="bad.txt"))
    X, y, _ = next(iter_svmlight(io.BytesIO(b"1 qid:1 1:2\r2 qid:1 1:3\r"), chunk_bytes=12))   # bare CR still
    assert y.tolist() == [1.0, 2.0] and X[:, 0].tolist() == [2.0, 3.0]


@SETTINGS
@given(st.binary(max_size=300) | st.text(max_size=120).map(lambda s: s.encode("utf-8")),
       st.sampled_from([None, 5, 64]), st.sampled_from([None, 4]))
def test_arbitrary_bytes_parse_or_raise_value_error(raw, chunk, nf):
    try:
        X, y, qid = read_svmlight(io.BytesIO(raw), n_features=nf)
        list(iter_svmlight(io.BytesIO(raw), n_features=nf, chunk_bytes=chunk))
    except ValueError as exc:
        assert re.match(r"^<stream>(:\d+:|: )", str(exc)) or "n_features" in str(exc), str(exc)
        return
    assert X.shape[0] == y.shape[0]
    assert np.isfinite(y).all() and np.isfinite(X.data).all()


def test_huge_index_without_n_features_is_refused_not_wrapped():
    # a column beyond int32 used to be stored wrapped around (silently wrong X)
    with pytest.raises(ValueError, match=r":2: feature index out of range"):
        read_svmlight(io.BytesIO(b"1 qid:1 1:1\n1 qid:1 1099511627776:1\n"))
