"""A query id that recurs across ingest chunks (issue 16): the error says what was committed and how to
resume, and the command it gives does resume after the line is fixed."""
from __future__ import annotations

import re

import numpy as np

import streamrank as sr
from streamrank.cli import main

LINES = [f"{i % 3} qid:{1 + i // 4} 1:{i}.5 2:{-i}" for i in range(40)]


def test_partial_commit_is_reported_and_the_given_command_resumes(tmp_path, capsys):
    day, store = tmp_path / "day.txt", tmp_path / "s.zarr"
    bad = list(LINES)
    bad[30] = bad[30].replace("qid:8", "qid:2")          # line 31: qid 2 again, in a later chunk
    day.write_text("\n".join(bad) + "\n")
    argv = ["ingest", str(day), "--store", str(store), "--chunk-mb", "0.0002", "-q"]
    assert main(argv) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    m = re.search(r"day\.txt \(line 31\): .*; committed 28 rows in 3 batch\(es\) before it \(they stay in the "
                  r"store\); re-run with --batch-id (\S+) \(same --chunk-mb\) after fixing line 31 resumes", err)
    assert m, err
    assert sr.GroupStore.open(store).n_rows == 28
    day.write_text("\n".join(LINES) + "\n")                # fixed
    assert main(argv + ["--batch-id", m.group(1)]) == 0, capsys.readouterr().err
    s = sr.GroupStore.open(store)
    assert s.n_rows == 40 and s.n_groups == 10
    np.testing.assert_array_equal(s.qid, np.arange(1, 11))
    X, y, _ = sr.read_svmlight(str(day), dense=True)
    blk = next(iter(s.blocks(max_rows=100)))
    np.testing.assert_array_equal(blk.X, X)
    np.testing.assert_array_equal(blk.y, y)


def test_first_chunk_error_names_the_line_and_commits_nothing(tmp_path, capsys):
    day = tmp_path / "day.txt"
    bad = list(LINES[:8])
    bad[5] = bad[5].replace("qid:2", "qid:1")              # rows 1,1,1,1,2,1,2,2: qid 1 recurs at line 6
    day.write_text("\n".join(bad) + "\n")
    assert main(["ingest", str(day), "--store", str(tmp_path / "s.zarr"), "-q"]) == 4
    err = capsys.readouterr().err
    assert "day.txt (line 6): " in err and "committed" not in err
