"""normalize= on a real LocalCluster: the moments reduce with the statistics (primal), ride on the diagonal pass
(cg) or the basis reservoir (sparse kernel), or are reduced once before the SGD rounds — same model as the local
fit."""
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


@pytest.mark.parametrize("kind", ["standard", "minmax"])
def test_distributed_cg_with_normalize_equals_local(client, store, kind):
    """The moments ride on the distributed Jacobi-diagonal pass; the iterates are the local solver's."""
    args = dict(alpha=0.5, solver="cg", tol=1e-12, max_iter=300, normalize=kind)
    local = sr.RankRLS(**args).fit(store, max_rows=40)
    dist = srd.fit(sr.RankRLS(**args), store, client, max_rows=40, split_every=3)
    np.testing.assert_allclose(dist.normalizer_.offset, local.normalizer_.offset, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dist.normalizer_.scale, local.normalizer_.scale, rtol=1e-10)
    np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-8, atol=1e-11)
    X = np.vstack([b.X for b in store.blocks()])
    np.testing.assert_allclose(dist.predict(X), local.predict(X), rtol=1e-8, atol=1e-9)
    assert dist.cg_info_["n_passes"] == local.cg_info_["n_passes"]      # no pass of its own for the moments


@pytest.mark.parametrize("basis", ["random", "given"])
def test_distributed_sparse_kernel_with_normalize_equals_local(client, store, basis):
    X = np.vstack([b.X for b in store.blocks()])
    b = "random" if basis == "random" else X[::9][:12].astype(np.float64)
    args = dict(kernel="rbf", gamma=0.3, alpha=0.5, n_basis=12, basis=b, random_state=4, normalize="standard")
    local = sr.KernelRankRLS(**args).fit(store, max_rows=40)
    dist = srd.fit(sr.KernelRankRLS(**args), store, client, max_rows=40, split_every=3)
    np.testing.assert_allclose(dist.normalizer_.scale, local.normalizer_.scale, rtol=1e-10)
    np.testing.assert_allclose(dist.basis_, local.basis_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dist.dual_coef_, local.dual_coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(dist.predict(X), local.predict(X), rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("kind", ["standard", "minmax"])
def test_distributed_pairwise_sgd_with_normalize(client, store, kind):
    """One normalizer, of all rows, reduced on the cluster before the rounds; one shard = the rounds run locally
    with that normalizer (each round: partial_fit on the round's block)."""
    import copy

    rounds, steps, max_rows = 4, 150, 40
    dist = srd.fit(sr.PairwiseSGDRanker(eta0=0.05, normalize=kind), store, client, rounds=rounds,
                   steps_per_round=steps, n_shards=1, max_rows=max_rows)
    ref = sr.PairwiseSGDRanker(eta0=0.05, normalize=kind).fit(store, n_pairs=10)
    np.testing.assert_allclose(dist.normalizer_.offset, ref.normalizer_.offset, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dist.normalizer_.scale, ref.normalizer_.scale, rtol=1e-10)
    m = sr.PairwiseSGDRanker(eta0=0.05, normalize=kind).init_state(store.n_features)
    m.normalizer_ = ref.normalizer_
    plan = store.plan(max_rows)
    for r in range(rounds):
        m = copy.deepcopy(m)
        block = store.read_block(*plan[r % len(plan)])
        m.partial_fit(block.X, block.y, block.row_qid(), n_pairs=steps)
    np.testing.assert_allclose(dist.coef_, m.coef_, rtol=1e-12, atol=1e-14)
    assert not np.allclose(dist.coef_, 0)
    # two shards: the average still scales by the one normalizer of all rows
    two = srd.fit(sr.PairwiseSGDRanker(eta0=0.05, normalize=kind), store, client, rounds=2, steps_per_round=steps,
                  n_shards=2, max_rows=max_rows)
    np.testing.assert_array_equal(two.normalizer_.scale, dist.normalizer_.scale)


def test_cli_distributed_normalize_equals_the_local_fit(client, store, tmp_path):
    """``streamrank distributed --normalize KIND``: the library's normalize= from the command line (rankrls
    primal and sparse kernel here), the same model as the local fit."""
    from streamrank.pipelines import distributed as pdist

    for extra, local in ((["--learner", "rankrls", "--solver", "primal"],
                          sr.RankRLS(alpha=0.5, solver="primal", normalize="minmax")),
                         (["--learner", "sparse-kernel", "--n-basis", "12", "--gamma", "0.1", "--seed", "3"],
                          sr.KernelRankRLS(gamma=0.1, alpha=0.5, n_basis=12, random_state=3, normalize="minmax"))):
        out = tmp_path / extra[1]
        assert pdist.main(["--store", str(store.path), "--model", str(out), "--scheduler", client.scheduler.address,
                           "--alpha", "0.5", "--max-rows", "40", "--normalize", "minmax", "-q", *extra]) == 0
        model, local = sr.load(out), local.fit(store, max_rows=40)
        assert model.normalize == "minmax"
        np.testing.assert_allclose(model.normalizer_.scale, local.normalizer_.scale, rtol=1e-10)
        X = np.vstack([b.X for b in store.blocks()])
        np.testing.assert_allclose(model.predict(X), local.predict(X), rtol=1e-8, atol=1e-10)
