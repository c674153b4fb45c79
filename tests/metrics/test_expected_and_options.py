"""Expected-value metrics against an exhaustive average over tie orders (small groups) and a Monte-Carlo
average (a real query); the options gain/empty/k-list/ties; the new kernels' edge cases; streaming."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import metrics_reference as ref
import streamrank as sr
from streamrank.metrics import _kernels as K

M = sr.metrics

# metric function, its reference on one order, options
ORDER_REFS = {
    "ndcg": (M.ndcg, lambda y, o, k: ref.ndcg_of_order(y, o, k)),
    "map": (M.mean_average_precision, lambda y, o, k: ref.ap_of_order(y, o, k)),
    "precision": (M.precision, lambda y, o, k: ref.hits_of_order(y, o, k) / (k if k else len(o))
                  if np.any(np.asarray(y) > 0) else np.nan),
    "recall": (M.recall, lambda y, o, k: ref.hits_of_order(y, o, k) / np.sum(np.asarray(y) > 0)
               if np.any(np.asarray(y) > 0) else np.nan),
    "rr": (M.reciprocal_rank, lambda y, o, k: ref.rr_of_order(y, o, k)),
    "err": (M.err, lambda y, o, k: ref.err_of_order(y, o, k)),
}


@pytest.mark.slow   # 40 brute-force averages over all tie orders: 2.8 s wall under load 11
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), seed=st.integers(0, 10**6), levels=st.integers(1, 5),
       score_levels=st.integers(1, 4), k=st.sampled_from([None, 1, 2, 4]))
def test_expected_value_equals_exhaustive_average_over_tie_orders(n, seed, levels, score_levels, k):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, levels, n).astype(float)
    s = rng.integers(0, score_levels, n).astype(float)
    for name, (fn, one) in ORDER_REFS.items():
        want = ref.expected_over_ties(one, y, s, k)
        got = fn(y, s, k=k, per_query=True)[0]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15, equal_nan=True, err_msg=name)


@pytest.mark.slow   # Monte Carlo draws: ~1.3 s warm
def test_monte_carlo_on_a_real_query_with_heavy_ties():
    """One MQ2008 query (its labels), scores on three levels: the closed form sits within 4 standard errors
    of the mean over 2,000 random tie orders, for every metric."""
    from streamrank.datasets._paths import data_dir
    from streamrank.datasets.letor import letor_member, open_letor

    path = data_dir() / "letor" / "MQ2008_QueryLevelNorm.tar.gz"
    if not path.exists():
        pytest.skip(f"{path} is not available")
    y, q0 = [], None
    with open_letor(path, letor_member("MQ2008", 1, "test")) as (f, _):
        for raw in f:
            label, qid = raw.split()[:2]
            if q0 is None or (qid == q0 and len(y) < 40):
                q0 = qid
                y.append(float(label))
            elif sum(v > 0 for v in y) >= 2:
                break
            else:                                  # need a query with at least two relevant documents
                q0, y = qid, [float(label)]
    y = np.asarray(y)
    s = np.random.default_rng(1).integers(0, 3, len(y)).astype(float)
    rng = np.random.default_rng(2)
    for name, (fn, one) in ORDER_REFS.items():
        for k in (5, None):
            mean, se = ref.monte_carlo_over_ties(one, y, s, 2000, rng, k)
            got = fn(y, s, k=k)
            assert abs(got - mean) <= 4 * se + 1e-12, (name, k, got, mean, se)


def test_issue_numbers_constant_scores():
    """Constant scores: AP is the expected AP of a random order (the issue's 0.442 on MQ2008), not the
    step-wise R/n of scikit-learn; one relevant of n has expected AP H_n / n."""
    n = 7
    y = np.zeros(n)
    y[3] = 1
    assert M.mean_average_precision(y, np.ones(n)) == pytest.approx(sum(1 / r for r in range(1, n + 1)) / n)
    assert M.reciprocal_rank(y, np.ones(n)) == pytest.approx(sum(1 / r for r in range(1, n + 1)) / n)
    assert M.precision(y, np.ones(n), k=2) == pytest.approx(2 / n / 2)


def test_options_gain_empty_k_list_and_names():
    y = np.array([2.0, 0, 1, 0, 0, 0])
    s = np.array([0.1, 0.9, 0.5, 0.3, 0.2, 0.4])
    qid = np.array([1, 1, 1, 2, 2, 2])                # query 2 has no relevant item
    lin = M.ndcg(y, s, qid, k=3, gain="linear", return_details=True)
    assert lin.n_queries == 1 and lin.n_skipped == 1
    order = [1, 2, 0]
    assert lin.value == pytest.approx(ref.ndcg_of_order(y[:3], order, 3, linear=True), rel=1e-12)
    assert M.ndcg(y, s, qid, k=3) == pytest.approx(ref.ndcg_of_order(y[:3], order, 3), rel=1e-12)
    for fn in (M.ndcg, M.mean_average_precision, M.precision, M.recall, M.reciprocal_rank, M.err):
        skip = fn(y, s, qid, return_details=True)
        zero = fn(y, s, qid, empty="zero", return_details=True)
        one = fn(y, s, qid, empty="one", return_details=True)
        assert (skip.n_queries, skip.n_skipped, zero.n_queries, zero.n_skipped) == (1, 1, 2, 0), fn.__name__
        assert zero.value == pytest.approx(skip.value / 2) and one.value == pytest.approx((skip.value + 1) / 2)
        np.testing.assert_array_equal(zero.per_query, [skip.per_query[0], 0.0])
        assert zero.by_qid() == {1: skip.per_query[0], 2: 0.0}
        with pytest.raises(ValueError, match="empty must be one of"):
            fn(y, s, qid, empty="nan")
        with pytest.raises(ValueError, match="gain must be one of"):
            fn(y, s, qid, gain="exp")
        with pytest.raises(ValueError, match="ties must be one of"):
            fn(y, s, qid, ties="random")
        with pytest.raises(ValueError, match="pass doc_ids"):
            fn(y, s, qid, ties="trec")
    many = M.ndcg(y, s, qid, k=[1, 3, None])
    assert list(many) == [1, 3, None]
    assert many[3] == M.ndcg(y, s, qid, k=3) and many[None] == M.ndcg(y, s, qid, k=None)
    with pytest.raises(ValueError, match="k must be"):
        M.precision(y, s, qid, k=[3, 0])
    with pytest.raises(ValueError, match="labels must lie in"):
        M.err(y, s, qid, max_grade=1)


def test_trec_ties_order_by_docid_descending_and_reject_duplicates():
    y = np.array([1.0, 0.0, 0.0])
    s = np.ones(3)
    # trec_eval puts "c" first (docid descending): the relevant "c" scores 1
    assert M.precision(y[[2, 1, 0]], s, k=1, ties="trec", doc_ids=["a", "b", "c"]) == 1.0
    assert M.precision(y, s, k=1, ties="trec", doc_ids=["a", "b", "c"]) == 0.0
    assert M.precision(y, s, k=1, ties="trec", doc_ids=[10, 9, 100]) == 0.0    # "9" > "100" > "10" as strings
    assert M.precision(y, s, k=1, ties="trec", doc_ids=[9, 10, 100]) == 1.0
    with pytest.raises(ValueError, match="appears twice in query 4"):
        M.ndcg(y, s, [4, 4, 4], ties="trec", doc_ids=["a", "b", "a"])
    with pytest.raises(ValueError, match="doc_ids must be 1-D with one id per row"):
        M.ndcg(y, s, ties="trec", doc_ids=["a", "b"])


@pytest.mark.parametrize("kernel", ["err", "ap", "hits", "rr"])
def test_new_kernels_edge_cases(kernel):
    """Empty group, one-row group, all-tied scores, and zero groups, against the order references."""
    y = np.array([1.0, 2, 0, 1, 0, 2, 1, 0])
    s = np.array([0.5, 7, 7, 7, 7, 7, 3, 1])
    gp = np.array([0, 0, 1, 6, 8], dtype=np.int64)
    ks = np.array([0, 2], dtype=np.int64)
    out = np.full((4, 2), -9.0)
    pos = np.concatenate(([0], np.cumsum(y > 0)))
    n_rel = (pos[gp[1:]] - pos[gp[:-1]]).astype(np.int64)
    run = {"err": lambda o: K.err_groups(y, s, gp, ks, True, 4.0, o),
           "ap": lambda o: K.average_precision_groups(y, s, gp, n_rel, ks, o),
           "hits": lambda o: K.hits_groups(y, s, gp, ks, o),
           "rr": lambda o: K.reciprocal_rank_groups(y, s, gp, ks, o)}[kernel]
    run(out)
    one = {"err": ref.err_of_order, "ap": ref.ap_of_order, "hits": ref.hits_of_order, "rr": ref.rr_of_order}[kernel]
    if kernel == "hits":
        assert out[0, 0] == out[0, 1] == 0.0
    else:
        assert np.isnan(out[0]).all()                     # empty group: no relevant item
    for g in (1, 2, 3):
        a, b = gp[g], gp[g + 1]
        for j, k in enumerate((None, 2)):
            want = ref.expected_over_ties(one, y[a:b], s[a:b], k)
            np.testing.assert_allclose(out[g, j], want, rtol=1e-12, err_msg=f"{kernel} group {g} k={k}")
    empty = np.empty((0, 2))
    {"err": lambda: K.err_groups(y[:0], s[:0], gp[:1], ks, True, 4.0, empty),
     "ap": lambda: K.average_precision_groups(y[:0], s[:0], gp[:1], n_rel[:0], ks, empty),
     "hits": lambda: K.hits_groups(y[:0], s[:0], gp[:1], ks, empty),
     "rr": lambda: K.reciprocal_rank_groups(y[:0], s[:0], gp[:1], ks, empty)}[kernel]()


def test_err_large_tied_run_is_exact_and_in_range():
    """A run of 60 tied items: the O(m^2 t) recurrence stays a probability and matches Monte-Carlo."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 60).astype(float)
    s = np.zeros(60)
    got = M.err(y, s, k=None)
    mean, se = ref.monte_carlo_over_ties(ref.err_of_order, y, s, 3000, rng, None)
    assert 0 < got < 1 and abs(got - mean) <= 4 * se


def test_boundary_float32_and_read_only_give_the_same_numbers():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 3, 50).astype(float)
    s = rng.integers(0, 5, 50).astype(np.float32)
    qid = np.repeat(np.arange(5), 10)
    for fn in (M.ndcg, M.err, M.mean_average_precision, M.precision, M.recall, M.reciprocal_rank):
        want = fn(y, s.astype(np.float64), qid, per_query=True)
        ro_y, ro_s = y.copy(), s.copy()
        ro_y.setflags(write=False)
        ro_s.setflags(write=False)
        np.testing.assert_array_equal(fn(ro_y, ro_s, qid, per_query=True), want)
        np.testing.assert_array_equal(fn(y.astype(np.int32), s[::1], qid, per_query=True), want)


@pytest.mark.filterwarnings("ignore:.*exceed the block budget")
@settings(max_examples=15, deadline=None)
@given(max_rows=st.integers(1, 40), seed=st.integers(0, 100))
def test_streaming_new_metrics_equals_arrays(max_rows, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 10, 20)
    m = int(sizes.sum())
    X = rng.normal(size=(m, 3))
    w = rng.normal(size=3)
    y = np.clip(np.round(X @ w), 0, 3)
    qid = np.repeat(np.arange(20) + 7, sizes)
    s = np.round(X @ w, 1)                              # some ties
    src = sr.as_source(X, y, qid)
    res = M.evaluate(src, lambda X_: np.round(X_ @ w, 1), metrics="ndcg@1,3,map,mrr,p@5,recall@5,err@5",
                     max_rows=max_rows, gain="linear", empty="zero")
    assert res["ndcg@3"].value == pytest.approx(M.ndcg(y, s, qid, k=3, gain="linear", empty="zero"), rel=1e-12)
    assert res["map"].value == pytest.approx(M.mean_average_precision(y, s, qid, empty="zero"), rel=1e-12)
    assert res["mrr"].value == pytest.approx(M.reciprocal_rank(y, s, qid, empty="zero"), rel=1e-12)
    assert res["p@5"].value == pytest.approx(M.precision(y, s, qid, k=5, empty="zero"), rel=1e-12)
    assert res["recall@5"].value == pytest.approx(M.recall(y, s, qid, k=5, empty="zero"), rel=1e-12)
    assert res["err@5"].value == pytest.approx(M.err(y, s, qid, k=5, gain="linear", empty="zero"), rel=1e-12)
    assert res["map"].n_queries == 20 and res["map"].n_skipped == 0


def test_split_groups_with_doc_ids_follow_the_trec_order():
    """Pieces of a group arrive in any order with their doc ids; the trec order is taken on the whole group."""
    y = np.array([1.0, 0, 2, 0, 1])
    s = np.array([0.5, 0.5, 0.9, 0.5, 0.1])
    ids = np.array(["d1", "d4", "d2", "d3", "d5"])
    want = M.ndcg(y, s, k=3, ties="trec", doc_ids=ids)
    ev = M.RankingEvaluator(3, "ndcg", ties="trec")
    ev.update(y[2:], s[2:], None, qid=[9], group_size=[5], group_offset=[2], doc_ids=ids[2:])
    ev.update(y[:2], s[:2], None, qid=[9], group_size=[5], group_offset=[0], doc_ids=ids[:2])
    assert ev.result()["ndcg@3"].value == want
    other = M.RankingEvaluator(3, "ndcg", ties="expected")
    with pytest.raises(ValueError, match="same metrics and options"):
        ev.merge(other)


def test_parse_metrics_names():
    assert M.parse_metrics("ndcg@1,3,5,10,map,mrr,p@10,err@10") == [
        ("ndcg", (1, 3, 5, 10)), ("map", (0,)), ("rr", (0,)), ("precision", (10,)), ("err", (10,))]
    assert M.parse_metrics(["NDCG", "P", "recall@20"], k=5) == [("ndcg", (5,)), ("precision", (5,)),
                                                               ("recall", (20,))]
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        M.parse_metrics("ndcg@10,bleu")
    with pytest.raises(ValueError, match="cut-off after @"):
        M.parse_metrics("ndcg@x")


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(0, 8), min_size=1, max_size=5), seed=st.integers(0, 10**6),
       kind=st.sampled_from(["text", "unicode", "bytes", "int"]), score_levels=st.integers(1, 4))
def test_trec_rank_kernel_matches_sorted_reference(sizes, seed, kind, score_levels):
    """The kernel's order per group is Python's sort by (score desc, id desc as UTF-8 bytes); empty and one-row
    groups, all-tied scores, ids that are prefixes of others, non-ASCII and integer ids."""
    from streamrank.metrics._checks import _byte_words

    rng = np.random.default_rng(seed)
    gp = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    n = int(gp[-1])
    s = rng.integers(0, score_levels, n).astype(np.float64)
    alphabet = {"text": ["a", "b", "ab", "ba", "abc", "", "b0"], "unicode": ["é", "e", "ü", "z", "日本", "a"],
                "bytes": ["a", "b", "ab", "zz", "a0"], "int": [1, 10, 9, 100, 2, 20]}[kind]
    ids = []
    for g in range(len(sizes)):
        pool = list(alphabet) + [f"x{i}" for i in range(10)] if kind != "int" else alphabet + list(range(30, 40))
        pick = rng.permutation(len(pool))[:sizes[g]]
        ids += [pool[i] for i in pick]
    ids = np.array(ids, dtype=object if kind == "int" else None)
    if kind == "bytes":
        ids = np.array([str(i).encode() for i in ids]) if n else np.zeros(0, "S1")
    elif kind == "int":
        ids = np.array([int(i) for i in ids], dtype=np.int64)
    text = ids.astype(str) if ids.dtype.kind not in "US" else ids
    out = np.empty(n)
    assert K.trec_rank_groups(s, _byte_words(text), gp, out) == -1
    for g in range(len(sizes)):
        a, b = gp[g], gp[g + 1]
        keys = [x.decode() if isinstance(x, bytes) else str(x) for x in ids[a:b].tolist()]
        want = ref.trec_order(s[a:b], keys)           # str order = code-point order = UTF-8 byte order
        assert list(np.argsort(-out[a:b], kind="stable")) == want


def test_trec_rank_kernel_reports_the_repeated_id():
    from streamrank.metrics._checks import _byte_words

    ids = np.array(["a", "b", "c", "b"])
    out = np.empty(4)
    row = K.trec_rank_groups(np.zeros(4), _byte_words(ids), np.array([0, 2, 4], np.int64), out)
    assert row == -1                                                   # "b" twice, but in two queries
    row = K.trec_rank_groups(np.zeros(4), _byte_words(ids), np.array([0, 4], np.int64), out)
    assert ids[row] == "b"


def test_public_api_contract_signatures():
    """Issue 21's contract: (y_true, y_score, qid=None, k=..., *, gain=..., empty=..., ties=..., doc_ids=None, ...)."""
    import inspect

    for name in ("ndcg", "mean_average_precision", "precision", "recall", "reciprocal_rank", "err"):
        params = inspect.signature(getattr(M, name)).parameters
        positional = [p for p in params.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert [p.name for p in positional] == ["y_true", "y_score", "qid", "k"], name
        assert params["qid"].default is None
        keyword = {p.name: p for p in params.values() if p.kind is p.KEYWORD_ONLY}
        assert {"gain", "empty", "ties", "doc_ids"} <= set(keyword), name
        assert keyword["doc_ids"].default is None
        assert (keyword["gain"].default, keyword["empty"].default, keyword["ties"].default) == \
            ("exp2", "skip", "expected"), name
