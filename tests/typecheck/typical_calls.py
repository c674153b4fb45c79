"""Typical calls of the public API, for a static type check of its hints (not collected by pytest).

Run (mypy is not a dependency: ``pip install mypy``):
``mypy tests/typecheck/typical_calls.py --follow-imports=silent --ignore-missing-imports``.
Expected: exactly the four errors of the deliberate misuses at the end, nothing else.  Not run in
the suite: one cold mypy run takes ~28 s on the 2-core test machine (more than the 20 s a test may).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

import streamrank as sr
from streamrank import distributed, exporters, plot
from streamrank.io.blocks import BlockSource
from streamrank.io.sources import ArraySource, as_source
from streamrank.io.tuples import ArrayTupleSource, TupleBatch, TupleSource, as_tuple_source

X = np.zeros((8, 3))
y = np.arange(8.0)
qid = np.repeat([1, 2], 4)

# ------------------------------------------------------------ io sources
src: BlockSource = as_source(X, y, qid)
arr = ArraySource(X, y, qid)
plan: list[tuple[int, int, int, int]] = src.plan(4, split_groups=True)
for block in src.blocks(4, shuffle=True, random_state=0):
    block.X
view = src.groups(0, 1)

Q = sp.eye(2, 3, format="csr")
D = sp.eye(3, 4, format="csr")
ts: TupleSource = as_tuple_source(Q, D, [[0, 1, 2]])
ats = ArrayTupleSource.from_arrays(Q, D, np.array([[0, 1, 2]]))
t, m = ts.read_tuples(0, 1)
Qm, Dm = ts.matrices()
batch: TupleBatch = ts.take(0, 1)
for b in ts.batches(batch_size=1, shuffle_buffer=0, random_state=np.random.default_rng(0)):
    b.Q

# ------------------------------------------------------------ distributed
model = sr.RankRLS(alpha=1.0)
fitted: sr.base.BaseRanker = distributed.fit(model, src, None, max_rows=4)
scores = distributed.predict(model, src, "tcp://127.0.0.1:8786", max_rows=4)
metrics: dict = distributed.evaluate(model, src, k=5, metrics=["ndcg@5"])
stats = distributed.statistics(model, src, folds=3)
sgd = distributed.fit_sgd_rounds(sr.SparseSGDRanker(), ts, rounds=2)

# ------------------------------------------------------------ exporters, plot
doc = exporters.export(model, "m.json", "json", feature_names=["a", "b", "c"])
desc = exporters.describe(model, feature_names=None)
fig = plot.regularization_path(None, "p.png", figsize=(4.0, 3.0), dpi=72, title="cv")
fig2 = plot.learning_curve(model, None)
fig3 = plot.convergence({"residual": [1.0]}, "c.png")
fig4 = plot.nightly_history("report.jsonl", metrics=["ndcg@10"])

# ------------------------------------------------------------ misuses the checker reports
as_source(X, y, qid).plan("many")                      # E: max_rows is an int
distributed.fit(model, src, max_rows="4")              # E: max_rows is an int
exporters.export(model, "m.json", feature_names="abc", name=3)   # E: name is a str
plot.convergence({}, dpi="high")                       # E: dpi is an int
