"""Reuters-21578 (ModApte split) to tf-idf vectors with one binary relevance column per topic.

The SGML files ``reut2-000.sgm`` .. ``reut2-021.sgm`` are read straight from
the distribution tar.gz.  ModApte (README of the distribution, §VIII.B):
training = ``LEWISSPLIT="TRAIN"`` and ``TOPICS="YES"`` (9,603 stories), test =
``LEWISSPLIT="TEST"`` and ``TOPICS="YES"`` (3,299).  A story's text is its
TITLE and BODY (SGML entities decoded).  The ``n_topics`` (25) most frequent
topics of the training stories become the output columns: ``Y[i, j] = 1`` if
story i carries topic j, else 0 (some stories have several topics, some
none).  Each column is an object-ranking task evaluated by AUC, as in
Pahikkala et al. 2009, §5.4 (who train on 500 stories and test on the rest:
``train_size=500``).
"""
from __future__ import annotations

import html
import re
import tarfile
from collections import Counter
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .text import Vocabulary, tokenize
from ._paths import data_path

__all__ = ["CITATION", "DEFAULT_ARCHIVE", "TopicData", "read_reuters", "load_reuters"]

DEFAULT_ARCHIVE = str(data_path("reuters21578", "reuters21578.tar.gz"))
CITATION = ("Reuters-21578, Distribution 1.0 (D. D. Lewis; Reuters Ltd. and Carnegie Group, Inc.), "
            "ModApte split; research use only.")

_DOC = re.compile(r"<REUTERS\s([^>]*)>(.*?)</REUTERS>", re.S)
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_TOPICS = re.compile(r"<TOPICS>(.*?)</TOPICS>", re.S)
_D = re.compile(r"<D>(.*?)</D>", re.S)
_TITLE = re.compile(r"<TITLE>(.*?)</TITLE>", re.S)
_BODY = re.compile(r"<BODY>(.*?)</BODY>", re.S)


@dataclass
class TopicData:
    """Tf-idf rows and a (rows, n_topics) 0/1 relevance matrix per split."""

    X_train: sp.csr_matrix
    Y_train: np.ndarray
    X_test: sp.csr_matrix
    Y_test: np.ndarray
    topics: list
    vocabulary: Vocabulary


def read_reuters(archive=DEFAULT_ARCHIVE, *, limit: int | None = None):
    """``{"train": [(newid, text, topics)], "test": [...]}`` for the ModApte split.

    ``limit`` keeps the first ``limit`` stories of each split.
    """
    out = {"train": [], "test": []}
    with tarfile.open(archive, "r:*") as tf:
        members = sorted((m for m in tf.getmembers() if re.search(r"reut2-\d{3}\.sgm$", m.name)),
                         key=lambda m: m.name)
        if not members:
            raise ValueError(f"{archive}: no reut2-NNN.sgm member")
        for m in members:
            if limit is not None and min(len(out["train"]), len(out["test"])) >= limit:
                break
            text = tf.extractfile(m).read().decode("latin-1")
            for attrs, body in _DOC.findall(text):
                a = dict(_ATTR.findall(attrs))
                if a.get("TOPICS") != "YES":
                    continue
                split = {"TRAIN": "train", "TEST": "test"}.get(a.get("LEWISSPLIT"))
                if split is None or (limit is not None and len(out[split]) >= limit):
                    continue
                tm = _TOPICS.search(body)
                topics = _D.findall(tm.group(1)) if tm else []
                title = _TITLE.search(body)
                main = _BODY.search(body)
                words = " ".join(html.unescape(x.group(1)) for x in (title, main) if x)
                out[split].append((int(a.get("NEWID", -1)), words, topics))
    return out


def load_reuters(archive=DEFAULT_ARCHIVE, *, n_topics: int = 25, max_features: int | None = 10_000,
                 limit: int | None = None, train_size: int | None = None, random_state: int = 0,
                 stop_words: bool = True) -> TopicData:
    """Tf-idf (vocabulary of the training stories) and the top-``n_topics`` relevance columns.

    ``train_size`` pools the ModApte stories and draws that many training
    stories at random (the rest is the test set), as in Pahikkala et al.
    (2009, §5.4: 500 training stories).  ``max_features=None`` keeps every
    training word.
    """
    data = read_reuters(archive, limit=limit)
    train, test = data["train"], data["test"]
    if train_size is not None:
        pool = train + test
        if not 0 < int(train_size) < len(pool):
            raise ValueError(f"train_size must be in 1..{len(pool) - 1}, got {train_size}")
        perm = np.random.default_rng(random_state).permutation(len(pool))
        train = [pool[i] for i in np.sort(perm[:train_size])]
        test = [pool[i] for i in np.sort(perm[train_size:])]
    counts = Counter(t for _, _, ts in train for t in set(ts))
    topics = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n_topics]]
    col = {t: j for j, t in enumerate(topics)}

    def relevance(docs):
        Y = np.zeros((len(docs), len(topics)), dtype=np.float64)
        for i, (_, _, ts) in enumerate(docs):
            for t in ts:
                if t in col:
                    Y[i, col[t]] = 1.0
        return Y

    tok_train = [tokenize(text, stop_words=stop_words) for _, text, _ in train]
    tok_test = [tokenize(text, stop_words=stop_words) for _, text, _ in test]
    vocab = Vocabulary.fit(tok_train, max_features or 10**9)
    return TopicData(vocab.tfidf(tok_train), relevance(train), vocab.tfidf(tok_test), relevance(test),
                     topics, vocab)
