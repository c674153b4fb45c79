"""Edits an attacker makes to a saved model on disk, for the crafted-model tests.

:func:`reseal` rewrites the model's record of its chunks
(``saved_arrays``, :mod:`streamrank._model_record`) to match the files on
disk -- what someone who crafts a model *and* edits its root ``zarr.json``
does.  The checks of each learner's state are then the last line of defence,
which is what the crafted-model tests exercise; the record itself is tested in
``test_model_record.py`` (there it is left alone).  Standard library only: the
fuzzing child process runs this source as well.
"""
from __future__ import annotations

import json
import os


def reseal(path) -> None:
    """Recompute the ``saved_arrays`` record of the model at ``path`` from its documents and chunk files."""
    path = str(path)
    meta = os.path.join(path, "zarr.json")
    with open(meta) as f:
        doc = json.load(f)
    record = doc["attributes"].get("saved_arrays")
    if record is None:
        return
    for label, entry in record.items():
        with open(os.path.join(path, label, "zarr.json")) as f:
            adoc = json.load(f)
        entry["data_type"], entry["shape"] = adoc["data_type"], adoc["shape"]
        entry["chunk_shape"] = adoc["chunk_grid"]["configuration"]["chunk_shape"]
        for key in entry["chunk_crc32c"]:
            try:
                with open(os.path.join(path, label, *key.split("/")), "rb") as f:
                    entry["chunk_crc32c"][key] = int.from_bytes(f.read()[-4:], "little")
            except FileNotFoundError:   # zarr deletes a chunk it rewrites to all zeros: it stays recorded (missing)
                pass
    with open(meta, "w") as f:
        json.dump(doc, f, indent=2)
