"""normalize= on a real LocalCluster: the moments reduce with the statistics (same model as the local fit);
the distributed paths that cannot gather them refuse instead of fitting an unnormalized model."""
from __future__ import annotations

import numpy as np
import pytest
from pipeline_data import make_store

import streamrank as sr
from streamrank import distributed as srd

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("dn") / "train.zarr", range(1, 5))


@pytest.mark.parametrize("kind", ["standard", "minmax"])
def test_distributed_primal_with_normalize_equals_local(client, store, kind):
    local = sr.RankRLS(alpha=0.5, solver="primal", normalize=kind).fit(store, max_rows=40)
    dist = srd.fit(sr.RankRLS(alpha=0.5, solver="primal", normalize=kind), store, client, max_rows=40,
                   split_every=3)
    np.testing.assert_allclose(dist.normalizer_.offset, local.normalizer_.offset, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dist.normalizer_.scale, local.normalizer_.scale, rtol=1e-10)
    np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-9, atol=1e-12)


def test_distributed_paths_without_moments_refuse(client, store):
    with pytest.raises(NotImplementedError, match="normalize"):
        srd.fit(sr.RankRLS(alpha=0.5, solver="cg", normalize="standard"), store, client, max_rows=40)
    with pytest.raises(NotImplementedError, match="normalize"):
        srd.fit(sr.KernelRankRLS(kernel="rbf", n_basis=10, random_state=0, normalize="standard"), store, client,
                max_rows=40)
    with pytest.raises(NotImplementedError, match="normalize"):
        srd.fit(sr.PairwiseSGDRanker(normalize="minmax"), store, client)
