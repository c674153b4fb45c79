"""Every public name resolves, and the names the issues promise are there."""
import inspect

import streamrank as sr

CONTRACT = {
    "GroupStore": ["create", "open", "append", "blocks"],
    "TupleStore": ["create", "append", "batches"],
    "RankRLS": ["fit", "partial_fit", "predict", "path", "leave_query_out", "cross_validate", "fit_edges"],
    "KernelRankRLS": ["fit", "predict", "path", "leave_query_out", "leave_pair_out", "cross_validate"],
    "TransductiveRankRLS": ["fit_predict"],
    "SparseSGDRanker": ["partial_fit", "fit", "refit", "score"],
    "PairwiseSGDRanker": ["partial_fit", "fit", "predict"],
}


def test_every_public_name_resolves():
    for name in sr.__all__:
        assert getattr(sr, name) is not None, name


def test_contract_methods_exist():
    for cls_name, members in CONTRACT.items():
        cls = getattr(sr, cls_name)
        for m in members:
            assert hasattr(cls, m), f"{cls_name}.{m}"


def test_contract_constructor_signatures():
    params = lambda c: list(inspect.signature(c.__init__).parameters)[1:]  # noqa: E731
    assert params(sr.RankRLS)[:6] == ["alpha", "solver", "group_weight", "ties", "tol", "max_iter"]
    assert params(sr.KernelRankRLS)[:10] == ["kernel", "gamma", "degree", "coef0", "alpha", "n_basis",
                                             "basis", "group_weight", "ties", "random_state"]
    # issue 17: the flag ``refit`` is renamed ``auto_refit``; ``refit`` is the method only
    assert params(sr.SparseSGDRanker)[:8] == ["eta0", "l1", "shrink_every", "init", "learning_rate",
                                              "auto_refit", "refit_steps", "random_state"]
    assert callable(sr.SparseSGDRanker.refit) and callable(sr.SparseSGDRanker.predict)
    for fn in ("ndcg", "disagreement", "mean_average_precision", "auc", "tuple_error"):
        assert callable(getattr(sr.metrics, fn))
    for fn in ("fit", "predict"):
        assert callable(getattr(sr.distributed, fn))
    assert callable(sr.save) and callable(sr.load) and callable(sr.as_source) and callable(sr.pairs_from_groups)


def test_store_attributes(tmp_path):
    import numpy as np

    store = sr.GroupStore.create(tmp_path / "s.zarr", 3)
    assert store.append(np.ones((4, 3)), np.arange(4.0), [1, 1, 2, 2], batch_id="b") is True
    assert store.append(np.ones((4, 3)), np.arange(4.0), [1, 1, 2, 2], batch_id="b") is False
    store = sr.GroupStore.open(tmp_path / "s.zarr")
    assert (store.n_rows, store.n_groups, store.n_features) == (4, 2, 3)
