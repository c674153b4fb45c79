"""Data recipes: commands that turn synthetic and real datasets into stores with bounded memory.

Each recipe is a module with ``main(argv)``, run as ``python -m streamrank.recipes.NAME --help``:

* :mod:`streamrank.recipes.synthetic` — LETOR-like graded groups, planted bilinear tuples;
* :mod:`streamrank.recipes.letor` — LETOR / svmlight text (MQ2008, OHSUMED, your own) → GroupStore or Parquet;
* :mod:`streamrank.recipes.clicks` — simulated position-biased click logs on MQ2008 / OHSUMED → GroupStore
  with ``click`` and ``position`` columns (and result-randomization sessions);
* :mod:`streamrank.recipes.newsgroups` — 20 Newsgroups → tf-idf CSR and (q, d+, d−) TupleStores;
* :mod:`streamrank.recipes.mnist` — MNIST → normalised pixels and class tuples;
* :mod:`streamrank.recipes.reuters` — Reuters-21578 ModApte → tf-idf and topic relevance columns.

Every recipe prints its dataset's citation.  Real datasets are read from ``../shared/data/``, from
``$STREAMRANK_DATA`` or from the path given; they are never copied.
"""

#: the recipes, in the order ``streamrank recipe --help`` lists them
RECIPES = ("synthetic", "letor", "clicks", "newsgroups", "mnist", "reuters")
