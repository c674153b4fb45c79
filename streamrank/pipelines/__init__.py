"""Production entry points over streamrank's public API.

* :mod:`streamrank.pipelines.nightly` — one night of retraining on growing logs
  (ingest → incremental update → λ selection → validation → atomic promotion);
* :mod:`streamrank.pipelines.distributed` — fit / evaluate a learner on a dask cluster.

Each module has a ``main(argv)`` (the command line) and library functions it calls.
"""
