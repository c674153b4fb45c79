"""MNIST (IDX files) to normalised pixel vectors and class tuples.

IDX: a big-endian header ``0x00 0x00 <dtype 0x08 = uint8> <ndim>`` followed by
``ndim`` uint32 sizes and the data (LeCun & Cortes).  Images become grey
values in [0, 1] (pixel / 255), each row scaled to unit L2 norm (cosine
geometry, so ``W = I`` is the cosine baseline of the sparse-SGD paper, §IV.A:
"the normalized grey scale pixel values are used as features", D = 784),
stored as CSR (about 19 % of the pixels are nonzero).
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .text import l2_normalize
from ._paths import data_path

__all__ = ["CITATION", "DEFAULT_DIR", "read_idx", "load_mnist", "PixelData"]

DEFAULT_DIR = str(data_path("mnist"))
CITATION = ("Y. LeCun, C. Cortes and C. J. C. Burges. The MNIST database of handwritten digits "
            "(CC BY-SA 3.0); Y. LeCun et al., Gradient-based learning applied to document "
            "recognition, Proc. IEEE 86(11), 1998.")

FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def read_idx(path, *, limit: int | None = None) -> np.ndarray:
    """Read a (gzip) IDX file of unsigned bytes; ``limit`` keeps the first items only."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        head = f.read(4)
        if len(head) != 4 or head[0] != 0 or head[1] != 0:
            raise ValueError(f"{path}: not an IDX file (magic {head!r})")
        if head[2] != 0x08:
            raise ValueError(f"{path}: IDX data type 0x{head[2]:02x} is not unsigned byte (0x08)")
        ndim = head[3]
        dims = np.frombuffer(f.read(4 * ndim), dtype=">u4").astype(np.int64)
        n = int(dims[0]) if limit is None else min(int(dims[0]), int(limit))
        item = int(np.prod(dims[1:])) if ndim > 1 else 1
        raw = f.read(n * item)
        if len(raw) != n * item:
            raise ValueError(f"{path}: truncated ({len(raw)} of {n * item} bytes)")
    return np.frombuffer(raw, dtype=np.uint8).reshape((n, *dims[1:]))


@dataclass
class PixelData:
    X_train: sp.csr_matrix
    y_train: np.ndarray
    X_test: sp.csr_matrix
    y_test: np.ndarray
    classes: list


def _vectors(images) -> sp.csr_matrix:
    X = sp.csr_matrix(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return l2_normalize(X)


def load_mnist(directory=DEFAULT_DIR, *, limit: int | None = None) -> PixelData:
    """Unit-L2 pixel vectors (CSR float32, 784 columns) and labels 0..9 of both splits."""
    out = {}
    for split, (img, lab) in FILES.items():
        images = read_idx(os.path.join(directory, img), limit=limit)
        labels = read_idx(os.path.join(directory, lab), limit=limit)
        if len(images) != len(labels):
            raise ValueError(f"{split}: {len(images)} images but {len(labels)} labels")
        out[split] = (_vectors(images), labels.astype(np.int64))
    return PixelData(out["train"][0], out["train"][1], out["test"][0], out["test"][1], list(range(10)))
