"""Fixtures of the two-user tests (:mod:`tests.hardening.two_users`)."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def two_users_preloaded():
    from .two_users import preload

    if hasattr(os, "geteuid") and os.geteuid() == 0:
        preload()


@pytest.fixture
def shared(two_users_preloaded):
    """A world-writable sticky directory (``/tmp``'s mode) with a kernel module anyone can import."""
    from .two_users import shared_dir

    with shared_dir() as d:
        yield d
