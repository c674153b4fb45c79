"""Tokenizer, tf-idf and class tuples against hand computations."""
from __future__ import annotations

import numpy as np
import pytest

from streamrank.datasets.text import Vocabulary, l2_normalize, tokenize
from streamrank.datasets.tuples import check_class_tuples, class_tuples


def test_tokenize():
    assert tokenize("The Cat's 2 cats, x-ray AND dog42!") == ["cats", "cats", "ray", "dog42"]
    assert tokenize("The a", stop_words=False) == ["the"]


def test_vocabulary_and_tfidf_by_hand():
    docs = [["apple", "pear", "apple"], ["pear", "kiwi"], ["fig"]]
    v = Vocabulary.fit(docs, max_features=3)
    assert v.words == ["apple", "pear", "fig"]          # counts 2, 2, 1; ties alphabetical
    np.testing.assert_array_equal(v.df, [1, 2, 1])
    X = v.tfidf([["apple", "pear", "apple", "zzz"], ["kiwi"]]).toarray()
    idf = np.log(4 / (1 + np.array([1, 2, 1]))) + 1
    row = np.array([2, 1, 0]) * idf
    np.testing.assert_allclose(X[0], row / np.linalg.norm(row), rtol=1e-6)
    np.testing.assert_array_equal(X[1], 0)                # no vocabulary word: zero row
    assert X.dtype == np.float32
    with pytest.raises(ValueError, match="max_features"):
        Vocabulary.fit(docs, 0)


def test_l2_normalize_keeps_zero_rows():
    import scipy.sparse as sp

    X = l2_normalize(sp.csr_matrix(np.array([[3.0, 4.0], [0.0, 0.0]])))
    np.testing.assert_allclose(X.toarray(), [[0.6, 0.8], [0, 0]])


@pytest.mark.parametrize("same_set", [True, False])
def test_class_tuples_are_valid_uniform_and_chunk_independent(same_set):
    rng = np.random.default_rng(0)
    ld = rng.integers(0, 4, 200)
    lq = ld if same_set else rng.integers(0, 4, 50)
    t = class_tuples(lq, ld, 40_000, same_set=same_set, chunk_tuples=40_000, random_state=3)
    check_class_tuples(t, lq, ld, same_set=same_set)
    # d- uniform over the other-class items of each query class: item frequencies are flat
    for c in range(4):
        neg = t[lq[t[:, 0]] == c, 2]
        freq = np.bincount(neg, minlength=200)[ld != c]
        assert freq.min() > 0.5 * freq.mean()
    t2 = class_tuples(lq, ld, 40_000, same_set=same_set, chunk_tuples=40_000, random_state=3)
    np.testing.assert_array_equal(t, t2)


def test_class_tuples_errors():
    with pytest.raises(ValueError, match="no query"):
        class_tuples([0, 0], [0, 0], 5, same_set=True)
    with pytest.raises(ValueError, match="breaks the class rule"):
        check_class_tuples([[0, 1, 1]], [0, 1], [0, 1])
