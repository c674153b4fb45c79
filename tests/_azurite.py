"""Azurite (Microsoft's Azure Storage emulator) on loopback for the az:// tests, when it is installed.

Azurite is an npm package, not a Python one: ``npm install azurite`` and put
its ``azurite-blob`` on PATH, or name it in ``STREAMRANK_AZURITE``.  Without
it the az:// tests are skipped (they say so).  Containers are created with a
SharedKey-signed REST request (no Azure SDK needed).
"""
from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

__all__ = ["Azurite", "azurite_binary"]

ACCOUNT = "devstoreaccount1"      # Azurite's well-known development account and key
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
PORT = 10000                      # the emulator endpoint the Azure clients use (use_emulator)


def azurite_binary() -> str | None:
    return os.environ.get("STREAMRANK_AZURITE") or shutil.which("azurite-blob")


class Azurite:
    """``azurite-blob`` on 127.0.0.1:10000 (the port the clients' emulator mode expects)."""

    def __init__(self, binary: str, timeout: float = 60.0):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", PORT)) == 0:
                raise RuntimeError(f"port {PORT} is taken: Azurite needs it")
        self._dir = tempfile.mkdtemp(prefix="sr-azurite-")
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen([binary, "--blobHost", "127.0.0.1", "--blobPort", str(PORT), "--location",
                                       self._dir, "--skipApiVersionCheck", "--silent"],
                                      stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        self._n = itertools.count()
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self._proc.poll() is not None:
                raise RuntimeError(f"azurite exited with {self._proc.returncode}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/{ACCOUNT}?comp=list", timeout=2)
            except urllib.error.HTTPError:
                return                       # it answers (403 without credentials): up
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("azurite did not answer")

    storage_options = {"account_name": ACCOUNT, "account_key": KEY, "use_emulator": True}

    def new_container(self) -> str:
        """Create an empty container; its ``az://`` URL."""
        name = f"t{os.getpid()}x{next(self._n)}"
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S GMT")
        version, ctype = "2021-08-06", "application/octet-stream"
        to_sign = (f"PUT\n\n\n\n\n{ctype}\n\n\n\n\n\n\n" f"x-ms-date:{date}\nx-ms-version:{version}\n"
                   f"/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container")
        sig = base64.b64encode(hmac.new(base64.b64decode(KEY), to_sign.encode(), hashlib.sha256).digest()).decode()
        req = urllib.request.Request(f"http://127.0.0.1:{PORT}/{ACCOUNT}/{name}?restype=container", method="PUT",
                                     data=b"", headers={"Content-Type": ctype, "x-ms-date": date,
                                                        "x-ms-version": version,
                                                        "Authorization": f"SharedKey {ACCOUNT}:{sig}"})
        urllib.request.urlopen(req).close()
        return f"az://{name}"

    def stop(self) -> None:
        from _s3_server import stop_server

        stop_server(self._proc)
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)
