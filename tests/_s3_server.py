"""A real S3-compatible server on loopback for the tests: moto's standalone server in its own process.

Not a mocked client: the server is ``python -m moto.server`` listening on
127.0.0.1 (a free port), and every request goes over HTTP through the same
client stack (s3fs → aiobotocore → botocore) a user's code uses against AWS or
MinIO.  One server per test session (started on first use, stopped at the
end; see the ``s3_server`` / ``s3_url`` fixtures in ``conftest.py``); each test
gets its own bucket, so tests never see each other's objects.

Use from a test::

    def test_x(s3_server, s3_url):
        store = sr.GroupStore.create(s3_url + "/train.zarr", 3, storage_options=s3_server.storage_options)

and, for a child process (a writer killed mid-append, a dask worker),
``env={**os.environ, **s3_server.env}``: the usual AWS environment variables
(``AWS_ENDPOINT_URL`` included), so ``s3://`` URLs need no storage options there.
"""
from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

__all__ = ["S3Server", "stop_server"]

_KEY, _SECRET, _REGION = "streamrank-test", "streamrank-test-secret", "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """``python -m moto.server`` on 127.0.0.1; :meth:`new_bucket` gives each test an empty bucket."""

    def __init__(self, timeout: float = 60.0):
        try:
            import moto  # noqa: F401
        except ImportError:  # pragma: no cover - the test extra installs it
            raise ImportError("the S3 tests need moto's server: pip install 'streamrank[test]'") from None
        self._buckets = itertools.count()
        last = None
        for _attempt in range(3):          # another process may take the free port between probe and bind
            self.port = _free_port()
            self.endpoint_url = f"http://127.0.0.1:{self.port}"
            self._log = tempfile.TemporaryFile()   # the server logs every request: a pipe would fill up
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log,
                env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")})
            try:
                self._wait(timeout)
                return
            except RuntimeError as exc:
                last = exc
                self.stop()
        raise last

    def _wait(self, timeout: float) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self._proc.poll() is not None:
                self._log.seek(0)
                err = self._log.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"moto server exited with {self._proc.returncode}: {err}")
            try:
                urllib.request.urlopen(self.endpoint_url + "/moto-api/", timeout=2).close()
                return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise RuntimeError(f"moto server did not answer on {self.endpoint_url} within {timeout} s")

    @property
    def storage_options(self) -> dict:
        """fsspec/s3fs options for this server (what ``storage_options=`` takes)."""
        return {"endpoint_url": self.endpoint_url, "key": _KEY, "secret": _SECRET,
                "client_kwargs": {"region_name": _REGION}}

    @property
    def env(self) -> dict:
        """The usual AWS environment variables pointing at this server (for child processes / the CLI)."""
        return {"AWS_ENDPOINT_URL": self.endpoint_url, "AWS_ACCESS_KEY_ID": _KEY,
                "AWS_SECRET_ACCESS_KEY": _SECRET, "AWS_DEFAULT_REGION": _REGION}

    def new_bucket(self, prefix: str = "t") -> str:
        """Create an empty bucket and return its ``s3://`` URL."""
        import s3fs

        name = f"{prefix}-{os.getpid()}-{next(self._buckets)}"
        fs = s3fs.S3FileSystem(**self.storage_options)     # fsspec's cached instance: the tests' own client
        fs.call_s3("create_bucket", Bucket=name)     # (mkdir would send us-east-1 as a location constraint)
        return f"s3://{name}"

    def stop(self) -> None:
        stop_server(self._proc)
        self._log.close()


def stop_server(proc) -> None:
    """Terminate a server process of the tests (SIGTERM, then SIGKILL after 10 s) and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:   # pragma: no cover
            proc.kill()
            proc.wait()
