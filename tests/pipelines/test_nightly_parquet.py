"""The nightly pipeline takes a Parquet day file; a query that comes back another day is a new group (issue 18)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import streamrank as sr
from pipeline_data import make_day
from _lazy_modules import LazyModule, needs

pa = LazyModule("pyarrow")          # imported by the first test that uses it, not at collection
pq = LazyModule("pyarrow.parquet")
pytestmark = needs("pyarrow")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from streamrank.pipelines import nightly  # noqa: E402


def _parquet_day(tmp, d, *, names=None):
    X, y, qid = make_day(d, n_groups=30)
    qid = qid % 1000                         # the same queries every day, as click logs have them
    names = names or [f"feat_{j}" for j in range(X.shape[1])]
    cols = {"query": [f"query-{q}" for q in qid], "clicks": y}
    cols.update({n: X[:, j] for j, n in enumerate(names)})
    path = tmp / f"day-{d}.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=37)   # queries straddle row groups
    return path, X, y, qid


@pytest.mark.slow   # nightly runs from Parquet: ~1 s warm
def test_nightly_takes_parquet_days_with_recurring_string_queries(tmp_path, capsys):
    store, models = tmp_path / "logs.zarr", tmp_path / "models"
    p1, X1, y1, q1 = _parquet_day(tmp_path, 1)
    # day 2 writes its columns in another order: matched by name
    p2, X2, y2, q2 = _parquet_day(tmp_path, 2, names=None)
    t2 = pq.read_table(p2)
    pq.write_table(t2.select(["clicks", "feat_3", "query"] + [f"feat_{j}" for j in (0, 1, 2, 4, 5)]), p2,
                   row_group_size=37)
    for p in (p1, p2):
        assert nightly.main(["--store", str(store), "--new", str(p), "--models", str(models), "--label", "clicks",
                             "--qid", "query", "--alphas", "0.5,2", "--no-plot"]) == 0
    s = sr.GroupStore.open(store)
    assert s.group_identity == "batch" and s.qid_kind == "str"
    assert s.n_groups == 60 and list(s.qid[:30]) == list(s.qid[30:])      # each day's queries: new groups
    assert s.feature_names == [f"feat_{j}" for j in range(6)]
    batches = s.group_batches()
    assert len(set(batches[:30])) == 1 and batches[0] != batches[30]
    ref = sr.RankRLS(alpha=1.0).fit(np.vstack([X1, X2]), np.concatenate([y1, y2]),
                                   np.concatenate([[f"d1-{q}" for q in q1], [f"d2-{q}" for q in q2]]))
    got = sr.RankRLS(alpha=1.0).fit(s)
    np.testing.assert_allclose(got.coef_, ref.coef_, rtol=1e-8)
    assert list(sr.load(models / "current").feature_names_in_) == s.feature_names
    # the same day again adds nothing
    assert nightly.main(["--store", str(store), "--new", str(p2), "--models", str(models), "--label", "clicks",
                         "--qid", "query", "--alphas", "0.5,2", "--no-plot"]) == 0
    assert sr.GroupStore.open(store).n_groups == 60
