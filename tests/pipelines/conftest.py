"""One real LocalCluster for consecutive test modules that use it (the ``client`` fixture)."""
from __future__ import annotations

import pytest


class _Cluster:
    """A ``LocalCluster(n_workers=2, processes=True, threads_per_worker=1)`` and its client, started on demand.

    A start costs ~3-5 s (the scheduler, two nannies, two workers that import streamrank and load its kernels
    on their first task), so modules that follow each other share one cluster.  An idle cluster is not free
    either (~0.12 CPU-s a second here: heartbeats and monitors of five processes), so it is stopped at the end of a
    module unless the next test of this process uses it (:func:`pytest_runtest_teardown`), and at the end.
    """

    def __init__(self):
        self._stack = None
        self.client = None

    def get(self):
        if self.client is None:
            import contextlib

            import distributed

            from streamrank.distributed import local_cluster

            with contextlib.ExitStack() as stack:
                # MALLOC_TRIM_THRESHOLD_ left unset in the workers (see local_cluster)
                cluster = stack.enter_context(local_cluster(2))
                self.client = stack.enter_context(distributed.Client(cluster))
                self._stack = stack.pop_all()
        return self.client

    def stop(self):
        if self._stack is not None:
            stack, self._stack, self.client = self._stack, None, None
            stack.close()


_CLUSTER = _Cluster()


@pytest.fixture(scope="session")
def _cluster():
    yield _CLUSTER
    _CLUSTER.stop()


@pytest.fixture(scope="module")
def client(_cluster):
    """The shared cluster's client.  Tests hand it on as they found it: their futures are released when they
    end, monkeypatched client methods are restored by ``monkeypatch``, and after each test both workers are up
    (a test that killed one waits here until its nanny has replaced it)."""
    pytest.importorskip("distributed")
    return _cluster.get()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if _CLUSTER.client is None:
        return
    uses = "client" in getattr(item, "fixturenames", ())
    if nextitem is not None and getattr(nextitem, "module", None) is getattr(item, "module", None):
        if uses:                               # same module: its module-scoped client stays in use
            _CLUSTER.client.wait_for_workers(2, timeout=60)
    elif nextitem is not None and "client" in getattr(nextitem, "fixturenames", ()):
        _CLUSTER.client.wait_for_workers(2, timeout=60)   # the next module starts with a test that uses it
    else:
        _CLUSTER.stop()
