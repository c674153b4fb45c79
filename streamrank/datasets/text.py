"""Plain text to L2-normalised tf-idf vectors (CSR), without scikit-learn.

* :func:`tokenize` — lower-case words ``[a-z][a-z0-9']*`` of at least two
  characters (apostrophes dropped), an optional short English stop list;
* :class:`Vocabulary` — the ``max_features`` most frequent training words
  (total count over the training documents; ties broken alphabetically),
  with document frequencies;
* :meth:`Vocabulary.tfidf` — raw term counts times the smoothed inverse
  document frequency ``idf(t) = ln((1 + N) / (1 + df(t))) + 1`` (N training
  documents), each row scaled to unit L2 norm (rows without a vocabulary
  word stay zero).  This is the "normalized tf-idf of the 10,000 most
  frequent words" of the sparse-SGD paper (Chen et al., ICDM 2010, §IV.A).
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

import numpy as np
import scipy.sparse as sp

__all__ = ["STOP_WORDS", "tokenize", "Vocabulary"]

_WORD = re.compile(r"[a-z][a-z0-9']*")

STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she should
so some such than that the their theirs them themselves then there these they this those through to
too under until up very was we were what when where which while who whom why will with would you your
yours yourself yourselves also may might must shall us one re s t don
""".split())


def tokenize(text: str, *, stop_words: bool = True) -> list[str]:
    """Lower-case word tokens of ``text`` (length >= 2, stop words removed by default)."""
    words = (w.replace("'", "") for w in _WORD.findall(text.lower()))
    if stop_words:
        return [w for w in words if len(w) >= 2 and w not in STOP_WORDS]
    return [w for w in words if len(w) >= 2]


class Vocabulary:
    """The most frequent words of a training corpus and their document frequencies.

    Build with :meth:`fit` (token lists of the training documents), then
    turn any token lists into tf-idf rows with :meth:`tfidf`.
    """

    def __init__(self, words: list[str], df: np.ndarray, n_docs: int):
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.df = np.asarray(df, dtype=np.int64)
        self.n_docs = int(n_docs)
        self.idf = np.log((1.0 + self.n_docs) / (1.0 + self.df)) + 1.0

    def __len__(self):
        return len(self.words)

    @classmethod
    def fit(cls, docs_tokens: Iterable[list[str]], max_features: int = 10_000) -> "Vocabulary":
        """Keep the ``max_features`` words with the largest total count."""
        if int(max_features) < 1:
            raise ValueError(f"max_features must be >= 1, got {max_features!r}")
        tf: Counter = Counter()
        df: Counter = Counter()
        n = 0
        for toks in docs_tokens:
            tf.update(toks)
            df.update(set(toks))
            n += 1
        ranked = sorted(tf.items(), key=lambda kv: (-kv[1], kv[0]))[: int(max_features)]
        words = [w for w, _ in ranked]
        return cls(words, np.array([df[w] for w in words], dtype=np.int64), n)

    def counts(self, docs_tokens: Iterable[list[str]]) -> sp.csr_matrix:
        """Raw term counts (docs, len(vocabulary)) as CSR float64."""
        indptr = [0]
        indices: list[int] = []
        index = self.index
        for toks in docs_tokens:
            ids = [index[t] for t in toks if t in index]
            indices.extend(ids)
            indptr.append(len(indices))
        data = np.ones(len(indices), dtype=np.float64)
        M = sp.csr_matrix((data, np.asarray(indices, dtype=np.int32), np.asarray(indptr, dtype=np.int64)),
                          shape=(len(indptr) - 1, len(self.words)))
        M.sum_duplicates()  # counts; also sorts the indices
        return M

    def tfidf(self, docs_tokens: Iterable[list[str]]) -> sp.csr_matrix:
        """L2-normalised tf-idf rows (CSR float32): ``tf(t, d) * idf(t) / ||.||_2``."""
        M = self.counts(docs_tokens)
        M.data *= self.idf[M.indices]
        return l2_normalize(M)


def l2_normalize(M) -> sp.csr_matrix:
    """Rows of CSR ``M`` scaled to unit L2 norm (zero rows unchanged), float32."""
    M = sp.csr_matrix(M, dtype=np.float64, copy=True)
    sq = np.bincount(np.repeat(np.arange(M.shape[0]), np.diff(M.indptr)), weights=M.data**2,
                     minlength=M.shape[0])
    norms = np.sqrt(sq)
    norms[norms == 0] = 1.0
    M.data /= np.repeat(norms, np.diff(M.indptr))
    return M.astype(np.float32)
