"""Fitting RankRLS on a small store imports no numba; past the twins' budget the kernels run (issue 22).

A fresh interpreter (the test process has set numba up long ago, and its
conftest forces the kernels): a store of 10,000 x 46 (MQ2008 Fold1's size) is
written, read and fitted with the read checks' and the scaling's numpy twins;
the README's ten lines (20,000 x 20, 15,000 appended, RankRLS fit, predict,
ndcg) likewise.  Then, with the budget cut below the fit's estimate, the same fit
sets numba up and runs the kernels, and gives the same coefficients bit for bit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

CHILD = """
import json, sys
import numpy as np
import streamrank as sr
from streamrank import _numba
from streamrank.datasets.synthetic import make_letor_like

out = {}
X, y, qid = make_letor_like(n_rows=10_000, n_features=46, random_state=1)
sr.GroupStore.create("small.zarr", n_features=46).append(X.astype(np.float32), y, qid, batch_id="day-1")
coef = sr.RankRLS(alpha=1.0).fit(sr.GroupStore.open("small.zarr")).coef_
out["small_fit"] = "numba" in sys.modules

# the README's ten lines, as written there
X, y, qid = make_letor_like(n_rows=20_000, n_features=20, random_state=0)
store = sr.GroupStore.create("train.zarr", n_features=20, overwrite=True)
store.append(X[:15_000], y[:15_000], qid[:15_000], batch_id="day-1")   # idempotent, atomic
model = sr.RankRLS(alpha=1.0).fit(store)                                 # one streaming pass
scores = model.predict(X[15_000:])
out["ten_lines_fit_predict"] = "numba" in sys.modules
print(sr.metrics.ndcg(y[15_000:], scores, qid[15_000:], k=10), file=sys.stderr)
out["ten_lines_ndcg"] = "numba" in sys.modules

# past the budget: the read check (0.5 ms estimated) still fits in 2 ms, the scaling (~10 ms) does not
_numba._budget[0] = 0.002
again = sr.RankRLS(alpha=1.0).fit(sr.GroupStore.open("small.zarr")).coef_
out["over_budget_numba"] = "numba" in sys.modules and _numba.numba_ready()
from streamrank.rankrls import _statistics_kernels as SK
from streamrank.io import _check_kernels as CK
out["fill_scaled_ran"] = len(SK.fill_scaled.signatures)
out["same_bits"] = again.tobytes() == coef.tobytes()
sr.RankRLS(alpha=1.0).fit(sr.GroupStore.open("small.zarr"))           # numba set up: the read checks' kernels
out["first_nonfinite_ran"] = len(CK.first_nonfinite.signatures)
print(json.dumps(out))
"""


def test_small_fits_import_no_numba_and_the_budget_hands_over_to_the_kernels(tmp_path):
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", str(tmp_path / "cache"))   # the session's cache when it has one
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD)], capture_output=True, text=True,
                         cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["small_fit"] is False
    assert out["ten_lines_fit_predict"] is False
    assert out["ten_lines_ndcg"] is False                        # the metrics' twins (tests/metrics) too
    assert out["over_budget_numba"] is True
    assert out["fill_scaled_ran"] >= 1 and out["first_nonfinite_ran"] >= 1
    assert out["same_bits"] is True
