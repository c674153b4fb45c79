"""20 Newsgroups ("bydate") to tf-idf vectors and class tuples.

Reads the raw messages straight from ``20news-bydate.tar.gz`` (members
``20news-bydate-{train,test}/<group>/<id>``, latin-1), keeps the Subject
line and the body (the other headers name the sender and would leak the
class), tokenizes with :func:`streamrank.datasets.text.tokenize`, keeps the
10,000 most frequent training words and builds L2-normalised tf-idf rows
(:class:`streamrank.datasets.text.Vocabulary`) — the setup of the sparse-SGD
paper (Chen, Bai, Qi, Lin & Carbonell, ICDM 2010, §IV.A, Table I: 11,314
train / 7,532 test documents, 20 classes, D = 10,000).
"""
from __future__ import annotations

import math
import tarfile
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .text import Vocabulary, tokenize
from ._paths import data_path

__all__ = ["CITATION", "DEFAULT_ARCHIVE", "TextCorpus", "read_newsgroups", "load_newsgroups", "message_text"]

DEFAULT_ARCHIVE = str(data_path("20newsgroups", "20news-bydate.tar.gz"))
CITATION = ("K. Lang. NewsWeeder: Learning to filter netnews. ICML 1995 "
            "(20 Newsgroups, 'bydate' version by J. Rennie).")


@dataclass
class TextCorpus:
    """Vectors and labels of a train/test text collection."""

    X_train: sp.csr_matrix
    y_train: np.ndarray
    X_test: sp.csr_matrix
    y_test: np.ndarray
    classes: list
    vocabulary: Vocabulary


def message_text(raw: bytes, *, keep_headers: bool = False) -> str:
    """Subject line + body of a Usenet message (all headers with ``keep_headers``)."""
    text = raw.decode("latin-1")
    head, sep, body = text.partition("\n\n")
    if not sep:
        return text
    if keep_headers:
        return text
    subject = [line[len("Subject:"):] for line in head.split("\n") if line.startswith("Subject:")]
    return " ".join(subject) + "\n" + body


def read_newsgroups(archive=DEFAULT_ARCHIVE, *, limit: int | None = None, keep_headers: bool = False):
    """``{split: (texts, group names)}`` for split in train / test, in archive order.

    ``limit`` keeps at most ``ceil(limit / 20)`` messages per group and split
    (a small slice with every class).
    """
    out = {"train": ([], []), "test": ([], [])}
    per_group = None if limit is None else max(1, math.ceil(int(limit) / 20))
    seen: dict = {}
    with tarfile.open(archive, "r:*") as tf:
        for m in tf:
            if not m.isfile():
                continue
            parts = m.name.split("/")
            if len(parts) != 3 or not parts[0].startswith("20news-bydate-"):
                continue
            split = parts[0].rsplit("-", 1)[1]
            if split not in out:
                continue
            key = (split, parts[1])
            if per_group is not None and seen.get(key, 0) >= per_group:
                continue
            seen[key] = seen.get(key, 0) + 1
            raw = tf.extractfile(m).read()
            out[split][0].append(message_text(raw, keep_headers=keep_headers))
            out[split][1].append(parts[1])
    return out


def load_newsgroups(archive=DEFAULT_ARCHIVE, *, max_features: int = 10_000, limit: int | None = None,
                    keep_headers: bool = False, stop_words: bool = True) -> TextCorpus:
    """Tf-idf over the ``max_features`` most frequent training words; labels 0..19."""
    data = read_newsgroups(archive, limit=limit, keep_headers=keep_headers)
    tok_train = [tokenize(t, stop_words=stop_words) for t in data["train"][0]]
    tok_test = [tokenize(t, stop_words=stop_words) for t in data["test"][0]]
    vocab = Vocabulary.fit(tok_train, max_features)
    classes = sorted(set(data["train"][1]))
    index = {c: i for i, c in enumerate(classes)}
    y_train = np.array([index[g] for g in data["train"][1]], dtype=np.int64)
    y_test = np.array([index[g] for g in data["test"][1]], dtype=np.int64)
    return TextCorpus(vocab.tfidf(tok_train), y_train, vocab.tfidf(tok_test), y_test, classes, vocab)
