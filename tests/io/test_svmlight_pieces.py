"""The svmlight fast path read in pieces (``_svmlight_twin.PIECE_BYTES``, issue 22) is the same as read whole.

Small piece sizes force many pieces on small texts: every answer (arrays bit
for bit, line numbers, qid mode, largest column, or None) must be the one of
the whole text in one piece, and where there is one, the kernels'.
"""
from __future__ import annotations

import numpy as np
import pytest

from streamrank._numba import twins
from streamrank.io import _svmlight_twin as T
from streamrank.io import svmlight as S

PIECES = (1, 9, 64, 700)


def _same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return type(a) is type(b) and a == b


def _whole(text, *args):
    return T._parse_piece(bytes(text), *args, [T.MAX_SLOW])


def _check(monkeypatch, text, zero_based=False, max_index=(1 << 24) - 1, qid_mode=-1, first_line=1):
    want = _whole(text, zero_based, max_index, qid_mode, first_line)
    for size in PIECES:
        monkeypatch.setattr(T, "PIECE_BYTES", size)
        got = T.parse(text, zero_based, max_index, qid_mode, first_line)
        if want is None:
            assert got is None, size
            continue
        assert got is not None and len(got) == len(want), size
        for i, (a, b) in enumerate(zip(want, got)):
            assert _same(a, b), (size, i, a, b)
    return want


def _lines(rng, n, qid=True, bad=False):
    out = []
    q = 1
    for _ in range(n):
        if rng.random() < 0.15:
            out.append(["", "  ", "# only a comment", "\t#c 1:2"][rng.integers(0, 4)])
            continue
        q += rng.integers(0, 2)
        cols = np.sort(rng.choice(np.arange(1, 30), size=rng.integers(0, 8), replace=False))
        vals = [f"{v:.{rng.integers(0, 7)}f}" if rng.random() < 0.7 else f"{v:.3e}"
                for v in rng.normal(size=len(cols)) * 10.0 ** rng.integers(-3, 4)]
        line = f"{rng.integers(0, 3)}" + (f" qid:{q}" if qid else "")
        line += "".join(f" {c}:{v}" for c, v in zip(cols, vals))
        if rng.random() < 0.2:
            line += " # docid = GX008 inc = 1"
        out.append(line)
    text = "\n".join(out) + ("\n" if rng.random() < 0.7 else "")
    data = bytearray(text.encode())
    if bad and data:
        i = int(rng.integers(0, len(data)))
        data[i] = int(rng.choice(list(b"0.-e:qN \t\n#\x00")))
    return bytes(data)


def test_pieces_are_the_whole_on_random_text(monkeypatch):
    rng = np.random.default_rng(22)
    answered = deferred = 0
    for k in range(160):
        text = _lines(rng, int(rng.integers(0, 40)), qid=bool(k % 3), bad=k % 2 == 1)
        want = _check(monkeypatch, text, zero_based=bool(k % 5 == 0), first_line=int(rng.integers(1, 9)),
                      qid_mode=int(rng.choice([-1, 0, 1])))
        answered += want is not None
        deferred += want is None
        if want is not None:                      # and it is the kernels' answer
            monkeypatch.setattr(T, "PIECE_BYTES", 9)
            assert _parse_is_kernels(text)
    assert answered > 60 and deferred > 10        # both kinds of answer were compared


def _parse_is_kernels(text):
    with twins(False):
        ref = S._parse(text, "t", 1, False, None, None, -1, inferred=True, max_features=S.DEFAULT_MAX_FEATURES)
    got = T.parse(text, False, S.DEFAULT_MAX_FEATURES - 1, -1, 1)
    return got is not None and all(_same(a, b) for a, b in zip(ref, got))


@pytest.mark.parametrize("text", [
    b"", b"\n", b"1", b"1 qid:5 1:0.5", b"1 qid:1 3:1#c\n2 qid:1#c\n3 qid:2 1:2 # 1:x\n",
    b"1 qid:1 1:1\n2 1:1\n", b"1 1:1\n2 qid:1 1:1\n",            # qid on some lines only (across pieces too)
    b"1 qid:1 1:1\r\n2 qid:1 2:1\r\n", b"1 1:1\r2 1:2\n",           # CRLF; a bare CR
    b"1 2:1 1:1\n", b"1 1:1 1:2\n",                               # not increasing
    b"\n".join(b"1 1:1.%d 2:1e-0%d" % (i, i % 10) for i in range(50)),
])
def test_pieces_are_the_whole_on_edge_text(monkeypatch, text):
    _check(monkeypatch, text)
    _check(monkeypatch, text, qid_mode=1, first_line=7)
    _check(monkeypatch, text, zero_based=True, max_index=-1)


def test_the_float_budget_is_one_for_all_pieces(monkeypatch):
    """MAX_SLOW counts the tokens of the whole text, whatever the pieces (17-digit numbers: repr's)."""
    line = b"1 " + b" ".join(b"%d:1.2345678901234567%d" % (j, j) for j in range(1, 11)) + b"\n"   # 10 slow tokens
    monkeypatch.setattr(T, "MAX_SLOW", 25)
    assert _whole(line * 2, False, -1, -1, 1) is not None
    assert _check(monkeypatch, line * 2) is not None          # 20 slow tokens: read, in pieces too
    assert _whole(line * 3, False, -1, -1, 1) is None
    assert _check(monkeypatch, line * 3) is None              # 30: too many, also when each piece has 10


def test_mq2008_train_in_default_pieces_is_the_kernels():
    """2,000 lines of MQ2008 Fold1 train (1.2 MB: three pieces of the default size) read as the kernels read them."""
    import os
    import tarfile

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "letor",
                        "MQ2008_QueryLevelNorm.tar.gz")
    if not os.path.exists(path):
        pytest.skip(f"{path} is not available")
    with tarfile.open(path, "r:gz") as tf:
        text = tf.extractfile("MQ2008/Fold1/train.txt").read(2000 * 700)
    text = b"".join(text.splitlines(keepends=True)[:2000])
    assert len(text) > 2 * T.PIECE_BYTES
    assert _parse_is_kernels(text)
