"""Datasets: synthetic generators and readers of public ranking data.

* :mod:`streamrank.datasets.synthetic` — LETOR-like groups from a hidden
  model, planted-W bilinear tuples;
* :mod:`streamrank.datasets.letor` — LETOR 3.0/4.0 text (MQ2008, OHSUMED) to a GroupStore;
* :mod:`streamrank.datasets.text` — tokenizer, vocabulary, tf-idf (no scikit-learn);
* :mod:`streamrank.datasets.tuples` — class tuples (q, d+, d-) from labelled vectors;
* :mod:`streamrank.datasets.newsgroups`, :mod:`~streamrank.datasets.mnist`,
  :mod:`~streamrank.datasets.reuters` — the real-data recipes' library code.

Submodules are imported on use.
"""
