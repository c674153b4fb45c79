"""The README's main job runs end to end (tiny sizes) and reports every learner."""
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
    assert "reusing" in capsys.readouterr().out
