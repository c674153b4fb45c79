"""svmlight/LETOR text (issue 16): bare-CR line ends, stray CRs, and the cap on an inferred feature count."""
from __future__ import annotations

import io

import numpy as np
import pytest

from streamrank.io.svmlight import DEFAULT_MAX_FEATURES, iter_svmlight, read_svmlight

LINES = [f"{i % 3} qid:{1 + i // 4} 1:{i}.5 3:{-i} 5:0.25 # doc {i}" for i in range(10)]


def _expected():
    from sklearn.datasets import load_svmlight_file   # the reference; imported here, not at collection (~2 CPU-s)

    text = ("\n".join(LINES) + "\n").encode()
    X, y, q = load_svmlight_file(io.BytesIO(text), n_features=5, query_id=True)
    return X.toarray(), y, q


@pytest.mark.parametrize("chunk_bytes", [None, 7, 40, 1 << 20])
@pytest.mark.parametrize("final", ["\r", ""])
def test_bare_cr_line_ends_read_every_line(chunk_bytes, final):
    """Classic-Mac files (CR only): 10 lines are 10 rows, whatever the chunk cut (was: 1 row, no error)."""
    text = ("\r".join(LINES) + final).encode()
    parts = list(iter_svmlight(io.BytesIO(text), n_features=5, chunk_bytes=chunk_bytes))
    X = np.concatenate([p.X for p in parts])
    y = np.concatenate([p.y for p in parts])
    q = np.concatenate([p.qid for p in parts])
    Xe, ye, qe = _expected()
    np.testing.assert_array_equal(X, Xe)
    np.testing.assert_array_equal(y, ye)
    np.testing.assert_array_equal(q, qe)


@pytest.mark.parametrize("where, line", [
    (lambda s: s.replace("3:-4 ", "3:-4\r"), 5),        # between features
    (lambda s: s.replace("2 qid:2 1:5.5", "2\rqid:2 1:5.5"), 6),  # after the label
    (lambda s: s.replace("\n0 qid:3 1:9.5", "\n\r0 qid:3 1:9.5"), 10),  # at the start of a line
])
@pytest.mark.parametrize("crlf", [False, True])
def test_stray_cr_inside_a_line_is_an_error_naming_it(where, line, crlf):
    """A lone CR in an LF/CRLF file must not silently drop the rest of its line."""
    text = "\n".join(LINES) + "\n"
    text = where(text)
    assert "\r" in text
    if crlf:
        text = text.replace("\n", "\r\n")
    with pytest.raises(ValueError, match=rf"<stream>:{line}: stray carriage return"):
        read_svmlight(io.BytesIO(text.encode()), name="<stream>")


def test_cr_inside_a_comment_and_crlf_are_fine():
    text = ("\r\n".join(s.replace("# doc", "# d\roc") for s in LINES) + "\r\n").encode()
    X, y, q = read_svmlight(io.BytesIO(text), n_features=5, dense=True)
    Xe, ye, qe = _expected()
    np.testing.assert_array_equal(X, Xe)
    np.testing.assert_array_equal(y, ye)


def test_inferred_feature_count_is_capped_naming_the_line():
    """One line with index 2**31 - 1 must not make a 2.1-billion-feature matrix/store."""
    text = "\n".join(LINES[:6] + ["1 qid:9 2147483647:1"] + LINES[6:]) + "\n"
    for chunk_bytes in (None, 64):
        # whole text: the cap; in chunks: the count inferred from the first chunk — both name line 7
        msg = "max_features=16777216" if chunk_bytes is None else "inferred from the first chunk"
        with pytest.raises(ValueError, match=rf"f\.txt:7: feature index out of range.*{msg}"):
            list(iter_svmlight(io.BytesIO(text.encode()), chunk_bytes=chunk_bytes, name="f.txt", dense=False))
    assert DEFAULT_MAX_FEATURES == 1 << 24
    # configurable: a smaller cap, or none at all (then the index must still fit int32 columns)
    with pytest.raises(ValueError, match=r":1: .*max_features=4"):
        read_svmlight(io.BytesIO(LINES[0].encode()), max_features=4)
    X, _, _ = read_svmlight(io.BytesIO(b"1 qid:1 3000000000:1\n".replace(b"3000000000", b"20000000")),
                            max_features=None)
    assert X.shape == (1, 20000000)
    # an explicit n_features is not capped
    X, _, _ = read_svmlight(io.BytesIO(b"1 qid:1 20000000:1\n"), n_features=20000000)
    assert X.shape[1] == 20000000


def test_cli_ingest_refuses_a_huge_inferred_feature_count(tmp_path, capsys):
    from streamrank.cli import main

    src = tmp_path / "day.txt"
    src.write_text("\n".join(LINES[:3] + ["1 qid:9 2147483647:1"]) + "\n")
    code = main(["ingest", str(src), "--store", str(tmp_path / "s.zarr"), "--sparse", "-q"])
    err = capsys.readouterr().err
    assert code == 4, err
    assert len(err.strip().splitlines()) == 1 and "day.txt:4: feature index out of range" in err
    assert "max_features=16777216" in err
    assert not (tmp_path / "s.zarr" / "zarr.json").exists()
    # --max-features raises the cap (here: enough for index 40)
    src.write_text("\n".join(LINES[:3] + ["1 qid:9 40:1"]) + "\n")
    assert main(["ingest", str(src), "--store", str(tmp_path / "s.zarr"), "--sparse", "-q",
                 "--max-features", "39"]) == 4
    assert main(["ingest", str(src), "--store", str(tmp_path / "s.zarr"), "--sparse", "-q",
                 "--max-features", "40"]) == 0
