"""The README's main job runs end to end (tiny sizes), reports every learner and explains its table; a failing
learner fails it."""
import re

from streamrank import demo


def test_demo_runs_every_learner_end_to_end(tmp_path, capsys):
    rc = demo.main(["--rows", "6000", "--test-rows", "2000", "--features", "8", "--out", str(tmp_path),
                    "--max-rows", "1500", "--n-basis", "32", "--pairs", "5000", "--tuples", "3000",
                    "--bilinear-dim", "64", "--strict"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "failed" not in out
    rows = [line for line in out.splitlines() if re.match(r"^(RankRLS|sparse Kernel|Pairwise|SparseSGD)", line)]
    assert len(rows) == 5, out
    for line in rows[:4]:  # group learners: NDCG@10 and disagreement are numbers in [0, 1]
        ndcg, dis = (float(v) for v in line[44:].split()[:2])
        assert 0.0 <= ndcg <= 1.0 and 0.0 <= dis <= 1.0
    # a second run reuses the stores written by the first
    assert demo.main(["--rows", "6000", "--test-rows", "2000", "--features", "8", "--out", str(tmp_path),
                      "--max-rows", "1500", "--n-basis", "32", "--pairs", "5000", "--tuples", "3000",
                      "--bilinear-dim", "64", "--strict"]) == 0
    out = capsys.readouterr().out
    assert "reusing" in out
    assert "disagr.: disagreement error" in out and "first s" in out                 # the columns are explained
    assert f"streamrank evaluate --model demo-model.zarr --store {tmp_path}/test.zarr" in out   # next steps
    for line in (ln for ln in out.splitlines() if re.match(r"^(RankRLS|sparse Kernel|Pairwise)", ln)):
        assert float(line.split()[-1]) >= 0                                             # first-call seconds


def test_a_failing_learner_makes_the_demo_fail(tmp_path, capsys, monkeypatch):
    """Every learner is still reported, and the exit code is 1 (it was 0 without --strict)."""
    import streamrank as sr

    def broken(self, *a, **k):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(sr.PairwiseSGDRanker, "fit", broken)
    rc = demo.main(["--rows", "3000", "--test-rows", "1000", "--features", "5", "--out", str(tmp_path),
                    "--n-basis", "16", "--pairs", "2000", "--tuples", "1000", "--bilinear-dim", "32"])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "PairwiseSGDRanker hinge" in out and "failed: RuntimeError: broken on purpose" in out
    assert "RankRLS primal" in out and "1 learner(s) failed" in err and "Next:" not in out


def test_make_demo_installs_only_what_the_demo_needs(tmp_path):
    """``make demo`` installs streamrank alone (the test and docs stacks are 1.5 GB the demo never uses);
    ``make test`` installs the extras.  Read from make's dry run in a fresh venv location."""
    import shutil
    import subprocess
    from pathlib import Path

    make = shutil.which("make")
    if make is None:
        import pytest

        pytest.skip("make is not installed")
    repo = Path(__file__).resolve().parents[1]

    def dry(target):
        r = subprocess.run([make, "-n", "-C", str(repo), target, f"VENV={tmp_path / 'venv'}"], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return [ln for ln in r.stdout.splitlines() if "pip install" in ln and "--upgrade pip" not in ln]

    demo, test = dry("demo"), dry("test")
    assert len(demo) == 1 and demo[0].rstrip().endswith("-e .") and "[" not in demo[0], demo
    assert any("test" in ln and "docs" in ln for ln in test), test
