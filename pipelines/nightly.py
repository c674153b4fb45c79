"""Kept for checkouts and existing cron lines: the pipeline is the installed command ``streamrank nightly``
(:mod:`streamrank.pipelines.nightly`); this script runs the same ``main(argv)``."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# Run as a script, this folder is sys.path[0]: a file here named like a package (distributed.py: dask's
# ``distributed``) would shadow it.  Drop the folder; put the checkout first (works without pip install -e).
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from streamrank.pipelines.nightly import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
